"""The image builder: what a person flashes onto a card, and the matching signed update bundle.

``python -m image.build`` (``just image``) — see ``image/build.py`` for the whole recipe.
"""
