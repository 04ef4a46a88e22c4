"""Uploaded files: staged, converted to text, kept as the document's attachment, ingested.

Where they live (``<accounts>/<account>/attachments/``)::

    .incoming/<random>.part       a file being received (the app, ``memory-ingest-file``, the
                                  CLI write it; only :func:`ingest_file` reads it, by name)
    <key>/<sha256[:16]>.<ext>     each distinct file uploaded under one name, kept as it came

``key`` is the file name made safe (:func:`attachment_key`); the document's ``attachmentId`` is
``upload:<key>``, so uploading a file of the same name again is a new version of the same
document, and the document and each version name their file (``file``, relative to
``attachments/``), which is how the attachment links back.

:func:`ingest_file` is all or nothing: a file that is too large, of another kind, empty,
damaged or protected by a password is refused before anything is written; the file is moved
into place before the ingest's one transaction and taken away again if that fails; the staged
copy is always removed. :func:`sweep` (the engine's purge loop) removes the files no document
names any more — those of documents purged after their grace period — and staged files left
behind by a crash.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.core.fsio import disk_full_errors, sha256_hex
from appliance.core.identity import Caller
from appliance.memory.convert import ConversionRefused, Converted, convert, kind_of, refuse
from appliance.memory.graph import Graph
from appliance.memory.ingest import Ingester, IngestRequest

log = logging.getLogger(__name__)

ATTACHMENTS = "attachments"
INCOMING = ".incoming"
ID_PREFIX = "upload:"
MAX_KEY_CHARS = 100
STAGED_NAME = re.compile(r"^[A-Za-z0-9_-]{16,64}\.part$")
COPY_CHUNK = 1024 * 1024
# A folder or staged file younger than this may belong to an upload under way: never swept.
SWEEP_AFTER_S = 3600.0
_UNSAFE = re.compile(r"[^a-z0-9._-]+")

Progress = Callable[[str, int, int], Awaitable[None]]  # (stage, done, total)


@dataclass(frozen=True)
class Limits:
    """What an upload may be: at most ``max_bytes``, of these extensions."""

    max_bytes: int
    types: tuple[str, ...]

    def check_name(self, name: str) -> str:
        """The file's kind, or a refusal naming the kinds allowed."""
        ext = PurePosixPath(name).suffix.lower().lstrip(".")
        kind = kind_of(name)
        if kind is None or ext not in self.types:
            allowed = ", ".join(f".{t}" for t in self.types)
            raise refuse(
                "unsupported-type",
                f"{name!r} is not a kind of file Maxy takes. Upload one of: {allowed} "
                "(MAXY_UPLOAD_TYPES).",
                name=name,
            )
        return kind

    def check_size(self, name: str, size: int) -> None:
        """Refuse a file larger than the limit, saying the limit and the setting."""
        if size > self.max_bytes:
            raise too_large(name, self.max_bytes)


def too_large(name: str, max_bytes: int) -> ConversionRefused:
    """The refusal of a file over the size limit."""
    return refuse(
        "too-large",
        f"{name!r} is larger than {max_bytes / (1024 * 1024):g} MB, the most Maxy takes "
        "(MAXY_UPLOAD_MAX_MB). Split it, or raise the limit.",
        name=name,
    )


def attachments_dir(accounts_dir: Path, account_id: str) -> Path:
    """The account's attachments folder."""
    return accounts_dir / account_id / ATTACHMENTS


def incoming_dir(accounts_dir: Path, account_id: str) -> Path:
    """Where files being received are staged (made on first use, 0700)."""
    folder = attachments_dir(accounts_dir, account_id) / INCOMING
    with disk_full_errors(folder):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def new_staged(accounts_dir: Path, account_id: str) -> Path:
    """A fresh, unguessable staging path (its name is what :func:`ingest_file` is given)."""
    return incoming_dir(accounts_dir, account_id) / f"{secrets.token_urlsafe(18)}.part"


def staged_path(accounts_dir: Path, account_id: str, name: str) -> Path:
    """The staged file called ``name``: a bare name of the staging folder, never a path."""
    if not STAGED_NAME.match(name):
        raise refuse("bad-staged-name", f"{name!r} is not the name of a staged upload.")
    path = incoming_dir(accounts_dir, account_id) / name
    if path.is_symlink() or not path.is_file():
        raise refuse("not-staged", f"No staged upload called {name!r}: upload the file again.")
    return path


def stage_copy(source: Path, dest: Path, limits: Limits, name: str) -> int:
    """Copy a file on disk into staging, refusing it (nothing left) once past the size limit."""
    if not source.is_file():
        raise refuse("not-a-file", f"{source} is not a file.", name=name)
    limits.check_size(name, source.stat().st_size)
    copied = 0
    try:
        with disk_full_errors(dest), source.open("rb") as src, dest.open("wb") as out:
            while block := src.read(COPY_CHUNK):
                copied += len(block)
                if copied > limits.max_bytes:
                    raise too_large(name, limits.max_bytes)
                out.write(block)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return copied


def attachment_key(name: str) -> str:
    """A file name made safe for a folder and an id: lower case, ``[a-z0-9._-]``, no dots first."""
    base = PurePosixPath(name.replace("\\", "/")).name.lower()
    key = _UNSAFE.sub("-", base).strip("-.")[:MAX_KEY_CHARS].strip("-.")
    return key or "upload"


