"""`maxy ota commit` after a trial boot: real health checks decide; keys rotate only on commit.

The healthy cases run against real engine, manager and edge processes (and the session's
Neo4j); the unhealthy ones against a device whose Maxy is not running at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.ota.autoboot import render
from appliance.ota.keys import key_id, load_public_key
from appliance.ota.layout import SLOT_A, SLOT_B
from tests.ota.cards import (
    Signer,
    SimDevice,
    SlotImages,
    make_bundle,
    make_device,
    make_signer,
    mtype_autoboot,
    ota,
    progress_lines,
    trust,
)
from tests.ota.conftest import stack_settings
from tests.support.processes import held_port, runtime_dir
from tests.support.stacks import Stack

pytestmark = pytest.mark.timeout(300)


def nothing_running() -> dict[str, str]:
    """Settings under which no part of Maxy answers."""
    return {
        "MAXY_PORT": str(held_port()),
        "MAXY_HOST": "127.0.0.1",
        "MAXY_RUNTIME_DIR": str(runtime_dir("maxy-none-")),
        "MAXY_ACCOUNT_ID": "00000000-0000-4000-8000-000000000000",
    }


def trial_of(
    tmp_path: Path,
    releases: dict[str, SlotImages],
    signer: Signer,
    running: dict[str, str],
    *,
    next_key: Signer | None = None,
    window: str = "60",
) -> SimDevice:
    """A device running 0.1.0 that applied 1.0.0 and rebooted into its trial on slot B."""
    device = make_device(
        tmp_path / "device", releases["0.1.0"], **running, MAXY_OTA_COMMIT_WINDOW=window
    )
    trust(device, signer)
    bundle = make_bundle(tmp_path / "bundles", releases["1.0.0"], signer, next_key=next_key)
    done = ota(device, "apply", str(bundle), "--yes", "--progress", "none")
    assert done.returncode == 0, done.stderr
    assert device.boot() is SLOT_B  # the armed reboot
    return device


def test_a_healthy_trial_becomes_the_default(
    tmp_path: Path, maxy_stack: Stack, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = trial_of(tmp_path, releases, release_key, stack_settings(maxy_stack))

    done = ota(device, "commit", "--progress", "json")

    assert done.returncode == 0, done.stderr
    phases = [line["phase"] for line in progress_lines(done.stdout)]
    assert list(dict.fromkeys(phases)) == ["health", "switch", "done"]
    assert mtype_autoboot(device.card) == render(SLOT_B, SLOT_A)
    state = device.state()
    assert state["committed"] == {"slot": "b", "version": "1.0.0"} and state["trial"] is None
    assert state["history"][-1]["outcome"] == "committed"  # type: ignore[index]
    # From now on every boot, even after a power cut, starts the new slot.
    assert device.boot(power_cut=True) is SLOT_B
    assert device.boot() is SLOT_B
    assert device.slot_hashes(SLOT_B) == releases["1.0.0"].hashes(SLOT_B)
    status = json.loads(ota(device, "status", "--json").stdout)
    assert status["slots"]["b"] == {"version": "1.0.0", "roles": ["committed", "running"]}
    again = ota(device, "commit")
    assert again.returncode == 0 and "nothing to commit" in again.stdout


def test_an_unhealthy_trial_is_not_switched_and_the_device_goes_back(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = trial_of(tmp_path, releases, release_key, nothing_running(), window="2")
    before = mtype_autoboot(device.card)

    done = ota(device, "commit", "--progress", "json")

    assert done.returncode == 1
    assert "failed its health check" in done.stderr.strip().splitlines()[-1]
    assert mtype_autoboot(device.card) == before == render(SLOT_A, SLOT_B)
    entry = device.state()["history"][-1]  # type: ignore[index]
    assert entry["outcome"] == "health-check-failed" and entry["version"] == "1.0.0"
    for check in ("edge", "engine", "manager"):
        assert f"{check}:" in entry["message"]
    assert device.reboots.read_text().count("reboot") == 2  # apply's, then commit's
    assert device.boot() is SLOT_A  # no tryboot armed: the firmware starts the old slot
    status = ota(device, "status").stdout
    assert "failed its health check and the device went back to 0.1.0" in status


def test_a_tunnel_connected_before_the_update_must_be_connected_again(
    tmp_path: Path, maxy_stack: Stack, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    device = trial_of(tmp_path, releases, release_key, stack_settings(maxy_stack), window="3")
    state_file = device.data / "ota" / "state.json"
    state = json.loads(state_file.read_text())
    state["trial"]["tunnelConnected"] = True
    state_file.write_text(json.dumps(state))

    done = ota(device, "commit")

    assert done.returncode == 1
    message = device.state()["history"][-1]["message"]  # type: ignore[index]
    assert "tunnel:" in message and "edge:" not in message and "engine:" not in message
    assert mtype_autoboot(device.card) == render(SLOT_A, SLOT_B)


def test_commit_outside_a_trial_changes_nothing(device: SimDevice) -> None:
    before = device.card.read_bytes()
    done = ota(device, "commit")
    assert done.returncode == 0 and "nothing to commit" in done.stdout
    assert device.card.read_bytes() == before


def test_a_committed_next_key_signs_the_following_release(
    tmp_path: Path, maxy_stack: Stack, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    upcoming = make_signer(tmp_path / "keys", "next")
    stranger = make_signer(tmp_path / "keys", "stranger")
    device = trial_of(
        tmp_path, releases, release_key, stack_settings(maxy_stack), next_key=upcoming
    )
    rotated = device.data / "keys" / "ota" / f"{key_id(load_public_key(upcoming.public))}.pub"
    assert not rotated.exists(), "a key must not be trusted before its bundle is committed"

    assert ota(device, "commit").returncode == 0
    assert rotated.read_text() == upcoming.public.read_text()

    unrelated = make_bundle(tmp_path / "b3", releases["1.1.0"], stranger)
    refused = ota(device, "apply", str(unrelated), "--yes", "--progress", "none")
    assert refused.returncode == 1 and "does not trust" in refused.stderr
    following = make_bundle(tmp_path / "b2", releases["1.1.0"], upcoming)
    accepted = ota(device, "apply", str(following), "--yes", "--progress", "none")
    assert accepted.returncode == 0, accepted.stderr
    # Now slot A (no longer committed) holds 1.1.0 for its trial; slot B stays the default.
    assert device.slot_hashes(SLOT_A) == releases["1.1.0"].hashes(SLOT_A)
    assert device.slot_hashes(SLOT_B) == releases["1.0.0"].hashes(SLOT_B)
    assert mtype_autoboot(device.card) == render(SLOT_B, SLOT_A)


def test_a_next_key_of_a_failed_trial_is_never_trusted(
    tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer
) -> None:
    upcoming = make_signer(tmp_path / "keys", "next")
    device = trial_of(
        tmp_path, releases, release_key, nothing_running(), next_key=upcoming, window="1"
    )
    assert ota(device, "commit").returncode == 1
    assert device.boot() is SLOT_A
    assert not (device.data / "keys" / "ota").exists()
    signed_by_next = make_bundle(tmp_path / "b2", releases["1.1.0"], upcoming)
    refused = ota(device, "apply", str(signed_by_next), "--yes", "--progress", "none")
    assert refused.returncode == 1 and "does not trust" in refused.stderr
