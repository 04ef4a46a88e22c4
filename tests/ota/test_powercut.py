"""Power cuts: 200 real `maxy ota apply` / `maxy ota commit` processes SIGKILLed at random points.

Each run works on a scratch copy of a card image and is killed with SIGKILL — after a random
delay, or a random moment into a randomly chosen phase (found from its ``--progress json``
lines). Half the runs then also tear the write that could have been in flight when the power
went: random bytes over a random range of the inactive slot while slots are being written, and
a byte-level mix of the old and new autoboot.txt sector around the autoboot rewrite.

Then the firmware's choice is computed (:func:`appliance.ota.autoboot.select_boot` on the
autoboot.txt that mtools reads back) for the tryboot flag as a power cut leaves it (cleared),
and — where the run had armed it — as a still-armed reboot would. Every choice must be a slot
whose boot and root partitions hash to a known good state, and the previously committed slot
must never change. The counts of where the kills landed are printed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from appliance.ota import autoboot
from appliance.ota.autoboot import render, select_boot
from appliance.ota.card import Card
from appliance.ota.layout import BOOTCONFIG, SLOT_A, SLOT_B, Slot
from tests.ota.cards import (
    Signer,
    SimDevice,
    SlotImages,
    make_bundle,
    make_device,
    maxy_ota,
    mtype_autoboot,
    ota,
    partition_table,
    trust,
)
from tests.ota.conftest import stack_settings
from tests.support.stacks import Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

RUNS = int(os.environ.get("MAXY_POWERCUT_RUNS", "200"))
SEED = int(os.environ.get("MAXY_POWERCUT_SEED", "20260501"))
TEAR_CHUNK = 256 * 1024


@dataclass
class Timeline:
    """When each phase's first progress line arrived in an uninterrupted run."""

    starts: dict[str, float]
    total: float

    def duration(self, phase: str) -> float:
        later = sorted(t for t in self.starts.values() if t > self.starts[phase])
        return (later[0] if later else self.total) - self.starts[phase]


@dataclass
class Run:
    """One process, its progress lines as they arrive, and a way to kill it on cue."""

    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    phases: list[tuple[str, float]] = field(default_factory=list)
    seen: threading.Condition = field(default_factory=threading.Condition)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                phase = str(json.loads(raw)["phase"])
            except (ValueError, KeyError):
                continue
            with self.seen:
                self.phases.append((phase, time.monotonic() - self.started))
                self.seen.notify_all()

    def wait_for(self, phase: str, timeout: float) -> bool:
        with self.seen:
            return self.seen.wait_for(
                lambda: any(p == phase for p, _ in self.phases) or self.proc.poll() is not None,
                timeout,
            )

    def close(self) -> None:
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    @property
    def last_phase(self) -> str:
        return self.phases[-1][0] if self.phases else "start-up"


