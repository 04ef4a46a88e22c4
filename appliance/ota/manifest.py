"""The signed manifest of an update bundle, and whether this device may install it.

``manifest.json`` (UTF-8 JSON; the signature covers these exact bytes)::

    {
      "format": 2,
      "version": "1.4.0",                       PEP 440 or semver
      "boards": ["rpi4", "rpi5"],               any of rpi4, rpi5, x86-64
      "min_bootloader": "2023-01-01",           Pi bootloader build date tryboot needs
      "created": "2026-05-01T10:00:00Z",
      "key_id": "3f2a…",                        the key that signed manifest.sig
      "payloads": {
        "boot_a": {"sha256": …, "size": …, "compressed_sha256": …, "compressed_size": …},
        "boot_b": {…},                          slot B's boot image: cmdline.txt names root_b
        "root": {…}                             one root image, the same for either slot
      },
      "next_key": {                             optional: key rotation
        "key_id": "…", "public_key": "-----BEGIN PUBLIC KEY-----…",
        "signature": "<base64 ed25519 signature of NEXT_KEY_CONTEXT + raw public key>"
      }
    }

A boot image names its slot's root partition (``root=PARTUUID=`` in cmdline.txt), so a bundle
carries one per slot and ``apply`` writes the one made for the slot it installs into. (Format 1
carried one boot image, slot A's, which would have started slot B on slot A's old root.)

``sha256``/``size`` describe the uncompressed slot image (what ends up on the partition);
``compressed_*`` the zstd member in the tar. ``next_key.signature`` is made by the signing key, so
the next key is cross-signed even when read apart from the manifest.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from appliance.ota.errors import CompatibilityError, ManifestError, SignatureError
from appliance.ota.keys import TrustStore, key_id, parse_public_pem, raw_public
from appliance.ota.layout import Slot
from appliance.ota.versions import InvalidVersion, Version

FORMAT = 2
BOARDS = ("rpi4", "rpi5", "x86-64")
PI_BOARDS = frozenset({"rpi4", "rpi5"})
PAYLOAD_NAMES = ("boot_a", "boot_b", "root")
MANIFEST_MEMBER = "manifest.json"
SIGNATURE_MEMBER = "manifest.sig"
MEMBERS = (MANIFEST_MEMBER, SIGNATURE_MEMBER, *(f"{name}.img.zst" for name in PAYLOAD_NAMES))
NEXT_KEY_CONTEXT = b"maxy-ota next key v1\n"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_KEY_ID = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class Payload:
    """One slot image in the bundle."""

    name: str  # "boot_a", "boot_b" or "root"
    sha256: str
    size: int
    compressed_sha256: str
    compressed_size: int

    @property
    def member(self) -> str:
        """Its member name in the tar."""
        return f"{self.name}.img.zst"

    def to_json(self) -> dict[str, Any]:
        """The manifest's description of this payload."""
        return {
            "sha256": self.sha256,
            "size": self.size,
            "compressed_sha256": self.compressed_sha256,
            "compressed_size": self.compressed_size,
        }


@dataclass(frozen=True)
class NextKey:
    """A public key the bundle introduces, signed by the key that signed the manifest."""

    key_id: str
    public_key: str  # PEM
    signature: bytes

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``next_key`` object."""
        return {
            "key_id": self.key_id,
            "public_key": self.public_key,
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }


@dataclass(frozen=True)
class Manifest:
    """A parsed, signature-checked manifest."""

    version: str
    boards: tuple[str, ...]
    min_bootloader: date
    created: str
    key_id: str
    payloads: dict[str, Payload]
    next_key: NextKey | None
    raw: bytes

    def for_slot(self, slot: Slot) -> tuple[Payload, Payload]:
        """The (boot, root) payloads that go into ``slot``."""
        return self.payloads[f"boot_{slot.name}"], self.payloads["root"]

    @property
    def total_size(self) -> int:
        """Bytes one slot's images take once written (the larger boot image and the root)."""
        boot = max(self.payloads["boot_a"].size, self.payloads["boot_b"].size)
        return boot + self.payloads["root"].size

    def summary(self) -> dict[str, Any]:
        """What a UI shows about the bundle."""
        return {
            "version": self.version,
            "boards": list(self.boards),
            "minBootloader": self.min_bootloader.isoformat(),
            "created": self.created,
            "keyId": self.key_id,
            "nextKeyId": self.next_key.key_id if self.next_key else None,
            "size": self.total_size,
        }


