"""The search engine's query expander, built only when there is an Anthropic key.

Kept apart from :mod:`appliance.agents.retrieval` so that asking costs nothing: without a key
file the SDK is never imported into the engine.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from appliance.core.config import Settings


def paraphraser(settings: Settings) -> Callable[[str], Awaitable[list[str]]] | None:
    """The Anthropic query expander when a key file exists, else None (the SDK stays unloaded)."""
    if not settings.anthropic_api_key_path.is_file():
        return None
    from appliance.agents.anthropic_client import AnthropicClient  # lazy: loads the SDK
    from appliance.agents.retrieval import make_expander

    return make_expander(AnthropicClient(settings), settings)