def start(device: SimDevice, args: list[str]) -> tuple[Run, threading.Thread]:
    proc = subprocess.Popen(
        maxy_ota(*args),
        env=device.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    run = Run(proc)
    reader = threading.Thread(target=run.read, daemon=True)
    reader.start()
    return run, reader


def moved(device: SimDevice, root: Path) -> SimDevice:
    """The same device, copied to ``root`` (its settings pointing at the copy)."""
    shutil.copytree(device.root, root)
    old = str(device.root)
    return SimDevice(
        root, root / device.card.name, {k: v.replace(old, str(root)) for k, v in device.env.items()}
    )


def calibrate(template: SimDevice, scratch: Path, args: list[str]) -> Timeline:
    device = moved(template, scratch)
    run, reader = start(device, args)
    assert run.proc.wait(120) == 0, f"{args} fails without a power cut"
    reader.join(10)
    run.close()
    total = time.monotonic() - run.started
    starts: dict[str, float] = {}
    for phase, at in run.phases:
        starts.setdefault(phase, at)
    shutil.rmtree(scratch)
    return Timeline(starts, total)


def tear_slot(device: SimDevice, slot_partition: int, rng: random.Random) -> None:
    """Random bytes over a random range of a partition: a chunk write cut short."""
    offset, size = partition_table(device.card)[slot_partition]
    length = rng.randint(1, TEAR_CHUNK)
    at = rng.randrange(0, size - length)
    with device.card.open("r+b") as card:
        card.seek(offset + at)
        card.write(rng.randbytes(length))


def tear_autoboot(device: SimDevice, target: bytes, rng: random.Random) -> None:
    """A byte-level mix of the autoboot sector as it is and as ``target`` would make it."""
    with Card(device.card) as card:
        extent = card.extent(BOOTCONFIG)
        spot = autoboot.locate(card, extent)
        old = card.pread(extent, spot.sector_offset, spot.sector_size)
        new = target + old[len(target) :]
        mixed = bytes(n if rng.random() < 0.5 else o for o, n in zip(old, new, strict=True))
        card.pwrite(extent, spot.sector_offset, mixed)


@pytest.fixture(scope="module")
def templates(
    tmp_path_factory: pytest.TempPathFactory,
    releases: dict[str, SlotImages],
    release_key: Signer,
    maxy_stack: Stack,
) -> dict[str, SimDevice | Path]:
    """A device before apply (slot B empty), one in the trial boot, and the bundle."""
    root = tmp_path_factory.mktemp("powercut")
    before = make_device(
        root / "before-apply",
        releases["0.1.0"],
        **stack_settings(maxy_stack),
        MAXY_OTA_COMMIT_WINDOW="60",
    )
    trust(before, release_key)
    bundle = make_bundle(root / "bundles", releases["1.0.0"], release_key)
    trial = moved(before, root / "in-trial")
    done = ota(trial, "apply", str(bundle), "--yes", "--progress", "none")
    assert done.returncode == 0, done.stderr
    assert trial.boot() is SLOT_B
    return {"apply": before, "commit": trial, "bundle": bundle}


def test_every_power_cut_leaves_an_intact_slot_to_boot(
    tmp_path: Path,
    templates: dict[str, SimDevice | Path],
    releases: dict[str, SlotImages],
    capsys: pytest.CaptureFixture[str],
) -> None:
    apply_template, commit_template = templates["apply"], templates["commit"]
    bundle = templates["bundle"]
    assert isinstance(apply_template, SimDevice) and isinstance(commit_template, SimDevice)
    good: dict[Slot, tuple[str, str]] = {
        SLOT_A: releases["0.1.0"].hashes(SLOT_A),
        SLOT_B: releases["1.0.0"].hashes(SLOT_B),
    }
    commands = {
        "apply": ["apply", str(bundle), "--yes", "--progress", "json"],
        "commit": ["commit", "--progress", "json"],
    }
    timelines = {
        kind: calibrate(templates[kind], tmp_path / f"calibrate-{kind}", commands[kind])  # type: ignore[arg-type]
        for kind in commands
    }
    rng = random.Random(SEED)
    landed: Counter[tuple[str, str]] = Counter()
    tears: Counter[str] = Counter()
    booted: Counter[str] = Counter()

    for number in range(RUNS):
        kind = "apply" if number % 2 == 0 else "commit"
        template = apply_template if kind == "apply" else commit_template
        device = moved(template, tmp_path / f"run-{number}")
        if kind == "apply" and rng.random() < 0.5:
            # also start from an autoboot.txt whose [tryboot] names the committed slot
            with Card(device.card) as card:
                autoboot.write(card, SLOT_A, SLOT_A)
        committed_before = device.slot_hashes(SLOT_A)
        timeline = timelines[kind]
        run, reader = start(device, commands[kind])
        if rng.random() < 1 / 3:
            time.sleep(rng.uniform(0, timeline.total * 1.1))
        else:
            phase = rng.choice(sorted(timeline.starts))
            run.wait_for(phase, 60)
            time.sleep(rng.uniform(0, timeline.duration(phase)))
        completed = run.proc.poll() is not None
        if not completed:
            os.killpg(run.proc.pid, signal.SIGKILL)
        run.proc.wait(30)
        reader.join(10)
        run.close()
        phase = "completed" if completed else run.last_phase
        landed[kind, phase] += 1

        if rng.random() < 0.5 and not completed:
            if kind == "apply" and phase in ("write-boot", "write-root"):
                tear_slot(
                    device, SLOT_B.boot.number if phase == "write-boot" else SLOT_B.root.number, rng
                )
                tears["apply: slot write cut short"] += 1
            elif kind == "apply" and phase == "arm":
                tear_autoboot(device, render(SLOT_A, SLOT_B), rng)
                tears["apply: autoboot sector torn"] += 1
            elif kind == "commit" and phase in ("health", "switch"):
                tear_autoboot(device, render(SLOT_B, SLOT_A), rng)
                tears["commit: autoboot sector torn"] += 1

        text = mtype_autoboot(device.card)  # parseable by mtools, and by the firmware's rules
        flags = [False]
        if device.armed() or kind == "commit":
            flags.append(True)
        for tryboot in flags:
            slot = select_boot(text, tryboot)
            assert device.slot_hashes(slot) == good[slot], (
                f"run {number} ({kind}, killed in {phase}): tryboot={tryboot} boots slot "
                f"{slot.name}, which is not intact; autoboot.txt={text!r}"
            )
            booted[f"{kind} tryboot={'armed' if tryboot else 'cleared'} -> slot {slot.name}"] += 1
        assert device.slot_hashes(SLOT_A) == committed_before, f"run {number}: slot A changed"
        state = device.data / "ota" / "state.json"
        if state.exists():
            json.loads(state.read_text())  # replaced atomically: never half-written
        shutil.rmtree(device.root)

    with capsys.disabled():
        print(f"\npower-cut simulation: {RUNS} runs (seed {SEED})")
        for kind in ("apply", "commit"):
            order = [*timelines[kind].starts, "completed"]
            row = {p: landed[kind, p] for p in ["start-up", *order] if landed[kind, p]}
            print(f"  {kind:<7} kills by phase: {row}")
        print(f"  tears: {dict(tears)}")
        for outcome, count in sorted(booted.items()):
            print(f"  {outcome}: {count}")
        print(
            json.dumps(
                {
                    "runs": RUNS,
                    "seed": SEED,
                    "landed": {f"{k}:{p}": n for (k, p), n in sorted(landed.items())},
                    "tears": dict(tears),
                    "booted": dict(booted),
                }
            )
        )
    assert sum(landed.values()) == RUNS
