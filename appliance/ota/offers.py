"""Update offers and install requests: the hand-over between the admin UI and root.

The app runs as the unprivileged ``maxy`` user and never writes a slot. Root processes do, and
only on the owner's explicit confirmation. They meet in ``<data_dir>/updates``
(:class:`UpdatePaths`)::

    incoming/<id>.maxyupdate   bundles copied off USB sticks by ``maxy ota watch-usb`` (root)
    offers.json                {"offers": [Offer, …]}: what the admin UI lists (root writes)
    requests/request.json      {"offer", "nonce", "sha256", "bootId", "requestedAt"} (app writes)
    progress.jsonl             one JSON line per progress event of the latest run (root writes)
    run.lock                   held (flock) by ``maxy ota run-request`` while it runs
    nonces.json                nonces of requests already taken (duplicates are refused)

The owner confirms an offer in the admin UI; the app writes the request; the path unit
``maxy-ota-request.path`` (``PathExists=`` the request) starts ``maxy ota run-request``, which
takes the request (deletes it first, so the unit never loops), checks it — fresh, from this boot,
not seen before, naming a verified offer whose file still has the offered sha256 — and runs
``maxy ota apply <file> --progress json --yes``, appending each progress line it prints to
progress.jsonl with a run id. A refused request is reported there too, as an ``error`` line.

Errors::

    OtaError                      (appliance.ota.errors)
     └── RequestRefused           stale, duplicate, another run active, no such verified offer,
                                  or the offered file changed since it was verified
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import secrets
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from appliance.core.config import Settings
from appliance.core.fsio import sha256_file, write_atomic
from appliance.core.logs import kv
from appliance.ota.errors import OtaError

log = logging.getLogger(__name__)

#: A request older than this is stale: the owner confirmed long ago, or before a reboot.
REQUEST_TTL_S = 600.0
#: A request from the future beyond this much clock skew is refused as well.
CLOCK_SKEW_S = 60.0
#: How long run-request waits for the run lock before refusing ("another update is running").
LOCK_WAIT_S = 5.0
#: The longest a whole apply may take before run-request stops it (each phase has its own limit).
RUN_TIMEOUT_S = 3 * 3600.0
MAX_REQUEST_BYTES = 4096
MAX_OFFERS_BYTES = 1024 * 1024
KEEP_NONCES = 200
TERMINAL_PHASES = frozenset({"done", "error"})
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_ID = re.compile(r"^[0-9a-f]{16}$")
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


class RequestRefused(OtaError):
    """An install request was not carried out; the message says why and what to do."""


def now_iso() -> str:
    """The current UTC time as ``2026-01-31T12:00:00Z``."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def parse_iso(text: str) -> float | None:
    """Seconds since the epoch of an ISO time, or None when it is not one."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp()


def boot_id() -> str:
    """This boot's id (a request written before a reboot is stale)."""
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class UpdatePaths:
    """Where offers, requests and progress live (``<data_dir>/updates``)."""

    root: Path

    @classmethod
    def from_settings(cls, settings: Settings) -> UpdatePaths:
        """The update directory of these settings."""
        return cls(settings.data_dir / "updates")

    @property
    def incoming(self) -> Path:
        """Bundles copied off USB sticks."""
        return self.root / "incoming"

    @property
    def offers(self) -> Path:
        """The offers the admin UI lists."""
        return self.root / "offers.json"

    @property
    def requests(self) -> Path:
        """The one directory the app may write (group ``maxy`` on the device)."""
        return self.root / "requests"

    @property
    def request(self) -> Path:
        """The pending install request, if any."""
        return self.requests / "request.json"

    @property
    def progress(self) -> Path:
        """Progress lines of the latest run."""
        return self.root / "progress.jsonl"

    @property
    def lock(self) -> Path:
        """Held while a run is active."""
        return self.root / "run.lock"

    @property
    def nonces(self) -> Path:
        """Nonces of requests already taken."""
        return self.root / "nonces.json"

    def bundle(self, offer: Offer) -> Path:
        """The copied bundle of an offer."""
        return self.incoming / f"{offer.id}.maxyupdate"


