"""``maxy ota watch-usb``: notice a USB stick carrying a ``.maxyupdate``, verify it, offer it.

Runs as root in its own hardened unit. It watches udev's block devices (a pyudev monitor, plus a
scan of what is already plugged in at start) and takes only USB mass storage: a disk or partition
with ``ID_BUS=usb``. Each one is read WITHOUT mounting — FAT with mtools (``mdir``, ``mcopy``),
ext2/3/4 with debugfs (``ls -p``, ``cat``) — and every ``*.maxyupdate`` in its root directory is
copied to ``<data_dir>/updates/incoming/`` (size limit, free-space check, hashed as it is read),
verified with :func:`appliance.ota.bundle.verify_bundle`, and recorded as an offer
(:mod:`appliance.ota.offers`): installable, or refused with the reason. Other filesystems (exFAT,
NTFS, ISO 9660, none) are logged and ignored. Nothing here ever installs anything: the owner
confirms an offer in the admin UI, and ``maxy ota run-request`` does the rest.

The same stick, when it is writable FAT or ext, also gets a copy of the newest backup archive
(:mod:`appliance.memory.backup`, ``<MAXY_BACKUP_DIR>/maxy-backup-*.tar``) in its
``maxy-backups/`` folder, written without mounting (``mmd``/``mcopy``; ``debugfs -w``), unless it
holds that archive already; a copy that does not fit is removed again. One line each:
``[backup-usb] op=copy|skip|failed device=… file=…``.

One line per event: ``[ota-usb] op=… device=… file=… verdict=…``.

Errors::

    OtaError                  (appliance.ota.errors)
     └── StickError           a stick cannot be read or a bundle not copied (tool failed, removed,
                              too large, not enough room on /data)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core.config import Settings
from appliance.core.fsio import fsync_dir, sha256_hex
from appliance.core.logs import kv
from appliance.core.proc import ToolError, run
from appliance.core.systemd import Notifier
from appliance.ota import offers as offers_mod
from appliance.ota.errors import OtaError
from appliance.ota.offers import Offer, UpdatePaths

if TYPE_CHECKING:
    import pyudev

    from appliance.ota.manifest import Manifest

log = logging.getLogger(__name__)

SUFFIX = ".maxyupdate"
#: The largest bundle copied off a stick (two slot images, zstd-compressed, fit easily).
MAX_BUNDLE_BYTES = 4 * 1024**3
#: Free space left on /data after a copy (the data partition must never fill up).
RESERVE_BYTES = 512 * 1024**2
#: Offers kept (newest first); older ones and their copied files are removed.
KEEP_OFFERS = 3
LIST_TIMEOUT_S = 60.0
COPY_TIMEOUT_S = 1800.0
CHUNK = 1024 * 1024
FAT_TYPES = frozenset({"vfat", "msdos"})
EXT_TYPES = frozenset({"ext2", "ext3", "ext4"})
# Names a tool command line can carry safely; anything else is logged and skipped.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+()-]{0,200}$")
_FAT_SIZE = re.compile(r"^\s*1 file\s+([\d ]+?)\s+bytes\s*$", re.M)
# The environment mtools needs: no ~/.mtoolsrc, no geometry sanity check on images and sticks.
MTOOLS_ENV = {"MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"}


class StickError(OtaError):
    """A stick could not be read or a bundle not copied off it (or a backup onto it)."""


@dataclass(frozen=True)
class Entry:
    """A ``*.maxyupdate`` in a stick's root directory."""

    name: str
    size: int


# ── Reading a stick without mounting it ─────────────────────────────────────────────────────


def _run(args: Sequence[str], timeout: float = LIST_TIMEOUT_S) -> str:
    env = {**os.environ, **MTOOLS_ENV, "LC_ALL": "C"}
    try:
        done = run(args, timeout=timeout, env=env)
    except ToolError as err:
        raise StickError(f"{args[0]} failed: {err}") from err
    if done.returncode != 0:
        detail = " ".join(done.stderr.split())[-300:]
        raise StickError(f"{args[0]} exited with status {done.returncode}: {detail}")
    return done.stdout


def filesystem_of(device: Path) -> str | None:
    """The filesystem type on ``device`` (a block device or an image file), None when none."""
    try:
        done = run(["blkid", "-p", "-o", "value", "-s", "TYPE", device], timeout=LIST_TIMEOUT_S)
    except ToolError as err:
        raise StickError(f"blkid cannot probe {device}: {err}") from err
    kind = done.stdout.strip()
    return kind or None


def _is_bundle(name: str) -> bool:
    return name.lower().endswith(SUFFIX) and not name.startswith(".")


