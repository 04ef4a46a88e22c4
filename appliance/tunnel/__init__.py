"""Remote access through a Cloudflare tunnel: cloudflared's config, host-name roles, the CLI.

Errors::

    TunnelError                 anything `maxy tunnel` or the config code refuses
    ├── ConfigError             config.yml (or roles.json) is invalid; nothing was written
    └── CloudflaredError        the cloudflared program is missing or a command of it failed
"""

from __future__ import annotations


class TunnelError(Exception):
    """Something about the tunnel Maxy cannot do; the message says what to do."""


class ConfigError(TunnelError):
    """A cloudflared configuration is invalid; the running one was left untouched."""


class CloudflaredError(TunnelError):
    """The cloudflared program is missing, or one of its commands failed."""
