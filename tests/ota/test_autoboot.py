"""autoboot.txt: the firmware's choice, in-place rewrites on FAT12/16/32, torn writes."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.ota import autoboot
from appliance.ota.autoboot import DEFAULT_CONTENT, parse, render, select_boot
from appliance.ota.card import Card
from appliance.ota.errors import StateError
from appliance.ota.layout import BOOTCONFIG, SLOT_A, SLOT_B, Slot
from tests.ota.cards import (
    SMALL_MIB,
    SlotImages,
    build_card,
    mtype_autoboot,
    partition_table,
    read_partition,
    run,
)

A, B = SLOT_A, SLOT_B

SELECTION = [
    # (autoboot.txt, tryboot flag, slot the firmware boots)
    (render(A, B), False, A),
    (render(A, B), True, B),
    (render(B, A), False, B),
    (render(B, A), True, A),
    (render(A, A), True, A),
    ("[all]\ntryboot_a_b=0\nboot_partition=2\n[tryboot]\nboot_partition=3\n", True, A),
    ("[all]\nboot_partition=3\n", True, B),  # no tryboot_a_b: the flag does not switch slots
    (
        "# comment\n[all]\n tryboot_a_b=1 \nboot_partition=3 # B\n\n[tryboot]\nboot_partition=2\n",
        True,
        A,
    ),
    ("[all]\ntryboot_a_b=1\nboot_partition=2\n[pi5]\nboot_partition=3\n", True, A),
]


@pytest.mark.parametrize(("text", "tryboot", "expected"), SELECTION)
def test_the_firmware_boots_the_slot_its_rules_name(
    text: str | bytes, tryboot: bool, expected: Slot
) -> None:
    assert select_boot(text, tryboot) is expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[all]\ntryboot_a_b=1\n",
        "[all]\nboot_partition=4\n",
        "[all]\nboot_partition=x\n",
        "[all]\nboot_partition\n",
        "[all]\nboot_partition=2\n[tryboot]\nboot_partition=7\n",
    ],
)
def test_a_file_naming_no_slot_is_refused_with_the_fix(text: str) -> None:
    with pytest.raises(StateError, match=r"autoboot\.txt"):
        parse(text)


def test_the_file_maxy_writes_is_fixed_length() -> None:
    lengths = {len(render(d, t)) for d in (A, B) for t in (A, B)}
    assert lengths == {64} and DEFAULT_CONTENT == render(A, B)


@pytest.mark.parametrize(("bits", "size_mib"), [(12, 2), (16, 16), (32, 40)])
def test_each_fat_kind_is_rewritten_in_place_in_one_sector(
    tmp_path: Path, releases: dict[str, SlotImages], bits: int, size_mib: int
) -> None:
    card = build_card(
        tmp_path / "card.img",
        releases["0.1.0"],
        sizes={**SMALL_MIB, "bootconfig": size_mib},
        fat_bits=bits,
    )
    before = read_partition(card, BOOTCONFIG.number)
    with Card(card) as opened:
        spot = autoboot.locate(opened, opened.extent(BOOTCONFIG))
        assert spot.fat_bits == bits
        assert autoboot.write(opened, B, A) is True
        assert autoboot.write(opened, B, A) is False  # already so: nothing written
    after = read_partition(card, BOOTCONFIG.number)
    assert mtype_autoboot(card) == render(B, A)
    changed = [i for i in range(len(before)) if before[i] != after[i]]
    assert changed and all(spot.sector_offset <= i < spot.sector_offset + 512 for i in changed)
    extracted = tmp_path / "bootconfig.img"
    extracted.write_bytes(after)
    run("fsck.vfat", "-n", str(extracted))  # the filesystem is still clean
    listing = run("mdir", "-i", str(extracted), "::/", env={**os.environ, "MTOOLS_SKIP_CHECK": "1"})
    assert "64" in next(line for line in listing.splitlines() if "autoboot" in line.lower())


def _mix(old: bytes, new: bytes, mask: list[bool]) -> bytes:
    return bytes(n if take else o for o, n, take in zip(old, new, mask, strict=True))


# (old, new, slots an ordinary boot may start, slots an armed tryboot may start)
TRANSITIONS = [
    # apply with A committed: only [tryboot] changes, towards the verified new slot B
    (render(A, A), render(A, B), {A}, {A, B}),
    (render(A, B), render(A, B), {A}, {B}),
    # apply with B committed
    (render(B, B), render(B, A), {B}, {A, B}),
    # commit of a healthy trial: both digits swap; both slots are intact and verified
    (render(A, B), render(B, A), {A, B}, {A, B}),
    (render(B, A), render(A, B), {A, B}, {A, B}),
]


@pytest.mark.parametrize(("old", "new", "ordinary", "trial"), TRANSITIONS)
def test_every_torn_mix_of_a_rewrite_names_a_bootable_slot(
    old: bytes, new: bytes, ordinary: set[Slot], trial: set[Slot]
) -> None:
    differing = [i for i in range(len(old)) if old[i] != new[i]]
    assert len(differing) <= 2  # only the digits ever differ
    subsets = (c for r in range(len(differing) + 1) for c in itertools.combinations(differing, r))
    for chosen in subsets:
        taken = [i in chosen for i in range(len(old))]
        mixed = _mix(old, new, taken)
        assert select_boot(mixed, False) in ordinary
        assert select_boot(mixed, True) in trial


@settings(max_examples=300, deadline=None)
@given(
    transition=st.sampled_from(TRANSITIONS),
    mask=st.lists(st.booleans(), min_size=512, max_size=512),
    tail=st.binary(min_size=448, max_size=448),
)
def test_any_byte_level_tear_of_the_sector_parses_and_names_a_bootable_slot(
    transition: tuple[bytes, bytes, set[Slot], set[Slot]], mask: list[bool], tail: bytes
) -> None:
    old, new, ordinary, trial = transition
    # The sector beyond the file's 64 bytes is the same old and new (the file's slack).
    mixed = _mix(old + tail, new + tail, mask)[: len(old)]
    assert select_boot(mixed, False) in ordinary
    assert select_boot(mixed, True) in trial


def test_a_torn_sector_on_a_real_card_reads_back_through_mtools(
    tmp_path: Path, releases: dict[str, SlotImages]
) -> None:
    card = build_card(tmp_path / "card.img", releases["0.1.0"], autoboot=render(A, B))
    with Card(card) as opened:
        extent = opened.extent(BOOTCONFIG)
        spot = autoboot.locate(opened, extent)
        sector = opened.pread(extent, spot.sector_offset, 512)
        new = render(B, A) + sector[64:]
        # power fails half-way: the first digit is new, the second still old
        torn = new[:40] + sector[40:]
        opened.pwrite(extent, spot.sector_offset, torn)
    text = mtype_autoboot(card)
    assert text == render(B, B)
    assert select_boot(text, False) is B and select_boot(text, True) is B


def test_an_edited_autoboot_is_left_alone(tmp_path: Path, releases: dict[str, SlotImages]) -> None:
    edited = b"# edited by hand\n" + DEFAULT_CONTENT
    card = build_card(tmp_path / "card.img", releases["0.1.0"], autoboot=edited)
    with Card(card) as opened, pytest.raises(StateError, match="Restore it"):
        autoboot.write(opened, B, A)
    assert mtype_autoboot(card) == edited


def test_a_card_without_autoboot_says_how_to_restore_it(
    tmp_path: Path, releases: dict[str, SlotImages]
) -> None:
    card = build_card(tmp_path / "card.img", releases["0.1.0"])
    offset = partition_table(card)[1][0]
    subprocess.run(
        ["mdel", "-i", f"{card}@@{offset}", "::/autoboot.txt"],
        check=True,
        env={**os.environ, "MTOOLS_SKIP_CHECK": "1"},
    )
    with Card(card) as opened, pytest.raises(StateError, match=r"no autoboot\.txt"):
        autoboot.read(opened)