def _fat_list(device: Path) -> list[Entry]:
    names = []
    for line in _run(["mdir", "-b", "-i", str(device), "::/"]).splitlines():
        name = line.strip().removeprefix("::/")
        if name and "/" not in name and _is_bundle(name):
            names.append(name)
    entries = []
    for name in names:
        if not _NAME.match(name):
            log.warning("[ota-usb] op=skip %s", kv(device=device, file=name, reason="odd-name"))
            continue
        listing = _run(["mdir", "-i", str(device), f"::/{name}"])
        found = _FAT_SIZE.search(listing)
        if found is None:
            raise StickError(f"mdir did not report the size of {name} on {device}")
        entries.append(Entry(name, int(found.group(1).replace(" ", ""))))
    return entries


def _ext_list(device: Path) -> list[Entry]:
    entries = []
    for line in _run(["debugfs", "-R", "ls -p /", str(device)]).splitlines():
        # /inode/mode/uid/gid/name/size/ — a name with "/" cannot exist, so split is safe.
        parts = line.strip().split("/")
        if len(parts) != 8 or not parts[2].startswith("10"):  # 10xxxx: a regular file
            continue
        name, size = parts[5], parts[6]
        if not _is_bundle(name):
            continue
        if not _NAME.match(name) or not size.isdigit():
            log.warning("[ota-usb] op=skip %s", kv(device=device, file=name, reason="odd-name"))
            continue
        entries.append(Entry(name, int(size)))
    return entries


def list_bundles(device: Path, fs: str) -> list[Entry]:
    """The ``*.maxyupdate`` files in the root directory of a FAT or ext filesystem."""
    if fs in FAT_TYPES:
        return _fat_list(device)
    if fs in EXT_TYPES:
        return _ext_list(device)
    raise StickError(f"{fs} is not a filesystem Maxy reads updates from (use FAT32 or ext4)")


def _reader(device: Path, fs: str, name: str) -> list[str]:
    if fs in FAT_TYPES:
        return ["mcopy", "-n", "-i", str(device), f"::/{name}", "-"]
    return ["debugfs", "-R", f'cat "/{name}"', str(device)]


def copy_bundle(device: Path, fs: str, entry: Entry, folder: Path) -> tuple[Path, str]:
    """Copy one bundle off the stick into ``folder`` (a temporary name); return it and its sha256.

    The copy stops as soon as it grows past the size the directory listing announced.
    """
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".copy-", suffix=".part", dir=folder)
    digest = hashlib.sha256()
    written = 0
    env = {**os.environ, **MTOOLS_ENV, "LC_ALL": "C"}
    try:
        with (
            os.fdopen(fd, "wb") as out,
            subprocess.Popen(
                _reader(device, fs, entry.name),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            ) as proc,
        ):
            timer = threading.Timer(COPY_TIMEOUT_S, proc.kill)
            timer.start()
            try:
                assert proc.stdout is not None
                while block := proc.stdout.read(CHUNK):
                    written += len(block)
                    if written > entry.size:
                        proc.kill()
                        raise StickError(
                            f"{entry.name} on {device} is longer than its listing said "
                            f"({entry.size} bytes); not copied."
                        )
                    digest.update(block)
                    out.write(block)
                stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                code = proc.wait()
            finally:
                timer.cancel()
            out.flush()
            os.fsync(out.fileno())
        if code != 0 or written != entry.size:
            detail = " ".join(stderr.split())[-300:]
            raise StickError(
                f"Copying {entry.name} off {device} failed (status {code}, {written} of "
                f"{entry.size} bytes): {detail or 'the stick was removed?'}"
            )
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return Path(temp), digest.hexdigest()


# ── The newest backup onto the stick ───────────────────────────────────────────────────────

BACKUP_FOLDER = "maxy-backups"
BACKUP_NAME = re.compile(r"^maxy-backup-\d{8}T\d{6}Z(-\d+)?\.tar$")  # appliance.memory.backup


def newest_backup(folder: Path) -> Path | None:
    """The newest finished backup archive in ``folder``."""
    if not folder.is_dir():
        return None
    found = sorted(p.name for p in folder.iterdir() if BACKUP_NAME.match(p.name))
    return folder / found[-1] if found else None


def _debugfs(device: Path, command: str, timeout: float = LIST_TIMEOUT_S) -> str:
    """Run one debugfs command read-write; its complaints (it exits 0 anyway) are errors."""
    try:
        done = run(["debugfs", "-w", "-R", command, str(device)], timeout=timeout)
    except ToolError as err:
        raise StickError(f"debugfs failed: {err}") from err
    complaints = [
        line
        for line in done.stderr.splitlines()
        if line.strip() and not line.startswith("debugfs ")
    ]
    if done.returncode != 0 or complaints:
        detail = " ".join(" ".join(complaints).split())[-300:]
        raise StickError(f"debugfs {command.split()[0]} failed on {device}: {detail}")
    return done.stdout


