"""The update bundle made with the card: signed by the key the card trusts, carrying its slots."""

from __future__ import annotations

from pathlib import Path

import pytest
import zstandard

from appliance.core.fsio import sha256_file
from appliance.ota.bundle import BundleReader, open_source, verify_bundle
from appliance.ota.errors import SignatureError
from appliance.ota.keys import TrustStore, generate_key
from appliance.ota.layout import SLOTS, Slot, partuuid
from appliance.ota.manifest import PAYLOAD_NAMES, parse_manifest
from image.tools import ext4_list, ext4_read, fat_read
from tests.image.conftest import Card

pytestmark = pytest.mark.timeout(7200)


def trust_dir(card: Card, into: Path) -> Path:
    """The card's own trust roots, copied out of its root filesystem."""
    into.mkdir()
    for entry in ext4_list(card.parts["root_a"], "/etc/maxy/ota/trust"):
        (into / entry.name).write_bytes(
            ext4_read(card.parts["root_a"], f"/etc/maxy/ota/trust/{entry.name}")
        )
    return into


def test_the_bundle_verifies_with_the_cards_trust_root(card: Card, tmp_path: Path) -> None:
    trust = TrustStore.load([trust_dir(card, tmp_path / "trust")])
    boards = card.record["boards"]
    assert isinstance(boards, list)
    manifest = verify_bundle(
        card.bundle, trust, board=boards[0], current_version="0.0.1", full=True
    )
    assert manifest.version == card.record["version"]
    assert list(manifest.boards) == boards
    assert manifest.key_id == card.record["signing_key"]["id"]  # type: ignore[index]


def test_the_bundle_payloads_are_the_cards_slot_images(card: Card) -> None:
    # The signature is checked in the test above; here only what the manifest says matters.
    with open_source(card.bundle) as stream:
        raw, _signature = BundleReader(stream, str(card.bundle)).signed_manifest()
    payloads = parse_manifest(raw).payloads
    for slot in ("a", "b"):
        assert payloads[f"boot_{slot}"].sha256 == sha256_file(card.parts[f"boot_{slot}"])
        assert payloads[f"boot_{slot}"].size == card.parts[f"boot_{slot}"].stat().st_size
    assert (
        payloads["root"].sha256 == sha256_file(card.parts["root_a"]) == card.region_sha256("root_b")
    )
    assert payloads["root"].size == card.parts["root_a"].stat().st_size


def test_a_key_the_card_does_not_trust_is_refused(card: Card, tmp_path: Path) -> None:
    other = generate_key(tmp_path / "other")
    stranger = TrustStore.load([other.parent])
    boards = card.record["boards"]
    assert isinstance(boards, list)
    with pytest.raises(SignatureError):
        verify_bundle(card.bundle, stranger, board=boards[0], current_version="0.0.1")


@pytest.mark.parametrize("slot", SLOTS, ids=lambda slot: f"slot-{slot.name}")
def test_each_slots_boot_image_in_the_bundle_starts_that_slots_own_root(
    card: Card, tmp_path: Path, slot: Slot
) -> None:
    """What ``maxy ota apply`` writes into slot B must boot root_b, not the old root_a."""
    with open_source(card.bundle) as stream:
        reader = BundleReader(stream, str(card.bundle))
        manifest = parse_manifest(reader.signed_manifest()[0])
        image = tmp_path / f"boot_{slot.name}.img"
        for name in PAYLOAD_NAMES:
            payload = manifest.payloads[name]
            if name != f"boot_{slot.name}":
                reader.skip(payload)
                continue
            with image.open("wb") as out:
                zstandard.ZstdDecompressor().copy_stream(reader.payload(payload), out)
            break
    want = f"root=PARTUUID={partuuid(slot.root)}"
    assert want in fat_read(image, "/cmdline.txt").decode().split()
    if card.arch == "x86-64":
        assert want in fat_read(image, "/syslinux.cfg").decode().split()
