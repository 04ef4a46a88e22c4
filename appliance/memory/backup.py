"""Backups that restore: one tar file holding the graph, the accounts' files and (if chosen) keys.

An archive ``<backups>/maxy-backup-<UTC YYYYmmddTHHMMSSZ>.tar`` (uncompressed tar; the graph
streams inside are gzip'd) holds, in this order:

    graph/nodes.msgpack.gz           every node (:mod:`appliance.memory.snapshot` says the format)
    graph/relationships.msgpack.gz   every relationship
    graph/schema.cypher              the store's constraints and indexes (vector, full-text), one
                                     create statement a line
    files/accounts/<id>/…            each account's folder: account.json, documents, attachments,
                                     agents (templates), plugins, sites — without claude/ (the
                                     CLI's login) unless keys are included
    files/keys/<name>                only with MAXY_BACKUP_KEYS: the keys folder without the Neo4j
                                     password (it belongs to a store the archive does not carry),
                                     and each account's claude/ (mode 0600 inside and on restore)
    manifest.json                    format, version, createdAt, maxyVersion, accounts, keys, the
                                     graph's counts per label and relationship type and its content
                                     hash, and {sha256, bytes} of every member above
    manifest.sha256                  the sha256 of manifest.json

A restore verifies ALL of it first — manifest and its hash, format version, every member's
sha256, the member list, the graph's content hash recomputed from the export — and only then
changes anything: the files are unpacked beside the accounts folder, the graph of the archive's
accounts is replaced in ONE write transaction (a failure rolls it back), and each account folder
is swapped for its restored copy by rename. An archive is written as ``.<name>.part`` and
renamed when complete, so a full disk leaves no half archive.

One line per run: ``[backup] op=create|restore|prune|refuse …``.
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import io
import json
import logging
import os
import re
import secrets
import shutil
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import IO, Any
from zoneinfo import ZoneInfo

from appliance.core.config import Settings
from appliance.core.fsio import ensure_private_dir, fsync_dir, write_secret
from appliance.core.logs import kv
from appliance.core.version import build_info
from appliance.memory import snapshot
from appliance.memory.errors import BackupError, BackupRefused
from appliance.memory.graph import Graph

log = logging.getLogger(__name__)

FORMAT = "maxy-backup"
FORMAT_VERSION = 1
PREFIX = "maxy-backup-"
SUFFIX = ".tar"
MANIFEST = "manifest.json"
MANIFEST_HASH = "manifest.sha256"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
NAME = re.compile(r"^maxy-backup-(\d{8}T\d{6}Z)(-\d+)?\.tar$")
STAMP = "%Y%m%dT%H%M%SZ"
CHUNK = 1024 * 1024
# Never in a backup: files being received, and the CLI's login unless keys are included.
SKIP_ALWAYS = ("attachments/.incoming",)
KEYS_ONLY = ("claude",)
NEVER_KEYS = ("neo4j-password",)

Progress = snapshot.Progress


async def _quiet(stage: str, done: int, total: int) -> None:
    return None


def _disk_full(err: OSError, folder: Path) -> BackupError:
    free = shutil.disk_usage(folder).free if folder.exists() else 0
    return BackupError(
        f"The disk is full: the backup could not be written to {folder} ({free // 1024**2} MB "
        "free). Nothing was kept of it. Delete old backups or files, or lower MAXY_BACKUP_KEEP, "
        "then try again."
    )


def _is_full(err: OSError) -> bool:
    return err.errno in (errno.ENOSPC, errno.EDQUOT)


# ── What goes in ────────────────────────────────────────────────────────────────────────────


def _walk(root: Path, skip: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """Regular files under ``root`` as (relative POSIX path, path); never follows a symlink."""
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        rel_dir = here.relative_to(root).as_posix()
        dirs[:] = sorted(
            d
            for d in dirs
            if (f"{rel_dir}/{d}" if rel_dir != "." else d) not in skip
            and not (here / d).is_symlink()
        )
        for name in sorted(files):
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            yield (path.relative_to(root).as_posix(), path)


def account_ids(settings: Settings) -> list[str]:
    """The accounts on this device: the folders under accounts/ with an account.json."""
    root = settings.accounts_dir
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "account.json").is_file())


def files_to_keep(settings: Settings, include_keys: bool) -> list[tuple[str, Path]]:
    """(member name, path) of every file a backup takes."""
    out: list[tuple[str, Path]] = []
    skip = SKIP_ALWAYS if include_keys else SKIP_ALWAYS + KEYS_ONLY
    for account in account_ids(settings):
        root = settings.accounts_dir / account
        out += [(f"files/accounts/{account}/{rel}", path) for rel, path in _walk(root, skip)]
    if include_keys and settings.keys_dir.is_dir():
        for rel, path in _walk(settings.keys_dir, ()):
            if rel not in NEVER_KEYS and path != settings.neo4j_password_path:
                out.append((f"files/keys/{rel}", path))
    return out


# ── Writing an archive ──────────────────────────────────────────────────────────────────────


class _Hashing:
    """A reader that hashes what passes through it."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self.handle.read(size)
        self.digest.update(block)
        return block


