"""The card's partition table, read with ``sfdisk --json`` from the built image file."""

from __future__ import annotations

import pytest

from appliance.ota.layout import FIRST_LBA_MIB, MIB, PARTITIONS, TYPE_FAT, TYPE_LINUX, partuuid
from image import disk
from tests.image.conftest import Card

pytestmark = pytest.mark.timeout(7200)  # the first arm64 base: ~50 min emulated


def test_the_card_is_a_gpt_with_the_six_partitions_of_the_layout(card: Card) -> None:
    table = card.table
    assert table["label"] == "gpt"
    parts = table["partitions"]
    assert isinstance(parts, list)
    assert [p["name"] for p in parts] == [p.name for p in PARTITIONS]
    for part, expected in zip(parts, PARTITIONS, strict=True):
        assert part["node"].endswith(str(expected.number)), part
        assert part["type"] == (TYPE_FAT if expected.fs == "vfat" else TYPE_LINUX)


def test_partitions_are_mib_aligned_contiguous_and_sized_as_built(card: Card) -> None:
    sector = card.table["sectorsize"]
    assert sector == 512
    sized = disk.sizes(small=True)
    at = FIRST_LBA_MIB * MIB
    for part in card.table["partitions"]:  # type: ignore[attr-defined]
        start, size = part["start"] * 512, part["size"] * 512
        assert start % MIB == 0 and size % MIB == 0, part
        assert start == at, f"{part['name']} does not follow the previous partition"
        assert size == sized[part["name"]] * MIB
        at += size
    # The backup GPT fits after the last partition.
    assert card.image.stat().st_size >= at + 33 * 512


def test_release_sizes_are_the_layouts(card: Card) -> None:
    assert disk.sizes(small=False) == {p.name: p.size_mib for p in PARTITIONS}
    # A test build only shrinks the partitions; it never reorders or drops one.
    assert set(disk.sizes(small=True)) == set(disk.sizes(small=False))


def test_every_card_has_the_same_fixed_partition_ids(card: Card) -> None:
    # The bundle's boot image names its root by PARTUUID: every card must carry the same ones.
    assert card.table["id"] == disk.disk_guid().upper()
    for part, expected in zip(card.table["partitions"], PARTITIONS, strict=True):  # type: ignore[call-overload]
        assert part["uuid"] == partuuid(expected).upper()
    uuids = [p["uuid"] for p in card.table["partitions"]]  # type: ignore[attr-defined]
    assert len(set(uuids)) == len(uuids)