def stick_backups(device: Path, fs: str) -> dict[str, int] | None:
    """The archives in the stick's backup folder by name and size; None: no such folder."""
    if fs in FAT_TYPES:
        root = _run(["mdir", "-b", "-i", str(device), "::/"]).split()
        if f"::/{BACKUP_FOLDER}/" not in root:
            return None
        out = {}
        for line in _run(["mdir", "-b", "-i", str(device), f"::/{BACKUP_FOLDER}"]).splitlines():
            name = line.strip().rsplit("/", 1)[-1]
            if BACKUP_NAME.match(name):
                found = _FAT_SIZE.search(
                    _run(["mdir", "-i", str(device), f"::/{BACKUP_FOLDER}/{name}"])
                )
                out[name] = int(found.group(1).replace(" ", "")) if found else -1
        return out
    listing = run(["debugfs", "-R", f"ls -p /{BACKUP_FOLDER}", str(device)], timeout=LIST_TIMEOUT_S)
    if "File not found" in listing.stderr:
        return None
    out = {}
    for line in listing.stdout.splitlines():
        parts = line.strip().split("/")
        if len(parts) == 8 and parts[2].startswith("10") and BACKUP_NAME.match(parts[5]):
            out[parts[5]] = int(parts[6]) if parts[6].isdigit() else -1
    return out


def copy_backup(device: Path, fs: str, archive: Path) -> bool:
    """Put ``archive`` in the stick's backup folder; False when it is there already."""
    name, size = archive.name, archive.stat().st_size
    held = stick_backups(device, fs)
    if held is not None and held.get(name) == size:
        return False
    target = f"/{BACKUP_FOLDER}/{name}"
    try:
        if fs in FAT_TYPES:
            if held is None:
                _run(["mmd", "-i", str(device), f"::/{BACKUP_FOLDER}"])
            _run(["mcopy", "-o", "-i", str(device), str(archive), f"::{target}"], COPY_TIMEOUT_S)
        else:
            if held is None:
                _debugfs(device, f"mkdir /{BACKUP_FOLDER}")
            elif name in held:
                _debugfs(device, f"rm {target}")
            _debugfs(device, f'write "{archive}" {target}', COPY_TIMEOUT_S)
            _debugfs(device, f"sif {target} mode 0100644")  # readable where the stick goes next
        if (stick_backups(device, fs) or {}).get(name) != size:
            raise StickError(f"the copy of {name} on {device} is incomplete")
    except StickError:
        with contextlib.suppress(StickError, ToolError):  # leave no half archive on the stick
            if fs in FAT_TYPES:
                _run(["mdel", "-i", str(device), f"::{target}"])
            else:
                _debugfs(device, f"rm {target}")
        raise
    return True


# ── Verdicts and offers ─────────────────────────────────────────────────────────────────────


def _human(size: int) -> str:
    return f"{size / 1024**2:,.0f} MiB"