def manifest_bytes(document: dict[str, Any]) -> bytes:
    """Serialise a manifest the one way bundles carry it."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _field(doc: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in doc:
        raise ManifestError(f"the manifest has no {name!r}; the bundle was not made by maxy.")
    value = doc[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"the manifest's {name!r} has the wrong type ({type(value).__name__}).")
    return value


def _payload(name: str, doc: Any) -> Payload:
    if not isinstance(doc, dict):
        raise ManifestError(f"the manifest's payload {name!r} is not an object.")
    sha, csha = _field(doc, "sha256", str), _field(doc, "compressed_sha256", str)
    size, csize = _field(doc, "size", int), _field(doc, "compressed_size", int)
    if not (_SHA256.match(sha) and _SHA256.match(csha)):
        raise ManifestError(f"payload {name!r} has a malformed sha256 (64 lower-case hex digits).")
    if size <= 0 or csize <= 0:
        raise ManifestError(f"payload {name!r} has a size of zero or less.")
    return Payload(name, sha, size, csha, csize)


def _next_key(doc: Any) -> NextKey:
    if not isinstance(doc, dict):
        raise ManifestError("the manifest's next_key is not an object.")
    ident, pem = _field(doc, "key_id", str), _field(doc, "public_key", str)
    try:
        signature = base64.b64decode(_field(doc, "signature", str), validate=True)
    except binascii.Error as err:
        raise ManifestError("the manifest's next_key signature is not base64.") from err
    key = parse_public_pem(pem, "the manifest's next_key")
    if key_id(key) != ident:
        raise ManifestError(f"next_key says its id is {ident} but the key's id is {key_id(key)}.")
    return NextKey(ident, pem, signature)


def parse_manifest(raw: bytes) -> Manifest:
    """Parse manifest bytes (whose signature was already checked) or raise ManifestError."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ManifestError(f"manifest.json is not UTF-8 JSON ({err}).") from err
    if not isinstance(doc, dict):
        raise ManifestError("manifest.json is not a JSON object.")
    form = _field(doc, "format", int)
    if form != FORMAT:
        raise ManifestError(
            f"the bundle has manifest format {form}; this maxy reads format {FORMAT}. "
            "Install an intermediate release first, or use a bundle made for this version."
        )
    version = _field(doc, "version", str)
    try:
        Version(version)
    except InvalidVersion as err:
        raise ManifestError(f"the manifest's version: {err}.") from err
    boards = _field(doc, "boards", list)
    if not boards or not all(isinstance(b, str) and b in BOARDS for b in boards):
        raise ManifestError(f"the manifest's boards {boards!r} must be some of {BOARDS}.")
    try:
        min_bootloader = date.fromisoformat(_field(doc, "min_bootloader", str))
    except ValueError as err:
        raise ManifestError("the manifest's min_bootloader is not a YYYY-MM-DD date.") from err
    ident = _field(doc, "key_id", str)
    if not _KEY_ID.match(ident):
        raise ManifestError("the manifest's key_id is not 16 lower-case hex digits.")
    payloads_doc = _field(doc, "payloads", dict)
    if sorted(payloads_doc) != sorted(PAYLOAD_NAMES):
        raise ManifestError(
            f"the manifest's payloads are {sorted(payloads_doc)}; expected {list(PAYLOAD_NAMES)}."
        )
    payloads = {name: _payload(name, payloads_doc[name]) for name in PAYLOAD_NAMES}
    next_key = _next_key(doc["next_key"]) if doc.get("next_key") is not None else None
    return Manifest(
        version=version,
        boards=tuple(boards),
        min_bootloader=min_bootloader,
        created=str(doc.get("created", "")),
        key_id=ident,
        payloads=payloads,
        next_key=next_key,
        raw=raw,
    )