def file_path(accounts_dir: Path, account_id: str, relative: str) -> Path | None:
    """An attachment named by a document (``<key>/<file>``), if it is inside the account's
    attachments folder and exists; None otherwise (traversal-proof)."""
    root = attachments_dir(accounts_dir, account_id).resolve()
    parts = PurePosixPath(relative).parts
    if len(parts) != 2 or any(p in ("", ".", "..") or p.startswith(".") for p in parts):
        return None
    path = (root / parts[0] / parts[1]).resolve()
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


async def _convert(data: bytes, name: str, progress: Progress | None) -> Converted:
    """Convert in a worker thread, relaying its page ticks to ``progress`` from this task."""
    loop = asyncio.get_running_loop()
    ticks: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

    def tick(done: int, total: int) -> None:
        loop.call_soon_threadsafe(ticks.put_nowait, (done, total))

    work: asyncio.Future[Converted] = loop.run_in_executor(
        None, convert, data, name, tick if progress else None
    )
    while True:
        getter: asyncio.Future[tuple[int, int]] = asyncio.ensure_future(ticks.get())
        pending: list[asyncio.Future[Any]] = [work, getter]
        await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if getter.done():
            if progress is not None:
                await progress("reading", *getter.result())
        else:
            getter.cancel()
        if work.done() and ticks.empty():
            return await work


def _place(staged: Path, folder: Path, final: Path) -> bool:
    """Move the staged file to its place; return whether it is new there (not kept before)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if final.exists():
        staged.unlink(missing_ok=True)
        return False
    os.replace(staged, final)
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _unplace(folder: Path, final: Path) -> None:
    final.unlink(missing_ok=True)
    try:
        folder.rmdir()  # only when nothing else was ever uploaded under this name
    except OSError:
        pass


async def ingest_file(
    graph: Graph,
    ingester: Ingester,
    accounts_dir: Path,
    caller: Caller,
    limits: Limits,
    *,
    staged: str,
    file_name: str,
    title: str | None = None,
    scope: str | None = None,
    agents: list[str] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Convert a staged upload, keep it as the attachment, ingest its text; all or nothing."""
    path = staged_path(accounts_dir, caller.account_id, staged)
    started = time.monotonic()
    try:
        limits.check_name(file_name)
        size = path.stat().st_size
        limits.check_size(file_name, size)
        data = await asyncio.to_thread(path.read_bytes)
        converted = await _convert(data, file_name, progress)
        read_seconds = time.monotonic() - started
        key = attachment_key(file_name)
        digest = sha256_hex(data)
        ext = PurePosixPath(file_name).suffix.lower()
        folder = attachments_dir(accounts_dir, caller.account_id) / key
        final = folder / f"{digest[:16]}{ext}"
        with disk_full_errors(final):
            placed = await asyncio.to_thread(_place, path, folder, final)
    finally:
        path.unlink(missing_ok=True)
    request = IngestRequest(
        title=(title or "").strip() or converted.title,
        text=converted.text,
        attachment_id=ID_PREFIX + key,
        scope=scope,
        agents=agents,
        source="upload",
        file={
            "fileName": PurePosixPath(file_name.replace("\\", "/")).name,
            "file": f"{key}/{final.name}",
            "fileSha256": digest,
            "fileBytes": size,
            "mediaType": converted.media_type,
        },
    )
    try:
        done = await ingester.ingest(caller, request, progress)
    except BaseException:
        if placed:
            await asyncio.to_thread(_unplace, folder, final)
        raise
    seconds = time.monotonic() - started
    log.info(
        "[upload] op=done name=%s kind=%s bytes=%d chars=%d chunks=%d document=%s version=%d ms=%d",
        key,
        converted.kind,
        size,
        len(converted.text),
        done["chunks"],
        done["documentId"],
        done["version"],
        seconds * 1000,
    )
    return {
        **done,
        "attachmentId": request.attachment_id,
        "title": request.title,
        "kind": converted.kind,
        "bytes": size,
        "chars": len(converted.text),
        "fileName": request.file["fileName"] if request.file else file_name,
        "seconds": round(seconds, 3),
        "readSeconds": round(read_seconds, 3),
    }


async def sweep(graph: Graph, accounts_dir: Path, account_id: str) -> int:
    """Remove attachment folders no document names and stale staged files; return how many."""
    root = attachments_dir(accounts_dir, account_id)
    if not root.is_dir():
        return 0
    rows, _ = await graph.run(
        "MATCH (d:KnowledgeDocument) WHERE d.accountId = $account "
        "AND d.attachmentId STARTS WITH $prefix RETURN d.attachmentId AS id",
        {"account": account_id, "prefix": ID_PREFIX},
    )
    named = {str(row["id"])[len(ID_PREFIX) :] for row in rows}
    return await asyncio.to_thread(_sweep, root, named, time.time() - SWEEP_AFTER_S)


def _sweep(root: Path, named: Iterable[str], before: float) -> int:
    keep = set(named)
    removed = 0
    for entry in root.iterdir():
        if entry.name == INCOMING:
            for staged in entry.iterdir():
                if staged.stat().st_mtime < before:
                    staged.unlink(missing_ok=True)
                    removed += 1
            continue
        if entry.name in keep or entry.is_symlink() or not entry.is_dir():
            continue
        if entry.stat().st_mtime < before:
            shutil.rmtree(entry)
            removed += 1
            log.info("[upload] op=sweep removed=%s", entry.name)
    return removed