@dataclass
class Scanner:
    """Reads sticks and records offers; one per watcher process."""

    paths: UpdatePaths
    #: Verifies a bundle file and returns its manifest; raises OtaError with the reason.
    verify: Callable[[Path], Manifest]
    max_bytes: int = MAX_BUNDLE_BYTES
    reserve_bytes: int = RESERVE_BYTES
    keep: int = KEEP_OFFERS
    #: Where the backup archives are (the newest is copied onto each stick); None: no copies.
    backups: Path | None = None

    def scan(self, device: Path, source: str | None = None) -> list[Offer]:
        """Offer every bundle on ``device``; return the offers recorded (empty: none found)."""
        source = source or str(device)
        fs = filesystem_of(device)
        if fs is None or fs not in FAT_TYPES | EXT_TYPES:
            log.info(
                "[ota-usb] op=ignore %s",
                kv(device=device, fs=fs or "none", reason="unsupported-filesystem"),
            )
            return []
        entries = list_bundles(device, fs)
        log.info("[ota-usb] op=scan %s", kv(device=device, fs=fs, bundles=len(entries)))
        found = []
        for entry in entries:
            offer = self._offer(device, fs, entry, source)
            found.append(offer)
            self._record(offer)
        self.copy_backup(device, fs)
        return found

    def copy_backup(self, device: Path, fs: str) -> None:
        """Copy the newest backup onto the stick (logged; a failure is logged, not raised)."""
        archive = newest_backup(self.backups) if self.backups else None
        if archive is None:
            return
        try:
            copied = copy_backup(device, fs, archive)
        except (StickError, ToolError, OSError) as err:
            log.warning(
                "[backup-usb] op=failed %s", kv(device=device, file=archive.name, reason=err)
            )
            return
        op = "copy" if copied else "skip"
        log.info("[backup-usb] op=%s %s", op, kv(device=device, file=archive.name))

    def _refused(self, entry: Entry, source: str, reason: str, sha256: str = "") -> Offer:
        ident = sha256[:16] or sha256_hex(f"{entry.name}\0{entry.size}")
        return Offer(
            id=ident[:16],
            name=entry.name,
            size=entry.size,
            sha256=sha256,
            verified=False,
            source=source,
            found_at=offers_mod.now_iso(),
            error=reason,
        )

    def _offer(self, device: Path, fs: str, entry: Entry, source: str) -> Offer:
        def verdict(offer: Offer) -> Offer:
            log.info(
                "[ota-usb] op=offer %s",
                kv(
                    device=device,
                    file=entry.name,
                    version=offer.version or "?",
                    verdict="verified" if offer.verified else "refused",
                    reason=offer.error or "-",
                ),
            )
            return offer

        if entry.size > self.max_bytes:
            return verdict(
                self._refused(
                    entry,
                    source,
                    f"The file is {_human(entry.size)}; "
                    f"updates are at most {_human(self.max_bytes)}.",
                )
            )
        self.paths.incoming.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.paths.incoming).free
        if free - entry.size < self.reserve_bytes:
            return verdict(
                self._refused(
                    entry,
                    source,
                    f"Not enough free space on the data partition to copy it ({_human(entry.size)} "
                    f"needed, {_human(free)} free, {_human(self.reserve_bytes)} kept in reserve).",
                )
            )
        try:
            temp, sha256 = copy_bundle(device, fs, entry, self.paths.incoming)
        except StickError as err:
            return verdict(self._refused(entry, source, str(err)))
        except OSError as err:  # writing the copy: /data full or failing
            reason = f"Copying it to {self.paths.incoming} failed ({err.strerror or err})."
            return verdict(self._refused(entry, source, reason))
        final = self.paths.incoming / f"{sha256[:16]}{SUFFIX}"
        os.chmod(temp, 0o644)
        os.replace(temp, final)
        fsync_dir(final.parent)
        try:
            manifest = self.verify(final)
        except OSError as err:
            final.unlink(missing_ok=True)
            reason = f"Reading the copy back failed ({err.strerror or err}); try the stick again."
            return verdict(self._refused(entry, source, reason, sha256))
        except OtaError as err:
            final.unlink(missing_ok=True)
            return verdict(self._refused(entry, source, str(err), sha256))
        return verdict(
            Offer(
                id=sha256[:16],
                name=entry.name,
                size=entry.size,
                sha256=sha256,
                verified=True,
                source=source,
                found_at=offers_mod.now_iso(),
                version=manifest.version,
                boards=tuple(manifest.boards),
            )
        )

    def _record(self, offer: Offer) -> None:
        kept = [o for o in offers_mod.load_offers(self.paths) if o.id != offer.id]
        kept = [offer, *kept][: self.keep]
        offers_mod.save_offers(self.paths, kept)
        self.prune(kept)

    def prune(self, kept: Iterable[Offer] | None = None) -> None:
        """Delete copied bundles no offer names, and copies left half-done by a crash."""
        if not self.paths.incoming.is_dir():
            return
        offers = list(kept) if kept is not None else offers_mod.load_offers(self.paths)
        wanted = {self.paths.bundle(o).name for o in offers if o.verified}
        for path in self.paths.incoming.iterdir():
            if path.name not in wanted:
                log.info("[ota-usb] op=prune %s", kv(file=path.name))
                path.unlink(missing_ok=True)


# ── udev: which devices, and the watch loop ─────────────────────────────────────────────────


def is_usb_storage(device: pyudev.Device) -> bool:
    """Whether a udev device is a USB mass-storage disk or partition worth reading."""
    if device.subsystem != "block" or device.device_type not in ("disk", "partition"):
        return False
    props = device.properties
    if props.get("ID_BUS") != "usb" or props.get("ID_TYPE") == "cd":
        return False
    if props.get("ID_CDROM") == "1" or not device.device_node:
        return False
    # A disk with a partition table: its partitions carry the filesystems (and get events).
    return not (device.device_type == "disk" and props.get("ID_PART_TABLE_TYPE"))