def _claimed_signer(raw: bytes) -> str:
    """The key id an unverified manifest names, for the error message only."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "unknown"
    claimed = doc.get("key_id") if isinstance(doc, dict) else None
    return claimed if isinstance(claimed, str) and _KEY_ID.match(claimed) else "unknown"


def verify_manifest(raw: bytes, signature: bytes, trust: TrustStore) -> Manifest:
    """Check the signature over the exact bytes FIRST, then parse, then the next key."""
    if len(signature) != 64:
        raise SignatureError(
            f"manifest.sig holds {len(signature)} bytes, not a 64-byte ed25519 signature: the "
            "bundle is damaged. Download it again."
        )
    signer = trust.signer_of(signature, raw)
    if signer is None:
        claimed = _claimed_signer(raw)
        if claimed in trust:
            raise SignatureError(
                f"manifest.json does not match its signature by key {claimed}: it was changed "
                "after signing or is damaged. Download the bundle again."
            )
        if claimed == "unknown":
            raise SignatureError(
                "manifest.json is damaged (it names no signing key) and matches no trusted "
                "signature. Download the bundle again."
            )
        raise SignatureError(
            f"manifest.json names signing key {claimed}, which this device does not trust "
            f"(trusted: {', '.join(trust) or 'none'}; from {trust.describe_dirs()}). Use a "
            "bundle signed by a trusted key, or download it again if it should be one."
        )
    manifest = parse_manifest(raw)
    if manifest.key_id != signer:
        raise SignatureError(
            f"manifest.json was signed by key {signer} but names {manifest.key_id} as its "
            "signer: the bundle is not genuine."
        )
    if manifest.next_key is not None:
        key = parse_public_pem(manifest.next_key.public_key, "the manifest's next_key")
        trust.verify(
            manifest.key_id,
            manifest.next_key.signature,
            NEXT_KEY_CONTEXT + raw_public(key),
            "the manifest's next_key",
        )
    return manifest


def bootloader_epoch(day: date) -> int:
    """Seconds since the epoch at the start of ``day`` (UTC)."""
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def check_installable(manifest: Manifest, *, board: str, current_version: str) -> None:
    """Refuse a genuine bundle for another board, or one not newer than what is installed."""
    if board not in manifest.boards:
        raise CompatibilityError(
            f"this bundle is for {', '.join(manifest.boards)}; this device is {board}. "
            f"Download the {manifest.version} bundle for {board}."
        )
    try:
        newer = Version(manifest.version) > Version(current_version)
    except InvalidVersion:
        newer = True  # a development build without a release version may take any release
    if not newer:
        raise CompatibilityError(
            f"this bundle holds {manifest.version}, which is not newer than the installed "
            f"{current_version}; downgrades are refused. Use a newer bundle."
        )


def check_bootloader(manifest: Manifest, *, board: str, bootloader_timestamp: int | None) -> None:
    """Refuse on a Pi whose bootloader is older than the manifest's ``min_bootloader``."""
    if board not in PI_BOARDS:
        return
    if bootloader_timestamp is None:
        raise CompatibilityError(
            "the bootloader's build date is unknown (no build-timestamp in the firmware "
            "state), so its tryboot support cannot be checked. Update the bootloader with "
            "`rpi-eeprom-update -a`, reboot, and try again."
        )
    if bootloader_timestamp < bootloader_epoch(manifest.min_bootloader):
        built = datetime.fromtimestamp(bootloader_timestamp, UTC).date().isoformat()
        raise CompatibilityError(
            f"the bootloader was built {built}; this update needs one from "
            f"{manifest.min_bootloader.isoformat()} or later for a safe trial boot. Update it "
            "with `rpi-eeprom-update -a`, reboot, and try again."
        )