def _add(tar: tarfile.TarFile, name: str, path: Path, private: bool) -> dict[str, Any]:
    with path.open("rb") as handle:
        stat = os.fstat(handle.fileno())
        info = tarfile.TarInfo(name)
        info.size = stat.st_size
        info.mtime = int(stat.st_mtime)
        info.mode = 0o600 if private else stat.st_mode & 0o777
        reader = _Hashing(handle)
        tar.addfile(info, reader)
    return {"sha256": reader.digest.hexdigest(), "bytes": info.size}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o600
    tar.addfile(info, io.BytesIO(data))


def _write_tar(
    part: Path, work: Path, files: list[tuple[str, Path]], manifest: dict[str, Any]
) -> int:
    members: dict[str, Any] = {}
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in (snapshot.NODES, snapshot.RELATIONSHIPS, snapshot.SCHEMA):
                members[name] = _add(tar, name, work / name, private=True)
            for name, path in files:
                try:
                    members[name] = _add(tar, name, path, private=name.startswith("files/keys/"))
                except FileNotFoundError:  # removed since the listing: not part of this backup
                    continue
            manifest["members"] = members
            body = json.dumps(manifest, indent=1, sort_keys=True).encode()
            _add_bytes(tar, MANIFEST, body)
            _add_bytes(tar, MANIFEST_HASH, hashlib.sha256(body).hexdigest().encode() + b"\n")
        out.flush()
        os.fsync(out.fileno())
    return len(members)


def archive_name(now: datetime, folder: Path) -> str:
    """A new archive's name from the time it is made (a suffix if the second is taken)."""
    stem = PREFIX + now.astimezone(UTC).strftime(STAMP)
    name, n = stem + SUFFIX, 1
    while (folder / name).exists():
        n += 1
        name = f"{stem}-{n}{SUFFIX}"
    return name


