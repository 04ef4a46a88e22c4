"""Starting, stopping and restarting the tunnel's unit from the unprivileged ``maxy`` user.

The roles and the owner's sessions run as ``maxy``, whom systemd does not let manage units. The
card's base has no polkit, so the standard mechanism here is a root path unit, as for updates:

1. ``maxy tunnel start|stop|restart`` (and ``create``, ``route``, ``remove``, which need one)
   writes ``<data_dir>/cloudflared/request.json`` — a verb and a request id, nothing else.
2. ``maxy-tunnel-request.path`` (``PathExists=`` that file) starts ``maxy-tunnel-request.service``
   as root, which runs ``maxy tunnel run-request``.
3. It takes the request (removes it before anything else, so the path unit never loops; a
   symbolic link, a non-file or an oversized file is removed and refused), and runs
   ``systemctl --no-block VERB UNIT``: the verb only one of start, stop, restart, the unit only
   ``MAXY_TUNNEL_UNIT`` from root's own settings — nothing in the file can name another unit.
4. It writes ``answer.json`` beside the request (the id, the verb, ok, a message), which the
   waiting ``maxy tunnel`` prints.

``--no-block``: cloudflared's unit is ``Type=notify`` and "started" means "connected to
Cloudflare", which may take long or never happen offline; ``maxy tunnel status`` shows the
connection. Without ``MAXY_TUNNEL_UNIT`` (development) there is no unit to manage, and the
commands say how to run cloudflared by hand.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import stat
import time
from pathlib import Path
from typing import Any, Literal

from appliance.core.config import Settings
from appliance.core.fsio import write_atomic
from appliance.core.proc import ToolError, run
from appliance.tunnel import CloudflaredError, TunnelError

log = logging.getLogger(__name__)

Verb = Literal["start", "stop", "restart"]
VERBS: tuple[Verb, ...] = ("start", "stop", "restart")
ANSWER_TIMEOUT = 30.0  # the path unit reacts within a second; this allows for a busy device
SYSTEMCTL_TIMEOUT = 30.0
MAX_REQUEST_BYTES = 4096
_ID = re.compile(r"^[0-9a-f]{8,64}$")


def request_path(settings: Settings) -> Path:
    """Where ``maxy tunnel`` leaves a request (``maxy-tunnel-request.path`` watches it)."""
    return settings.cloudflared_dir / "request.json"


def answer_path(settings: Settings) -> Path:
    """Where ``maxy tunnel run-request`` answers."""
    return settings.cloudflared_dir / "answer.json"


def by_hand(settings: Settings) -> str:
    """How to run the tunnel where no unit manages it."""
    config = shlex.quote(str(settings.cloudflared_config))
    return (
        "no tunnel unit on this machine (MAXY_TUNNEL_UNIT is unset); run it yourself: "
        f"{settings.cloudflared_bin} --no-autoupdate --config {config} tunnel run"
    )


def ask(settings: Settings, verb: Verb, timeout: float = ANSWER_TIMEOUT) -> str:
    """Ask root to ``verb`` the tunnel's unit; its answer, or TunnelError saying what failed."""
    if not settings.tunnel_unit:
        raise TunnelError(by_hand(settings))
    request_id = secrets.token_hex(8)
    answer = answer_path(settings)
    settings.cloudflared_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(
        request_path(settings), json.dumps({"verb": verb, "id": request_id}) + "\n", mode=0o600
    )
    log.info("[tunnel] op=unit-request verb=%s id=%s", verb, request_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        said = _read_answer(answer)
        if said.get("id") == request_id:
            message = str(said.get("message", ""))
            if said.get("ok") is not True:
                raise CloudflaredError(f"could not {verb} {settings.tunnel_unit}: {message}")
            return message
        time.sleep(0.1)
    raise CloudflaredError(
        f"nobody took the request to {verb} {settings.tunnel_unit} within {timeout:.0f} s: "
        f"is maxy-tunnel-request.path active (systemctl status maxy-tunnel-request.path)?"
    )


def _read_answer(path: Path) -> dict[str, Any]:
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return said if isinstance(said, dict) else {}


def take_request(path: Path) -> dict[str, Any] | None:
    """Remove the request and return what it says; None if there is none or it is unreadable.

    Root reads a file that ``maxy`` writes: it is opened without following a link and read only
    as far as a request can be long, and it is gone before anything acts on it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:  # ELOOP: a symbolic link; anything else: not ours to read
        _remove(path)
        log.warning("[tunnel] op=take-request refused reason=%s", type(err).__name__)
        return None
    try:
        _remove(path)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            log.warning("[tunnel] op=take-request refused reason=not-a-file")
            return None
        raw = os.read(fd, MAX_REQUEST_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_REQUEST_BYTES:
        log.warning("[tunnel] op=take-request refused reason=too-long")
        return None
    try:
        request = json.loads(raw)
    except ValueError:
        log.warning("[tunnel] op=take-request refused reason=not-json")
        return None
    return request if isinstance(request, dict) else None


def _remove(path: Path) -> None:
    """Remove what is at ``path`` (an empty folder too), so that PathExists= stops holding."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            path.rmdir()


def run_request(settings: Settings) -> int:
    """``maxy tunnel run-request`` (root, from the path unit): carry out one request, answer."""
    request = take_request(request_path(settings))
    if request is None:
        return 0
    request_id = request.get("id")
    if not isinstance(request_id, str) or not _ID.match(request_id):
        log.warning("[tunnel] op=run-request refused reason=bad-id")
        return 1
    verb = request.get("verb")
    unit = settings.tunnel_unit
    if verb not in VERBS:
        ok, message = False, f"{str(verb)[:40]!r} is not one of {', '.join(VERBS)}"
    elif not unit:
        ok, message = False, "MAXY_TUNNEL_UNIT is not set on this device"
    else:
        ok, message = _systemctl(str(verb), unit)
    log.info(
        "[tunnel] op=run-request id=%s verb=%s unit=%s ok=%s",
        request_id,
        str(verb)[:40],
        unit,
        ok,
    )
    answer = {"id": request_id, "verb": verb if ok else None, "ok": ok, "message": message}
    write_atomic(answer_path(settings), json.dumps(answer) + "\n", mode=0o644)
    return 0 if ok else 1


def _systemctl(verb: str, unit: str) -> tuple[bool, str]:
    try:
        done = run(["systemctl", "--no-block", verb, unit], timeout=SYSTEMCTL_TIMEOUT)
    except ToolError as err:
        return False, f"could not run systemctl ({err})"
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        return False, said[-1] if said else f"systemctl exited {done.returncode}"
    return True, f"Asked systemd to {verb} {unit} (`maxy tunnel status` shows the connection)."
