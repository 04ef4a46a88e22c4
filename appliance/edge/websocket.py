"""The edge's WebSocket handshake checks, made before the app is asked.

The Host must be a plain ``host[:port]`` (it becomes part of the upstream URI) and a browser's
``Origin``, when sent, must name it. Frames and closes are relayed by
:mod:`appliance.web.wsrelay`, which also refuses handshakes (:func:`deny`).
"""

from __future__ import annotations

import logging
import re

from starlette.types import Scope, Send

from appliance.core.logs import kv
from appliance.edge.network import same_origin
from appliance.web.wsrelay import deny as deny

log = logging.getLogger(__name__)

_HOST = re.compile(r"(?:[A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


async def checked_host(scope: Scope, send: Send) -> str | None:
    """The handshake's Host when it may be relayed; else refuse it and return None."""
    headers: dict[bytes, bytes] = dict(scope["headers"])
    host = headers.get(b"host", b"app").decode("latin-1")
    if not _HOST.fullmatch(host):  # it becomes part of the upstream URI: nothing else fits
        await deny(scope, send, 400, b"Bad Host header.")
        return None
    origin = headers[b"origin"].decode("latin-1") if b"origin" in headers else None
    if origin is not None and not same_origin(origin, host):
        log.info("[edge] %s", kv(op="ws-refused", path=scope["path"], origin=origin, host=host))
        await deny(scope, send, 403, b"Cross-origin WebSocket refused.")
        return None
    return host