def _clear_leftovers(folder: Path) -> None:
    for path in folder.glob(f".{PREFIX}*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


async def create(
    graph: Graph,
    settings: Settings,
    *,
    include_keys: bool | None = None,
    progress: Progress = _quiet,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Write one archive of everything, then delete the oldest beyond MAXY_BACKUP_KEEP."""
    started = time.monotonic()
    keys = settings.backup_keys if include_keys is None else include_keys
    folder = settings.backups_path
    created = now or datetime.now(UTC)
    try:
        ensure_private_dir(folder)
        _clear_leftovers(folder)
    except OSError as err:
        raise BackupError(f"The backup folder {folder} cannot be used ({err}).") from err
    name = archive_name(created, folder)
    work = folder / f".{name}.work"
    part = folder / f".{name}.part"
    try:
        (work / "graph").mkdir(parents=True)
        await progress("graph", 0, 3)
        summary = await snapshot.export_graph(graph, work, progress)
        statements = await snapshot.schema_statements(graph)
        (work / snapshot.SCHEMA).write_text("".join(f"{s};\n" for s in statements))
        await progress("files", 1, 3)
        files = await asyncio.to_thread(files_to_keep, settings, keys)
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "createdAt": created.astimezone(UTC).isoformat(timespec="seconds"),
            "maxyVersion": str(build_info().get("version", "")),
            "accounts": sorted(set(account_ids(settings)) | summary.accounts),
            "keys": keys,
            "graph": summary.to_json(),
        }
        count = await asyncio.to_thread(_write_tar, part, work, files, manifest)
        os.replace(part, folder / name)
        fsync_dir(folder)
    except OSError as err:
        if _is_full(err):
            log.error("[backup] op=create %s", kv(name=name, error="disk-full"))
            raise _disk_full(err, folder) from err
        raise BackupError(f"The backup could not be written to {folder} ({err}).") from err
    finally:
        shutil.rmtree(work, ignore_errors=True)
        part.unlink(missing_ok=True)
    size = (folder / name).stat().st_size
    seconds = round(time.monotonic() - started, 3)
    await progress("done", 3, 3)
    log.info(
        "[backup] op=create %s",
        kv(
            name=name,
            bytes=size,
            nodes=summary.nodes,
            relationships=summary.relationships,
            files=count,
            keys=keys,
            seconds=seconds,
        ),
    )
    prune(folder, settings.backup_keep)
    return {
        "name": name,
        "bytes": size,
        "createdAt": manifest["createdAt"],
        "nodes": summary.nodes,
        "relationships": summary.relationships,
        "contentHash": summary.content_hash,
        "accounts": manifest["accounts"],
        "files": count,
        "keys": keys,
        "seconds": seconds,
    }


def archives(folder: Path) -> list[Path]:
    """The finished archives in ``folder``, newest first."""
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if NAME.match(p.name)), reverse=True)


def prune(folder: Path, keep: int) -> list[str]:
    """Delete the archives beyond the newest ``keep``; return their names."""
    gone = []
    for path in archives(folder)[keep:]:
        path.unlink(missing_ok=True)
        gone.append(path.name)
        log.info("[backup] op=prune %s", kv(name=path.name))
    return gone


def created_at(name: str) -> datetime | None:
    """When an archive was made, from its name."""
    match = NAME.match(name)
    return datetime.strptime(match.group(1), STAMP).replace(tzinfo=UTC) if match else None


def listing(folder: Path) -> list[dict[str, Any]]:
    """Every archive, newest first, with its size and (when readable) its manifest's summary."""
    out = []
    for path in archives(folder):
        entry: dict[str, Any] = {
            "name": path.name,
            "bytes": path.stat().st_size,
            "createdAt": (created_at(path.name) or datetime.now(UTC)).isoformat(),
        }
        try:
            manifest = read_manifest(path)
            graph = manifest.get("graph", {})
            entry.update(
                nodes=graph.get("nodes"),
                relationships=graph.get("relationships"),
                accounts=manifest.get("accounts", []),
                keys=bool(manifest.get("keys")),
            )
        except BackupRefused as err:
            entry["error"] = str(err)
        out.append(entry)
    return out


def read_manifest(path: Path) -> dict[str, Any]:
    """The manifest of an archive (not verified: :func:`verify` does that)."""
    try:
        with tarfile.open(path, "r:") as tar:
            member = tar.getmember(MANIFEST)
            handle = tar.extractfile(member)
            if handle is None or member.size > MAX_MANIFEST_BYTES:
                raise BackupRefused(f"{path.name} has no readable manifest.")
            data: dict[str, Any] = json.loads(handle.read())
            return data
    except KeyError as err:
        raise BackupRefused(f"{path.name} has no manifest: it is truncated or no backup.") from err
    except (tarfile.TarError, OSError, EOFError, ValueError) as err:
        raise BackupRefused(f"{path.name} cannot be read ({err}).") from err


def due(at: str, zone: ZoneInfo, now: datetime, since: datetime) -> bool:
    """Whether the nightly backup at ``at`` (HH:MM in ``zone``) is due: its latest slot is past
    and nothing was made since (``since``: the newest archive, or when the engine started)."""
    if at == "off":
        return False
    hour, minute = (int(x) for x in at.split(":"))
    local = now.astimezone(zone)
    slot = local.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if slot > local:
        slot -= timedelta(days=1)
    return since < slot


# ── Verifying an archive ────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Verified:
    """An archive that passed every check, and its manifest."""

    path: Path
    manifest: dict[str, Any]

    @property
    def accounts(self) -> list[str]:
        """The accounts the archive carries (their graph and files are replaced)."""
        return [str(a) for a in self.manifest.get("accounts", [])]


def _safe_member(member: tarfile.TarInfo) -> None:
    parts = PurePosixPath(member.name).parts
    if (
        not member.isfile()
        or member.name.startswith("/")
        or ".." in parts
        or not parts
        or (parts[0] not in ("graph", "files") and member.name not in (MANIFEST, MANIFEST_HASH))
    ):
        raise BackupRefused(f"The archive holds a member Maxy never writes: {member.name!r}.")


def _check_manifest(manifest: Any, hashes: dict[str, str], sizes: dict[str, int]) -> None:
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupRefused("This is not a Maxy backup (its manifest names another format).")
    if manifest.get("version") != FORMAT_VERSION:
        raise BackupRefused(
            f"This backup has format version {manifest.get('version')!r}; this Maxy reads "
            f"version {FORMAT_VERSION}. Restore it with the Maxy release that made it "
            f"({manifest.get('maxyVersion') or 'unknown'})."
        )
    listed = manifest.get("members")
    if not isinstance(listed, dict):
        raise BackupRefused("The manifest lists no members.")
    present = set(hashes) - {MANIFEST, MANIFEST_HASH}
    if missing := sorted(set(listed) - present):
        raise BackupRefused(
            f"The archive is truncated or incomplete: {len(missing)} member(s) missing, "
            f"first {missing[0]}."
        )
    if extra := sorted(present - set(listed)):
        raise BackupRefused(f"The archive holds members its manifest does not list: {extra[0]}.")
    for name, entry in listed.items():
        if not isinstance(entry, dict) or entry.get("sha256") != hashes[name]:
            raise BackupRefused(f"{name} in the archive is corrupt (its sha256 does not match).")
        if entry.get("bytes") != sizes[name]:
            raise BackupRefused(f"{name} in the archive has the wrong size.")


def _check_graph(tar: tarfile.TarFile, manifest: dict[str, Any]) -> None:
    summary = snapshot.Summary()
    for record in snapshot.read_nodes(_open(tar, snapshot.NODES)):
        summary.add_node(int(record["i"]), list(record["labels"]), dict(record["props"]))
    for record in snapshot.read_relationships(_open(tar, snapshot.RELATIONSHIPS)):
        summary.add_relationship(
            int(record["s"]), int(record["e"]), str(record["type"]), dict(record["props"])
        )
    expected = manifest.get("graph", {})
    if summary.content_hash != expected.get("contentHash"):
        raise BackupRefused("The graph export does not match the manifest's content hash.")
    if summary.nodes != expected.get("nodes") or summary.relationships != expected.get(
        "relationships"
    ):
        raise BackupRefused("The graph export does not hold the manifest's counts.")


def _open(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    handle = tar.extractfile(name)
    if handle is None:
        raise BackupRefused(f"{name} is missing from the archive.")
    return handle


def verify(path: Path) -> Verified:
    """Check everything in an archive without changing anything; BackupRefused says what is
    wrong."""
    if not path.is_file():
        raise BackupRefused(f"There is no backup at {path}.")
    hashes: dict[str, str] = {}
    sizes: dict[str, int] = {}
    manifest_body = b""
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                _safe_member(member)
                if member.name in hashes:
                    raise BackupRefused(f"The archive holds {member.name} twice.")
                digest = hashlib.sha256()
                handle = _open(tar, member.name)
                body = bytearray()
                while block := handle.read(CHUNK):
                    digest.update(block)
                    if member.name == MANIFEST:
                        if len(body) + len(block) > MAX_MANIFEST_BYTES:
                            raise BackupRefused("The manifest is too large.")
                        body += block
                hashes[member.name] = digest.hexdigest()
                sizes[member.name] = member.size
                if member.name == MANIFEST:
                    manifest_body = bytes(body)
            if MANIFEST not in hashes or MANIFEST_HASH not in hashes:
                raise BackupRefused(
                    f"{path.name} has no manifest: the archive is truncated or no Maxy backup."
                )
            stated = tar.extractfile(MANIFEST_HASH)
            if stated is None or stated.read().strip().decode() != hashes[MANIFEST]:
                raise BackupRefused("The manifest is corrupt (its sha256 does not match).")
            manifest = json.loads(manifest_body)
            _check_manifest(manifest, hashes, sizes)
            _check_graph(tar, manifest)
    except BackupRefused as err:
        log.warning("[backup] op=refuse %s", kv(name=path.name, reason=str(err)))
        raise BackupRefused(f"{path.name} was refused: {err} Nothing was changed.") from err
    except (tarfile.TarError, EOFError, OSError, ValueError, UnicodeDecodeError) as err:
        log.warning("[backup] op=refuse %s", kv(name=path.name, reason=str(err)))
        raise BackupRefused(
            f"{path.name} was refused: it is damaged or truncated ({err}). Nothing was changed."
        ) from err
    return Verified(path, manifest)


# ── Restoring ───────────────────────────────────────────────────────────────────────────────


def _unpack(verified: Verified, stage: Path) -> int:
    """Unpack the archive's files into ``stage``; return how many."""
    count = 0
    with tarfile.open(verified.path, "r:") as tar:
        for member in tar:
            if not member.name.startswith("files/"):
                continue
            target = stage / member.name
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            source = _open(tar, member.name)
            private = member.name.startswith("files/keys/") or member.mode & 0o077 == 0
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out, CHUNK)
                out.flush()
                os.fsync(out.fileno())
            if not private:
                os.chmod(target, member.mode & 0o777)
            count += 1
    return count


async def _replace_graph(graph: Graph, verified: Verified, progress: Progress) -> int:
    total = int(verified.manifest["graph"]["nodes"]) + int(
        verified.manifest["graph"]["relationships"]
    )
    done = 0
    ids: dict[int, str] = {}
    with tarfile.open(verified.path, "r:") as tar:
        async with graph.transaction() as tx:
            await snapshot.delete_accounts(tx, verified.accounts)
            batch: list[dict[str, Any]] = []
            for record in snapshot.read_nodes(_open(tar, snapshot.NODES)):
                batch.append(record)
                if len(batch) >= snapshot.BATCH:
                    await snapshot.create_nodes(tx, batch, ids)
                    done += len(batch)
                    batch = []
                    await progress("graph", done, total)
            await snapshot.create_nodes(tx, batch, ids)
            done += len(batch)
            batch = []
            for record in snapshot.read_relationships(_open(tar, snapshot.RELATIONSHIPS)):
                batch.append(record)
                if len(batch) >= snapshot.BATCH:
                    await snapshot.create_relationships(tx, batch, ids)
                    done += len(batch)
                    batch = []
                    await progress("graph", done, total)
            await snapshot.create_relationships(tx, batch, ids)
        statements = [
            s.strip() for s in _open(tar, snapshot.SCHEMA).read().decode().split(";\n") if s.strip()
        ]
    for statement in await snapshot.missing_indexes(graph, statements):
        await graph.run(statement)
    return total


def _swap_files(settings: Settings, verified: Verified, stage: Path) -> None:
    accounts_dir = settings.accounts_dir
    accounts_dir.mkdir(parents=True, exist_ok=True)
    old = stage / "old"
    old.mkdir()
    for account in verified.accounts:
        restored = stage / "files" / "accounts" / account
        current = accounts_dir / account
        if current.exists():
            os.replace(current, old / account)
        if restored.is_dir():
            os.replace(restored, current)
    fsync_dir(accounts_dir)
    keys = stage / "files" / "keys"
    if keys.is_dir():
        for rel, path in _walk(keys, ()):
            write_secret(settings.keys_dir / rel, path.read_bytes())


async def restore(
    graph: Graph, settings: Settings, path: Path, *, progress: Progress = _quiet
) -> dict[str, Any]:
    """Verify ``path`` whole, then replace the graph and files of the accounts it carries."""
    started = time.monotonic()
    await progress("verify", 0, 1)
    verified = await asyncio.to_thread(verify, path)
    stage = settings.accounts_dir.parent / f".maxy-restore-{secrets.token_hex(6)}"
    try:
        stage.mkdir(mode=0o700, parents=True)
        files = await asyncio.to_thread(_unpack, verified, stage)
        total = await _replace_graph(graph, verified, progress)
        await asyncio.to_thread(_swap_files, settings, verified, stage)
    except OSError as err:
        if _is_full(err):
            raise BackupError(
                f"The disk is full: {path.name} could not be unpacked. Nothing was changed; "
                "free some space and restore again."
            ) from err
        raise BackupError(f"Restoring {path.name} failed ({err}).") from err
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    seconds = round(time.monotonic() - started, 3)
    graph_info = verified.manifest["graph"]
    log.info(
        "[backup] op=restore %s",
        kv(name=path.name, items=total, files=files, accounts=len(verified.accounts), s=seconds),
    )
    return {
        "name": path.name,
        "nodes": graph_info["nodes"],
        "relationships": graph_info["relationships"],
        "contentHash": graph_info["contentHash"],
        "accounts": verified.accounts,
        "files": files,
        "seconds": seconds,
    }


def resolve(settings: Settings, name: str) -> Path:
    """An archive by bare name (in the backups folder) or, from the CLI, by absolute path."""
    if NAME.match(name):
        return settings.backups_path / name
    path = Path(name)
    if path.is_absolute() and path.suffix == SUFFIX:
        return path
    raise BackupRefused(
        f"{name!r} names no backup: give an archive's name from `maxy backup list` or a path."
    )
