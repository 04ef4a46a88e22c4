"""The card: our GPT reader agrees with sfdisk, survives a damaged header, refuses other disks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from appliance.ota.card import Card
from appliance.ota.errors import SlotWriteError, StateError
from appliance.ota.layout import BOOT_A, PARTITIONS
from tests.ota.cards import SlotImages, build_card, partition_table


@pytest.fixture
def card(tmp_path: Path, releases: dict[str, SlotImages]) -> Path:
    return build_card(tmp_path / "card.img", releases["0.1.0"], releases["1.0.0"])


def test_partitions_are_where_sfdisk_says(card: Path) -> None:
    table = partition_table(card)
    with Card(card, writable=False) as opened:
        assert {n: (e.offset, e.size) for n, e in opened.extents.items()} == table
        assert [opened.extents[p.number].name for p in PARTITIONS] == [p.name for p in PARTITIONS]


def test_a_damaged_primary_header_falls_back_to_the_backup(card: Path) -> None:
    with card.open("r+b") as handle:
        handle.seek(512)
        handle.write(b"\0" * 512)
    with Card(card, writable=False) as opened:
        assert {n: (e.offset, e.size) for n, e in opened.extents.items()} == {
            n: v for n, v in partition_table(card).items()
        }


def test_a_disk_without_gpt_says_to_point_at_the_whole_card(tmp_path: Path) -> None:
    blank = tmp_path / "blank.img"
    blank.write_bytes(bytes(4 << 20))
    with pytest.raises(StateError, match="whole card"):
        Card(blank)


def test_a_foreign_gpt_disk_is_refused(tmp_path: Path) -> None:
    disk = tmp_path / "other.img"
    disk.write_bytes(bytes(8 << 20))
    subprocess.run(
        ["sfdisk", "--quiet", str(disk)],
        input="label: gpt\nsize=2MiB, name=EFI\n",
        text=True,
        check=True,
        capture_output=True,
    )
    with pytest.raises(StateError, match="not a Maxy card"):
        Card(disk)


def test_a_missing_card_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="MAXY_OTA_DEVICE"):
        Card(tmp_path / "nothing")


def test_writes_stay_inside_their_partition(card: Path) -> None:
    with Card(card) as opened:
        extent = opened.extent(BOOT_A)
        with pytest.raises(SlotWriteError, match="past the end"):
            opened.pwrite(extent, extent.size - 1, b"xy")
        with pytest.raises(ValueError):
            opened.pread(extent, extent.size, 1)
