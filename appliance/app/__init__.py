"""The web app (``maxy app``): admin shell, data and graph pages, public agent pages, /sites.

Served by Granian on a Unix socket; only the edge talks to it. The edge tells the app who is
asking through the ``X-Maxy-*`` headers (see :mod:`appliance.web.client`).
"""