def describe(device: pyudev.Device) -> str:
    """``/dev/sda1 (SanDisk Cruzer Blade)``: the device and what the owner would call it."""
    props = device.properties
    words = " ".join(
        props.get(key, "").replace("_", " ").strip() for key in ("ID_VENDOR", "ID_MODEL")
    ).strip()
    node = device.device_node or device.sys_path
    return f"{node} ({words})" if words else str(node)


def _key(device: pyudev.Device) -> str:
    props = device.properties
    return "|".join(
        [str(device.device_node), props.get("DISKSEQ", ""), props.get("ID_FS_UUID", "")]
    )


class Watcher:
    """Scan matching block devices once at start, then each one udev adds or changes."""

    def __init__(
        self,
        scanner: Scanner,
        *,
        accept: Callable[[pyudev.Device], bool] = is_usb_storage,
        source: str = "udev",
    ) -> None:
        import pyudev

        self.scanner = scanner
        self.accept = accept
        self.context = pyudev.Context()
        self.monitor = pyudev.Monitor.from_netlink(self.context, source=source)
        self.monitor.filter_by("block")
        self.seen: set[str] = set()

    def handle(self, device: pyudev.Device, action: str | None) -> list[Offer]:
        """React to one device event (``None``: present at start)."""
        if action == "remove":
            self.seen = {k for k in self.seen if not k.startswith(f"{device.device_node}|")}
            return []
        if action not in (None, "add", "change") or not self.accept(device):
            return []
        key = _key(device)
        if key in self.seen:  # udev repeats "change" for a device already read
            return []
        self.seen.add(key)
        node = Path(str(device.device_node))
        try:
            return self.scanner.scan(node, describe(device))
        except (StickError, OSError) as err:
            self.seen.discard(key)  # a later event (re-plug, media change) tries again
            log.warning("[ota-usb] op=scan %s", kv(device=node, verdict="unreadable", reason=err))
            return []

    def run(
        self,
        stop: threading.Event | None = None,
        poll: float = 1.0,
        notifier: Notifier | None = None,
    ) -> None:
        """Watch until ``stop`` is set (forever on the device); tell systemd when ready."""
        stop = stop or threading.Event()
        notifier = notifier or Notifier.disabled()
        self.monitor.start()  # listening before the scan: no stick falls in between
        self.scanner.prune()
        log.info("[ota-usb] op=start %s", kv(updates=self.scanner.paths.root))
        for device in self.context.list_devices(subsystem="block"):
            self.handle(device, None)
        notifier.ready("ota-usb", "watching for USB sticks with updates")
        while not stop.is_set():
            notifier.ping()
            device = self.monitor.poll(timeout=poll)
            if device is not None:
                self.handle(device, device.action)


# ── maxy ota watch-usb / run-request ────────────────────────────────────────────────────────


def current_version(settings: Settings) -> str:
    """The committed version ``maxy ota apply`` will compare against (else this build's)."""
    from appliance.core.version import build_info
    from appliance.ota.device import ota_dir
    from appliance.ota.state import OtaState

    try:
        committed = OtaState.load(ota_dir(settings)).committed
    except OtaError as err:
        log.warning("[ota-usb] op=read-state %s", kv(error=str(err)))
        committed = None
    if committed and committed.get("version"):
        return str(committed["version"])
    return str(build_info()["version"])


def scanner_from_settings(settings: Settings) -> Scanner:
    """A scanner verifying against the device's trust roots, board and installed version."""
    from appliance.ota import bundle, device
    from appliance.ota.firmware import detect_board

    board = detect_board(settings.ota_board)

    def verify(path: Path) -> Manifest:
        return bundle.verify_bundle(
            path,
            device.trust_store(settings),  # read at each use: a rotated key counts at once
            board=board,
            current_version=current_version(settings),
            full=True,
        )

    return Scanner(UpdatePaths.from_settings(settings), verify, backups=settings.backups_path)


def cmd_watch_usb(settings: Settings, args: argparse.Namespace) -> int:
    """`maxy ota watch-usb`: offer updates found on USB sticks (never installs)."""
    Watcher(scanner_from_settings(settings)).run(notifier=Notifier.from_environ(os.environ))
    return 0


def add_parsers(ota_sub: Any) -> None:
    """Add ``watch-usb`` and ``run-request`` to the ``maxy ota`` subcommands."""
    watch = ota_sub.add_parser(
        "watch-usb", help="offer updates found on USB sticks in the admin UI (root; never installs)"
    )
    watch.set_defaults(func=cmd_watch_usb)
    run = ota_sub.add_parser(
        "run-request", help="install the update the owner confirmed in the admin UI (root)"
    )
    run.set_defaults(func=offers_mod.cmd_run_request)
