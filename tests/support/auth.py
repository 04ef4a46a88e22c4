"""Log a test client in as a browser ends up: a login cookie signed with the device's key."""

from __future__ import annotations

from appliance.core.config import Settings
from appliance.web import cookies, csrf


def admin_cookie(settings: Settings, network: str = "lan") -> dict[str, str]:
    """The ``Cookie`` header of a fresh admin login on ``network`` (the key made if missing)."""
    key = cookies.load_key(settings.cookie_key_path)
    session = cookies.issue(network, cookies.read_generation(settings.keys_dir))
    return {"Cookie": f"{cookies.COOKIE_NAME}={cookies.sign(key, session)}"}


def admin_headers(settings: Settings, network: str = "lan") -> dict[str, str]:
    """A fresh admin login's cookie and its CSRF token: what a logged-in page sends on a POST."""
    key = cookies.load_key(settings.cookie_key_path)
    session = cookies.issue(network, cookies.read_generation(settings.keys_dir))
    return {
        "Cookie": f"{cookies.COOKIE_NAME}={cookies.sign(key, session)}",
        csrf.CSRF_HEADER: csrf.token(key, session.id),
    }
