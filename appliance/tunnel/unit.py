"""The systemd unit that runs cloudflared for Maxy (``Type=notify``, ``--no-autoupdate``).

cloudflared tells systemd it is ready once its first connection to Cloudflare is up, so
``Type=notify`` makes "started" mean "connected"; updates come with the image, never from
cloudflared itself.
"""

from __future__ import annotations

import shlex
from importlib.resources import files
from string import Template

from appliance.core.config import Settings


def render_unit(
    settings: Settings, binary: str = "/usr/bin/cloudflared", user: str = "maxy"
) -> str:
    """The unit file text for this device's config.yml."""
    template = Template(files("appliance.tunnel").joinpath("cloudflared.service").read_text())
    return template.substitute(
        binary=shlex.quote(binary), config=shlex.quote(str(settings.cloudflared_config)), user=user
    )
