"""Bundles: what create_bundle writes, and every bundle a device must refuse before writing.

A refusal counts only if not a single byte reached the card: each case hashes the whole card
image before and after, and checks no trial boot was armed and no reboot was asked for.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import tarfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.config import load_settings
from appliance.ota.apply import apply_update
from appliance.ota.bundle import verify_bundle
from appliance.ota.errors import (
    BundleError,
    CompatibilityError,
    ManifestError,
    OtaError,
    PayloadError,
    SignatureError,
)
from appliance.ota.keys import TrustStore, key_id, load_private_key, load_public_key
from appliance.ota.layout import SLOT_A, SLOT_B
from appliance.ota.manifest import MEMBERS
from appliance.ota.progress import Silent
from tests.ota.cards import (
    BOARD,
    Signer,
    SimDevice,
    SlotImages,
    fat_image,
    make_bundle,
    make_device,
    make_signer,
    maxy_ota,
    mtype_autoboot,
    sha256,
    trust,
)
from tests.support.processes import base_environ


def card_snapshot(device: SimDevice) -> tuple[str, bool, bool]:
    """Everything a refused apply must leave as it was."""
    return sha256(device.card.read_bytes()), device.armed(), device.reboots.exists()


def apply_in_process(device: SimDevice, bundle: Path) -> None:
    apply_update(load_settings(device.env), bundle, Silent())


def refused(device: SimDevice, bundle: Path, error: type[OtaError], match: str | None) -> OtaError:
    """Apply ``bundle``; it must fail with ``error`` before anything reaches the card."""
    before = card_snapshot(device)
    with pytest.raises(error, match=match) as caught:
        apply_in_process(device, bundle)
    assert card_snapshot(device) == before
    return caught.value


def rebuild(
    bundle: Path,
    out: Path,
    signing_key: Path,
    *,
    edit: Callable[[dict[str, Any]], None] | None = None,
    order: Sequence[str] = MEMBERS,
    extra: dict[str, bytes] | None = None,
) -> Path:
    """Re-sign a bundle after editing its manifest, with its members in ``order``."""
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    doc = json.loads(members["manifest.json"])
    if edit is not None:
        edit(doc)
    key = load_private_key(signing_key)
    doc["key_id"] = key_id(key.public_key())
    raw = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    members.update({"manifest.json": raw, "manifest.sig": key.sign(raw), **(extra or {})})
    with tarfile.open(out, "w") as tar:
        for name in [*order, *(extra or {})]:
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return out


@pytest.fixture
def bundle(tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer) -> Path:
    return make_bundle(tmp_path / "bundles", releases["1.0.0"], release_key)


def test_a_bundle_is_a_tar_of_a_signed_manifest_and_three_payloads(
    bundle: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    with tarfile.open(bundle, "r:") as tar:
        assert tar.getnames() == list(MEMBERS)
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert len(files["manifest.sig"]) == 64
    load_public_key(release_key.public).verify(files["manifest.sig"], files["manifest.json"])
    doc = json.loads(files["manifest.json"])
    images = releases["1.0.0"]
    assert doc["version"] == "1.0.0" and doc["boards"] == ["rpi4"] and doc["format"] == 2
    assert doc["payloads"]["boot_a"]["sha256"] == sha256(images.boot_a.read_bytes())
    assert doc["payloads"]["boot_b"]["sha256"] == sha256(images.boot_b.read_bytes())
    assert doc["payloads"]["root"]["size"] == images.root.stat().st_size
    assert doc["payloads"]["root"]["compressed_sha256"] == sha256(files["root.img.zst"])
    manifest = verify_bundle(
        bundle,
        TrustStore.load(release_key.public.parent),
        board="rpi4",
        current_version="0.1.0",
        full=True,
    )
    assert manifest.version == "1.0.0" and manifest.key_id == key_id(
        load_public_key(release_key.public)
    )


def test_maxy_ota_bundle_signs_both_boot_images_and_the_root(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    """The release command: a boot image per slot, else a usage error."""
    images, out = releases["1.0.0"], tmp_path / "cli.maxyupdate"
    common = [
        "--version",
        "1.0.0",
        "--board",
        "rpi4",
        "--root",
        str(images.root),
        "--key",
        str(release_key.private),
    ]
    done = subprocess.run(
        maxy_ota(
            "bundle",
            str(out),
            *common,
            "--boot-a",
            str(images.boot_a),
            "--boot-b",
            str(images.boot_b),
        ),
        capture_output=True,
        text=True,
        env=base_environ(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    manifest = verify_bundle(
        out,
        TrustStore.load(release_key.public.parent),
        board="rpi4",
        current_version="0.1.0",
        full=True,
    )
    assert manifest.payloads["boot_a"].sha256 == sha256(images.boot_a.read_bytes())
    assert manifest.payloads["boot_b"].sha256 == sha256(images.boot_b.read_bytes())
    one_boot = subprocess.run(
        maxy_ota("bundle", str(tmp_path / "x.maxyupdate"), *common, "--boot-a", str(images.boot_a)),
        capture_output=True,
        text=True,
        env=base_environ(),
        check=False,
    )
    assert one_boot.returncode == 2 and "--boot-b" in one_boot.stderr


def _spans(bundle: Path) -> dict[str, tuple[int, int]]:
    """Byte ranges of each member's data, and of each member's header block."""
    spans: dict[str, tuple[int, int]] = {}
    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            spans[member.name] = (member.offset_data, member.size)
            spans[f"header of {member.name}"] = (member.offset, 512)
    return spans


EXPECTED = {
    "manifest.json": SignatureError,
    "manifest.sig": SignatureError,
    "boot_a.img.zst": PayloadError,
    "boot_b.img.zst": PayloadError,
    "root.img.zst": PayloadError,
    "header of manifest.json": BundleError,
    "header of root.img.zst": BundleError,
}


@pytest.fixture(scope="module")
def tamper_target(
    tmp_path_factory: pytest.TempPathFactory, releases: dict[str, SlotImages], release_key: Signer
) -> tuple[SimDevice, Path, Path]:
    root = tmp_path_factory.mktemp("tamper")
    device = make_device(root / "device", releases["0.1.0"])
    trust(device, release_key)
    good = make_bundle(root / "bundles", releases["1.0.0"], release_key)
    return device, good, root / "tampered.maxyupdate"


@pytest.mark.parametrize("region", list(EXPECTED))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_flipped_bit_anywhere_is_refused_before_a_slot_is_touched(
    tamper_target: tuple[SimDevice, Path, Path], region: str, data: st.DataObject
) -> None:
    device, good, tampered = tamper_target
    start, size = _spans(good)[region]
    position = data.draw(st.integers(start, start + size - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    content = bytearray(good.read_bytes())
    content[position] ^= 1 << bit
    tampered.write_bytes(bytes(content))
    error = refused(device, tampered, EXPECTED[region], None)
    assert "download" in str(error).lower(), str(error)


def test_a_bundle_signed_by_an_unknown_key_is_refused(
    tmp_path: Path, device: SimDevice, releases: dict[str, SlotImages]
) -> None:
    stranger = make_signer(tmp_path / "keys", "stranger")
    bundle = make_bundle(tmp_path / "b", releases["1.0.0"], stranger)
    refused(device, bundle, SignatureError, "does not trust")


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("downgrade", CompatibilityError, "downgrades are refused"),
        ("same version", CompatibilityError, "not newer than the installed 0.1.0"),
        ("other board", CompatibilityError, "this device is rpi4"),
        ("old bootloader", CompatibilityError, "bootloader was built 2022-06-01"),
        ("unknown bootloader", CompatibilityError, "build date is unknown"),
        ("too big for the card", CompatibilityError, "does not fit partition 3"),
    ],
)
def test_a_genuine_bundle_not_for_this_device_is_refused(
    tmp_path: Path,
    device: SimDevice,
    releases: dict[str, SlotImages],
    release_key: Signer,
    case: str,
    error: type[OtaError],
    match: str,
) -> None:
    images = releases["1.0.0"]
    boards: tuple[str, ...] = (BOARD,)
    version: str | None = None
    if case == "downgrade":
        version = "0.0.9"
    elif case == "same version":
        version = "0.1.0"
    elif case == "other board":
        boards = ("rpi5", "x86-64")
    elif case == "old bootloader":
        device.set_firmware(2, built=datetime(2022, 6, 1, tzinfo=UTC))
    elif case == "unknown bootloader":
        device.set_firmware(2, built=None)
    elif case == "too big for the card":
        big = fat_image(tmp_path / "big-boot.img", 5, {"version.txt": b"1.0.0\n"})
        images = SlotImages("1.0.0", images.boot_a, big, images.root)
    bundle = make_bundle(tmp_path / "b", images, release_key, version=version, boards=boards)
    refused(device, bundle, error, match)


def test_an_x86_64_device_has_no_bootloader_date_to_check(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = make_device(tmp_path / "pc", releases["0.1.0"], MAXY_OTA_BOARD="x86-64")
    trust(device, release_key)
    device.set_firmware(2, built=None)
    bundle = make_bundle(tmp_path / "b", releases["1.0.0"], release_key, boards=("x86-64",))
    apply_in_process(device, bundle)
    assert device.slot_hashes(SLOT_B) == releases["1.0.0"].hashes(SLOT_B) and device.armed()


@pytest.mark.parametrize(
    ("case", "error", "match"),
    [
        ("newer format", ManifestError, "format 3"),
        ("missing payload", ManifestError, "payloads"),
        ("next key not cross-signed", SignatureError, "next_key"),
        ("payloads swapped", BundleError, "where 'boot_a.img.zst' belongs"),
        ("extra member", BundleError, "unexpected member"),
        ("not a tar", BundleError, "not a .maxyupdate"),
        ("truncated", BundleError, "truncated"),
    ],
)
def test_a_malformed_bundle_is_refused(
    tmp_path: Path,
    device: SimDevice,
    bundle: Path,
    release_key: Signer,
    releases: dict[str, SlotImages],
    case: str,
    error: type[OtaError],
    match: str,
) -> None:
    out = tmp_path / "bad.maxyupdate"
    key = release_key.private
    if case == "newer format":
        rebuild(bundle, out, key, edit=lambda doc: doc.update(format=3))
    elif case == "missing payload":
        rebuild(bundle, out, key, edit=lambda doc: doc["payloads"].pop("root"))
    elif case == "next key not cross-signed":
        other = make_signer(tmp_path / "keys", "next")
        signed = make_bundle(tmp_path / "nk", releases["1.0.0"], release_key, next_key=other)

        def swap_signature(doc: dict[str, Any]) -> None:
            # signed by the next key itself, not by the release key that signs the manifest
            forged = load_private_key(other.private).sign(b"maxy-ota next key")
            doc["next_key"]["signature"] = base64.b64encode(forged).decode()

        rebuild(signed, out, key, edit=swap_signature)
    elif case == "payloads swapped":
        rebuild(
            bundle,
            out,
            key,
            order=[
                "manifest.json",
                "manifest.sig",
                "root.img.zst",
                "boot_a.img.zst",
                "boot_b.img.zst",
            ],
        )
    elif case == "extra member":
        rebuild(bundle, out, key, extra={"evil.sh": b"#!/bin/sh\n"})
    elif case == "not a tar":
        out.write_bytes(b"MAXY" * 4096)
    elif case == "truncated":
        out.write_bytes(bundle.read_bytes()[: bundle.stat().st_size * 2 // 3])
    refused(device, out, error, match)


def test_a_signed_payload_that_decompresses_wrongly_never_gets_armed(
    tmp_path: Path, device: SimDevice, bundle: Path, release_key: Signer
) -> None:
    """A signer's mistake (wrong uncompressed hash) is caught while writing the inactive slot."""
    out = rebuild(
        bundle,
        tmp_path / "wrong.maxyupdate",
        release_key.private,
        edit=lambda doc: doc["payloads"]["root"].update(sha256="0" * 64),
    )
    committed = device.slot_hashes(SLOT_A)
    autoboot = mtype_autoboot(device.card)
    with pytest.raises(PayloadError, match="different hash"):
        apply_in_process(device, out)
    assert device.slot_hashes(SLOT_A) == committed
    assert mtype_autoboot(device.card) == autoboot
    assert not device.armed() and not device.reboots.exists()
    state = device.state()
    assert state["slots"]["b"] == {"version": None, "writing": "1.0.0"}  # type: ignore[index]
    assert state["history"][-1]["outcome"] == "apply-failed"  # type: ignore[index]
