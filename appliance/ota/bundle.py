"""The ``.maxyupdate`` bundle: make one, read one from a file or URL, verify it.

A bundle is an uncompressed POSIX tar whose members come in this order::

    manifest.json    the signed manifest (see appliance.ota.manifest)
    manifest.sig     64 bytes: ed25519 signature of manifest.json's exact bytes
    boot_a.img.zst   slot A's boot image (FAT), zstd: its cmdline.txt names root_a
    boot_b.img.zst   slot B's boot image: the same files, its cmdline.txt names root_b
    root.img.zst     the root image (ext4), zstd, for either slot

The order lets a reader check the signature before it touches a payload, and stream the whole
bundle once (``tarfile`` mode ``r|``), from a file or an HTTP response alike.
"""

from __future__ import annotations

import hashlib
import io
import logging
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import IO, BinaryIO, cast

import httpx
import zstandard

from appliance.core.fsio import sha256_file
from appliance.ota.errors import BundleError, ManifestError, PayloadError
from appliance.ota.keys import TrustStore, key_id, load_private_key, load_public_key, public_pem
from appliance.ota.keys import raw_public as raw_public_key
from appliance.ota.manifest import (
    BOARDS,
    FORMAT,
    MANIFEST_MEMBER,
    NEXT_KEY_CONTEXT,
    PAYLOAD_NAMES,
    SIGNATURE_MEMBER,
    Manifest,
    NextKey,
    Payload,
    check_bootloader,
    check_installable,
    manifest_bytes,
    parse_manifest,
    verify_manifest,
)
from appliance.ota.progress import Deadline, Progress, Silent
from appliance.ota.versions import InvalidVersion, Version

log = logging.getLogger(__name__)

CHUNK = 1 << 20
MAX_MANIFEST = 1 << 16
MAX_SIGNATURE = 1024
ZSTD_LEVEL = 10
HTTP_TIMEOUT = httpx.Timeout(60.0, connect=30.0)
SUFFIX = ".maxyupdate"


# --- making ------------------------------------------------------------------------------------


def _compress(name: str, image: Path, out: Path) -> Payload:
    """zstd-compress a slot image; describe both forms."""
    if not image.is_file():
        raise BundleError(f"the {name} image {image} does not exist.")
    sha, size = sha256_file(image), image.stat().st_size
    if size == 0:
        raise BundleError(f"the {name} image {image} is empty.")
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=-1, write_checksum=True)
    with image.open("rb") as source, out.open("wb") as target:
        compressor.copy_stream(source, target, size=size)
    compressed_sha, compressed_size = sha256_file(out), out.stat().st_size
    return Payload(name, sha, size, compressed_sha, compressed_size)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    tar.addfile(info, io.BytesIO(data))