@dataclass(frozen=True)
class Offer:
    """A bundle found on a USB stick: verified and installable, or refused with the reason."""

    id: str  # the first 16 hex digits of the bundle's sha256
    name: str  # the file name on the stick
    size: int
    sha256: str
    verified: bool
    source: str  # the device it came from, e.g. "/dev/sda1 (SanDisk Cruzer Blade)"
    found_at: str
    version: str | None = None
    boards: tuple[str, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The offer as stored in offers.json and sent to the admin UI."""
        return {
            "id": self.id,
            "name": self.name,
            "size": self.size,
            "sha256": self.sha256,
            "verified": self.verified,
            "source": self.source,
            "foundAt": self.found_at,
            "version": self.version,
            "boards": list(self.boards),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Offer | None:
        """Parse one stored offer; None when it is malformed."""
        try:
            offer = cls(
                id=str(data["id"]),
                name=str(data["name"]),
                size=int(data["size"]),
                sha256=str(data["sha256"]),
                verified=data["verified"] is True,
                source=str(data.get("source") or ""),
                found_at=str(data.get("foundAt") or ""),
                version=None if data.get("version") is None else str(data["version"]),
                boards=tuple(str(b) for b in data.get("boards") or ()),
                error=None if data.get("error") is None else str(data["error"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return offer if _ID.match(offer.id) else None


def write_json_atomic(path: Path, data: Any, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` as JSON: a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n", mode=mode)


def read_small_json(path: Path, limit: int) -> Any:
    """Read a JSON file of at most ``limit`` bytes without following a symlink.

    Raises FileNotFoundError when it is absent and ValueError when it is not usable JSON.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise FileNotFoundError(path) from err
        raise ValueError(f"{path} cannot be opened ({err.strerror})") from err
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file")
        raw = handle.read(limit + 1)
    if len(raw) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    try:
        return json.loads(raw)
    except ValueError as err:
        raise ValueError(f"{path} is not valid JSON ({err})") from err


def load_offers(paths: UpdatePaths) -> list[Offer]:
    """The recorded offers, newest first; a missing or broken file means none."""
    try:
        data = read_small_json(paths.offers, MAX_OFFERS_BYTES)
    except FileNotFoundError:
        return []
    except ValueError as err:
        log.warning("[ota-offers] op=load error=unreadable %s", kv(detail=str(err)))
        return []
    items = data.get("offers") if isinstance(data, dict) else None
    offers = [o for o in (Offer.from_json(i) for i in items or [] if isinstance(i, dict)) if o]
    return sorted(offers, key=lambda o: o.found_at, reverse=True)


def save_offers(paths: UpdatePaths, offers: Sequence[Offer]) -> None:
    """Record ``offers`` (newest first) for the admin UI."""
    ordered = sorted(offers, key=lambda o: o.found_at, reverse=True)
    write_json_atomic(paths.offers, {"offers": [o.to_json() for o in ordered]})


def find_offer(paths: UpdatePaths, offer_id: str) -> Offer | None:
    """The offer with this id, if recorded."""
    return next((o for o in load_offers(paths) if o.id == offer_id), None)


def new_nonce() -> str:
    """A fresh request nonce."""
    return secrets.token_urlsafe(18)


# ── The app's side ──────────────────────────────────────────────────────────────────────────


def request_pending(paths: UpdatePaths) -> bool:
    """Whether a request waits for run-request (one too old to be carried out does not)."""
    try:
        age = time.time() - paths.request.stat().st_mtime
    except OSError:
        return False
    return age <= REQUEST_TTL_S


def run_active(paths: UpdatePaths) -> bool:
    """Whether ``maxy ota run-request`` holds the run lock right now."""
    try:
        fd = os.open(paths.lock, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops a shared lock we may have taken
    return False


def write_request(paths: UpdatePaths, offer: Offer, nonce: str) -> dict[str, Any]:
    """Ask root to install ``offer`` (the owner confirmed it); return the request written."""
    if not offer.verified:
        raise RequestRefused(f"The update {offer.name} was refused ({offer.error}).")
    request = {
        "offer": offer.id,
        "nonce": nonce,
        "sha256": offer.sha256,
        "bootId": boot_id(),
        "requestedAt": now_iso(),
    }
    paths.requests.mkdir(parents=True, exist_ok=True)
    write_json_atomic(paths.request, request, mode=0o640)
    log.info("[ota-offers] op=request %s", kv(offer=offer.id, version=offer.version))
    return request


# ── Root's side: maxy ota run-request ───────────────────────────────────────────────────────


@dataclass
class Run:
    """One run-request invocation: its id and where its progress goes."""

    paths: UpdatePaths
    id: str = field(default_factory=lambda: secrets.token_hex(6))
    offer: Offer | None = None
    request_nonce: str = ""

    def line(self, phase: str, message: str, done: int = 0, total: int = 0) -> dict[str, Any]:
        """A progress line of this run."""
        return {
            "run": self.id,
            "offer": self.offer.id if self.offer else None,
            "version": self.offer.version if self.offer else None,
            "phase": phase,
            "done": done,
            "total": total,
            "message": message,
            "at": now_iso(),
        }

    def start_file(self, first: Mapping[str, Any]) -> None:
        """Replace progress.jsonl with this run's first line (readers follow the new file)."""
        self.paths.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.paths.progress, json.dumps(first, ensure_ascii=False) + "\n")

    def append(self, line: Mapping[str, Any]) -> None:
        """Append one line to progress.jsonl (one write: a reader never sees half a line)."""
        data = (json.dumps(line, ensure_ascii=False) + "\n").encode()
        fd = os.open(
            self.paths.progress, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644
        )
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def take_request(paths: UpdatePaths) -> dict[str, Any] | None:
    """Read and delete the pending request (None when there is none)."""
    try:
        data = read_small_json(paths.request, MAX_REQUEST_BYTES)
    except FileNotFoundError:
        return None
    except ValueError as err:
        with contextlib.suppress(FileNotFoundError):
            paths.request.unlink()
        raise RequestRefused(f"The install request is unreadable ({err}). Confirm again.") from err
    paths.request.unlink()
    if not isinstance(data, dict):
        raise RequestRefused("The install request is not a JSON object. Confirm again.")
    return data


def _remember_nonce(paths: UpdatePaths, nonce: str) -> None:
    try:
        seen = read_small_json(paths.nonces, MAX_OFFERS_BYTES)
    except (FileNotFoundError, ValueError):
        seen = []
    nonces = [n for n in seen if isinstance(n, str)] if isinstance(seen, list) else []
    if nonce in nonces:
        raise RequestRefused(
            "This install request was already carried out once; it is not run twice. "
            "Confirm the update again in the admin page to retry."
        )
    write_json_atomic(paths.nonces, [*nonces, nonce][-KEEP_NONCES:], mode=0o600)


def check_request(paths: UpdatePaths, request: Mapping[str, Any], now: float) -> Offer:
    """The offer a fresh, first-seen request names, after re-hashing its file; else refuse."""
    nonce = request.get("nonce")
    if not isinstance(nonce, str) or not _NONCE.match(nonce):
        raise RequestRefused("The install request has no valid nonce. Confirm again.")
    requested = parse_iso(str(request.get("requestedAt") or ""))
    if requested is None or now - requested > REQUEST_TTL_S or requested - now > CLOCK_SKEW_S:
        raise RequestRefused(
            "The install request is stale (confirmed more than "
            f"{int(REQUEST_TTL_S // 60)} minutes ago). Confirm the update again."
        )
    if request.get("bootId") != boot_id():
        raise RequestRefused(
            "The install request was made before Maxy restarted. Confirm the update again."
        )
    _remember_nonce(paths, nonce)
    offer_id = str(request.get("offer") or "")
    offer = find_offer(paths, offer_id) if _ID.match(offer_id) else None
    if offer is None:
        raise RequestRefused(
            "The update to install is no longer offered. Plug the USB stick in again."
        )
    if not offer.verified:
        raise RequestRefused(f"The update {offer.name} was refused ({offer.error}).")
    if request.get("sha256") != offer.sha256:
        raise RequestRefused(
            "The offer changed after it was confirmed. Check the offer and confirm again."
        )
    bundle = paths.bundle(offer)
    try:
        actual = sha256_file(bundle)
    except OSError as err:
        raise RequestRefused(
            f"The copied update {bundle} cannot be read ({err.strerror}). "
            "Plug the USB stick in again."
        ) from err
    if actual != offer.sha256:
        raise RequestRefused(
            f"The copied update {bundle.name} changed after it was verified (sha256 "
            f"{actual[:16]}…, expected {offer.sha256[:16]}…). Nothing was installed; "
            "plug the USB stick in again."
        )
    return offer


@contextlib.contextmanager
def run_lock(paths: UpdatePaths, wait: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the run lock, or refuse when another run holds it for ``wait`` seconds."""
    paths.root.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as err:
                if time.monotonic() >= deadline:
                    raise RequestRefused(
                        "Another update is being installed right now. Wait until it finishes."
                    ) from err
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def apply_command(bundle: Path) -> list[str]:
    """How to run ``maxy ota apply`` on ``bundle``: this same binary (frozen) or module."""
    tail = ["ota", "apply", str(bundle), "--progress", "json", "--yes"]
    if getattr(sys, "frozen", False):
        return [sys.executable, *tail]
    return [sys.executable, "-m", "appliance", *tail]


def _progress_of(raw: str) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("phase"), str):
        return None
    return data


def _relay(run: Run, stdout: IO[str]) -> str | None:
    """Append each progress line of apply; return the last phase seen."""
    last: str | None = None
    for raw in stdout:
        data = _progress_of(raw.strip())
        if data is None:
            if raw.strip():
                log.info("[ota-request] op=apply-output %s", kv(run=run.id, line=raw.strip()[:300]))
            continue
        last = str(data["phase"])
        run.append(
            run.line(
                last,
                str(data.get("message") or ""),
                int(data.get("done") or 0),
                int(data.get("total") or 0),
            )
        )
    return last


def execute(run: Run, offer: Offer, command: Sequence[str]) -> int:
    """Run apply, relaying its progress; return its exit status."""
    log.info("[ota-request] op=apply %s", kv(run=run.id, offer=offer.id, version=offer.version))
    try:
        proc = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, bufsize=1
        )
    except OSError as err:
        run.append(run.line("error", f"maxy ota apply could not be started ({err})."))
        return 127
    # apply limits each phase itself; this only ends a run that hangs beyond all of them.
    timer = threading.Timer(RUN_TIMEOUT_S, proc.kill)
    timer.start()
    try:
        with proc:
            assert proc.stdout is not None
            last = _relay(run, proc.stdout)
            code = proc.wait()
    finally:
        timer.cancel()
    if last not in TERMINAL_PHASES and last != "reboot":
        message = (
            "The update stopped before it finished "
            f"(maxy ota apply exited with status {code}). Nothing was switched; "
            "Maxy keeps running the current version. See `journalctl -u maxy-ota-request`."
        )
        run.append(run.line("error", message))
    log.info("[ota-request] op=apply-exit %s", kv(run=run.id, status=code, last=last or "none"))
    return code


def run_request(
    paths: UpdatePaths, command_for: Callable[[Path], list[str]] = apply_command
) -> int:
    """Carry out the pending install request, if any: 0 done or nothing to do, 1 refused/failed."""
    try:
        request = take_request(paths)
    except RequestRefused as err:
        refused = Run(paths)
        refused.append(refused.line("error", str(err)))
        log.warning("[ota-request] op=refuse %s", kv(run=refused.id, reason=str(err)))
        return 1
    if request is None:
        log.info("[ota-request] op=idle reason=no-request")
        return 0
    run = Run(paths)
    try:
        with run_lock(paths):
            run.offer = check_request(paths, request, time.time())
            version = run.offer.version or "?"
            run.start_file(run.line("start", f"Installing Maxy {version} from {run.offer.name}."))
            code = execute(run, run.offer, command_for(paths.bundle(run.offer)))
    except RequestRefused as err:
        run.append(run.line("error", str(err)))
        log.warning("[ota-request] op=refuse %s", kv(run=run.id, reason=str(err)))
        return 1
    return 0 if code == 0 else 1


def cmd_run_request(settings: Settings, args: argparse.Namespace) -> int:
    """`maxy ota run-request`: carry out the owner's confirmed install request."""
    return run_request(UpdatePaths.from_settings(settings))