def create_bundle(
    out: Path,
    *,
    version: str,
    boards: Sequence[str],
    boot_images: Mapping[str, Path],
    root_image: Path,
    signing_key: Path,
    min_bootloader: str = "2023-01-01",
    next_key: Path | None = None,
) -> Path:
    """Compress the slot images, sign a manifest for them, and write the bundle to ``out``.

    ``boot_images`` maps each slot ("a", "b") to its boot image: the same files, each with a
    cmdline.txt that names its own slot's root partition.
    """
    if sorted(boot_images) != ["a", "b"]:
        raise BundleError(
            "a bundle needs a boot image for slot a and one for slot b "
            f"(got {sorted(boot_images)})."
        )
    try:
        Version(version)
    except InvalidVersion as err:
        raise ManifestError(str(err)) from err
    unknown = [b for b in boards if b not in BOARDS]
    if not boards or unknown:
        raise ManifestError(f"boards must be some of {', '.join(BOARDS)} (got {list(boards)}).")
    try:
        date.fromisoformat(min_bootloader)
    except ValueError as err:
        raise ManifestError(f"min_bootloader {min_bootloader!r} is not YYYY-MM-DD.") from err
    key = load_private_key(signing_key)
    signer = key_id(key.public_key())
    out.parent.mkdir(parents=True, exist_ok=True)
    mtime = int(time.time())
    with tempfile.TemporaryDirectory(prefix=".maxyupdate-", dir=out.parent) as scratch:
        images = {f"boot_{slot}": image for slot, image in boot_images.items()}
        images["root"] = root_image
        payloads = {
            name: _compress(name, images[name], Path(scratch) / f"{name}.img.zst")
            for name in PAYLOAD_NAMES
        }
        document = {
            "format": FORMAT,
            "version": version,
            "boards": list(boards),
            "min_bootloader": min_bootloader,
            "created": datetime.fromtimestamp(mtime, UTC).isoformat().replace("+00:00", "Z"),
            "key_id": signer,
            "payloads": {name: payload.to_json() for name, payload in payloads.items()},
        }
        if next_key is not None:
            upcoming = load_public_key(next_key)
            document["next_key"] = NextKey(
                key_id(upcoming),
                public_pem(upcoming),
                key.sign(NEXT_KEY_CONTEXT + raw_public_key(upcoming)),
            ).to_json()
        raw = manifest_bytes(document)
        parse_manifest(raw)  # what we sign, we can read
        staging = out.with_name(f".{out.name}.tmp")
        with tarfile.open(staging, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_bytes(tar, MANIFEST_MEMBER, raw, mtime)
            _add_bytes(tar, SIGNATURE_MEMBER, key.sign(raw), mtime)
            for name in PAYLOAD_NAMES:
                info = tar.gettarinfo(Path(scratch) / f"{name}.img.zst", f"{name}.img.zst")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode, info.mtime = 0o644, mtime
                with (Path(scratch) / f"{name}.img.zst").open("rb") as member:
                    tar.addfile(info, member)
        staging.replace(out)
    log.info("[ota] op=bundle-created version=%s key_id=%s path=%s", version, signer, out)
    return out


# --- reading -----------------------------------------------------------------------------------


def is_url(source: str | Path) -> bool:
    """Whether ``source`` names a bundle over HTTP(S) rather than a file."""
    return isinstance(source, str) and source.startswith(("http://", "https://"))


class _ChunkReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (an HTTP response body)."""

    def __init__(self, chunks: Iterator[bytes], origin: str) -> None:
        self._chunks = chunks
        self._pending = b""
        self._origin = origin

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
            except httpx.HTTPError as err:
                raise BundleError(
                    f"downloading {self._origin} failed ({type(err).__name__}: {err}); check "
                    "the network and try again."
                ) from err
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


@contextmanager
def open_source(source: str | Path) -> Iterator[BinaryIO]:
    """Open a bundle for reading from a path or an http(s) URL."""
    if is_url(source):
        url = str(source)
        try:
            with httpx.Client(timeout=HTTP_TIMEOUT, follow_redirects=True) as client:
                with client.stream("GET", url) as response:
                    if response.status_code != 200:
                        raise BundleError(
                            f"{url} answered HTTP {response.status_code}; check the address."
                        )
                    raw = _ChunkReader(response.iter_bytes(CHUNK), url)
                    yield io.BufferedReader(raw, CHUNK)
        except httpx.HTTPError as err:
            raise BundleError(
                f"cannot download {url} ({type(err).__name__}: {err}); check the address and "
                "the network."
            ) from err
        return
    path = Path(source)
    try:
        handle = path.open("rb")
    except OSError as err:
        raise BundleError(f"cannot open the bundle {path} ({err.strerror}).") from err
    with handle:
        yield handle


class _Member(io.RawIOBase):
    """A member's contents; a truncated or damaged tar becomes a BundleError."""

    def __init__(self, inner: IO[bytes], name: str, origin: str) -> None:
        super().__init__()
        self._inner, self._name, self._origin = inner, name, origin

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except (tarfile.TarError, EOFError) as err:
            raise BundleError(
                f"{self._origin} ends inside {self._name} ({err}): it is truncated or damaged. "
                "Download it again."
            ) from err

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class BundleReader:
    """Walk a bundle's members in their fixed order from a stream."""

    def __init__(self, stream: BinaryIO, origin: str) -> None:
        self.origin = origin
        try:
            self.tar = tarfile.open(fileobj=stream, mode="r|")
        except tarfile.TarError as err:
            raise BundleError(
                f"{origin} is not a .maxyupdate bundle, or it is damaged (not a tar: {err}). "
                "Download it again."
            ) from err
        self._members = iter(self.tar)

    def _next(self, expected: str | None) -> tarfile.TarInfo | None:
        try:
            return next(self._members)
        except StopIteration:
            if expected is None:
                return None
            raise BundleError(
                f"{self.origin} ends before {expected}: it is truncated. Download it again."
            ) from None
        except tarfile.TarError as err:
            raise BundleError(
                f"{self.origin} is damaged ({err}) near {expected or 'its end'}. Download it again."
            ) from err

    def member(self, expected: str, limit: int | None = None) -> tuple[tarfile.TarInfo, IO[bytes]]:
        """The next member, which must be the regular file ``expected``."""
        info = self._next(expected)
        assert info is not None
        if info.name != expected or not info.isfile():
            raise BundleError(
                f"{self.origin} has {info.name!r} where {expected!r} belongs: it is not a "
                ".maxyupdate bundle, or it is damaged. Download it again."
            )
        if limit is not None and info.size > limit:
            raise BundleError(
                f"{expected} in {self.origin} is implausibly large ({info.size} B): the bundle "
                "is damaged. Download it again."
            )
        handle = self.tar.extractfile(info)
        assert handle is not None  # a regular file always has contents
        return info, cast(IO[bytes], _Member(handle, expected, self.origin))

    def signed_manifest(self) -> tuple[bytes, bytes]:
        """The manifest's bytes and its signature."""
        _, handle = self.member(MANIFEST_MEMBER, MAX_MANIFEST)
        raw = handle.read()
        _, handle = self.member(SIGNATURE_MEMBER, MAX_SIGNATURE)
        return raw, handle.read()

    def payload(self, payload: Payload) -> IO[bytes]:
        """The compressed stream of ``payload`` (the next member)."""
        info, handle = self.member(payload.member)
        if info.size != payload.compressed_size:
            raise PayloadError(
                f"{payload.member} is {info.size} bytes but the manifest signs "
                f"{payload.compressed_size}: the bundle is damaged. Download it again."
            )
        return handle

    def skip(self, payload: Payload) -> None:
        """Pass over ``payload`` (the next member) without reading it."""
        self.member(payload.member)

    def finish(self) -> None:
        """Refuse anything after the last payload."""
        extra = self._next(None)
        if extra is not None:
            raise BundleError(
                f"{self.origin} has an unexpected member {extra.name!r} at its end: it is not "
                "a bundle Maxy made. Download it again from the release."
            )


def check_payloads(
    reader: BundleReader,
    manifest: Manifest,
    *,
    progress: Progress,
    deadline: Deadline | None = None,
    phase: str = "verify",
) -> None:
    """Hash every compressed payload against the manifest (nothing is written)."""
    total = sum(p.compressed_size for p in manifest.payloads.values())
    done = 0
    for name in PAYLOAD_NAMES:
        payload = manifest.payloads[name]
        handle = reader.payload(payload)
        digest = hashlib.sha256()
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            done += len(chunk)
            progress(phase, done, total, f"checking {payload.member}")
            if deadline is not None:
                deadline.check()
        if digest.hexdigest() != payload.compressed_sha256:
            raise PayloadError(
                f"{payload.member} does not match the hash its manifest signs: the bundle was "
                "damaged or tampered with. Download it again; nothing was written."
            )
    reader.finish()


def verify_bundle(
    path: Path | str,
    trust: TrustStore,
    *,
    board: str,
    current_version: str,
    full: bool = False,
    bootloader_timestamp: int | None = None,
    progress: Progress | None = None,
    deadline: Deadline | None = None,
) -> Manifest:
    """Check a bundle's signature, manifest and fit for this device (``full``: payloads too).

    The bootloader's build date is checked only when ``bootloader_timestamp`` is given (a USB
    watcher does not know it; ``maxy ota apply`` always passes it on a Pi).
    """
    report = progress or Silent()
    with open_source(path) as stream:
        reader = BundleReader(stream, str(path))
        raw, signature = reader.signed_manifest()
        manifest = verify_manifest(raw, signature, trust)
        check_installable(manifest, board=board, current_version=current_version)
        if bootloader_timestamp is not None:
            check_bootloader(manifest, board=board, bootloader_timestamp=bootloader_timestamp)
        if full:
            check_payloads(reader, manifest, progress=report, deadline=deadline)
    log.info(
        "[ota] op=verified version=%s key_id=%s full=%s source=%s",
        manifest.version,
        manifest.key_id,
        full,
        path,
    )
    return manifest
