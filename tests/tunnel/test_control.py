"""`maxy tunnel` reaches the tunnel's unit through root's path unit (appliance.tunnel.control).

Two levels: the units themselves (``systemd-analyze verify`` on the card's files, and what they
name equal to the code's paths), and the rule root applies to a request (only start, stop or
restart, only MAXY_TUNNEL_UNIT, a link or an oversized file refused), run with the real `maxy`
on both sides and a systemctl double at the program boundary.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.core.accounts import create_account
from appliance.core.config import Settings, SettingsError, load_settings
from appliance.tunnel import CloudflaredError, TunnelError
from appliance.tunnel.config import ensure_catch_all, load, save
from appliance.tunnel.control import answer_path, ask, request_path, run_request
from appliance.tunnel.unit import render_unit
from image.build import _image_env
from image.overlay import ENABLED_UNITS, STATIC
from tests.support.processes import maxy, runtime_dir
from tests.support.stacks import account_env

UNITS = STATIC / "usr" / "lib" / "systemd" / "system"
DOUBLE_DIR = Path(__file__).parent  # holds the `systemctl` double
UNIT = "cloudflared.service"


def unit_file(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def device_root(tmp_path: Path) -> Path:
    """A root tree for ``systemd-analyze verify --root``: this host's units, the card's, stubs."""
    root = tmp_path / "root"
    system = root / "usr" / "lib" / "systemd" / "system"
    shutil.copytree("/usr/lib/systemd/system", system, symlinks=True)
    for name in ("maxy-tunnel-request.path", "maxy-tunnel-request.service"):
        shutil.copyfile(UNITS / name, system / name)
    settings = load_settings({"MAXY_DATA_DIR": "/data"})
    (system / UNIT).write_text(render_unit(settings, binary="/usr/bin/cloudflared"))
    for program in ("usr/bin/maxy", "usr/bin/cloudflared"):
        (root / program).parent.mkdir(parents=True, exist_ok=True)
        (root / program).write_text("#!/bin/sh\n")
        (root / program).chmod(0o755)
    (root / "etc" / "maxy").mkdir(parents=True)
    (root / "etc" / "maxy" / "maxy.env").write_text("")
    return root


def verify(root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", f"--root={root}", *units],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_systemd_accepts_the_request_units_and_the_tunnel_unit(tmp_path: Path) -> None:
    root = device_root(tmp_path)
    done = verify(root, "maxy-tunnel-request.path", "maxy-tunnel-request.service", UNIT)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == ""
    # The check is not vacuous: a unit whose program is missing is refused.
    (root / "usr/bin/maxy").unlink()
    refused = verify(root, "maxy-tunnel-request.service")
    assert refused.returncode != 0 and "/usr/bin/maxy" in refused.stderr


def test_the_units_name_the_codes_paths_and_the_card_enables_them() -> None:
    settings = load_settings({"MAXY_DATA_DIR": "/data", "MAXY_TUNNEL_UNIT": UNIT})
    path = unit_file(UNITS / "maxy-tunnel-request.path")
    assert path["Path"]["PathExists"] == str(request_path(settings))
    assert path["Path"]["Unit"] == "maxy-tunnel-request.service"
    service = unit_file(UNITS / "maxy-tunnel-request.service")["Service"]
    assert service["ExecStart"] == "/usr/bin/maxy tunnel run-request"
    assert "User" not in service, "root: user maxy may not manage units"
    assert service["ReadWritePaths"] == str(settings.cloudflared_dir)
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    tunnel = render_unit(settings, binary="/usr/bin/cloudflared").splitlines()
    assert f"ConditionPathExists={settings.cloudflared_config}" in tunnel
    assert "User=maxy" in tunnel
    assert {"maxy-tunnel-request.path", UNIT} <= set(ENABLED_UNITS)
    assert _image_env(Path("m.gguf"), "2026.08.1")["MAXY_TUNNEL_UNIT"] == UNIT
    with pytest.raises(SettingsError, match="MAXY_TUNNEL_UNIT"):
        load_settings({"MAXY_TUNNEL_UNIT": "ssh.service --now"})


# ── The rule, with the real `maxy` on both sides ─────────────────────────────────────────────


def tunnel_env(tmp_path: Path) -> dict[str, str]:
    """A `maxy` environment for one account whose config names a tunnel."""
    data = tmp_path / "data"
    account = create_account(data / "accounts", "Test Owner")
    env = account_env(data, runtime_dir(), account.id, MAXY_TUNNEL_UNIT=UNIT)
    env["SYSTEMCTL_DOUBLE_LOG"] = str(tmp_path / "systemctl.log")
    settings = load_settings(env)
    doc = load(settings.cloudflared_config)
    doc["tunnel"] = "6ff42ae2-765d-4adf-8112-31c55c1551ef"
    ensure_catch_all(doc)
    save(settings.cloudflared_config, doc)
    return env


@contextmanager
def path_unit(env: dict[str, str], **root_extra: str) -> Iterator[list[int]]:
    """Play systemd's PathExists=: run `maxy tunnel run-request` (as root) per request.

    Root's PATH finds the systemctl double; the exit codes of the runs are collected.
    """
    settings = load_settings(env)
    root_env = {**env, "PATH": f"{DOUBLE_DIR}{os.pathsep}{env.get('PATH', os.defpath)}"}
    root_env.update(root_extra)
    stop = threading.Event()
    codes: list[int] = []

    def watch() -> None:
        while not stop.wait(0.05):
            request = request_path(settings)
            if request.exists() or request.is_symlink():
                done = subprocess.run(
                    maxy("tunnel", "run-request"), env=root_env, capture_output=True, timeout=60
                )
                codes.append(done.returncode)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield codes
    finally:
        stop.set()
        watcher.join(timeout=60)


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def tunnel(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        maxy("tunnel", *args), env=env, capture_output=True, text=True, timeout=120
    )


def test_maxy_tunnel_start_stop_restart_reach_systemctl_through_root(tmp_path: Path) -> None:
    env = tunnel_env(tmp_path)
    with path_unit(env) as codes:
        for verb in ("start", "restart", "stop"):
            done = tunnel(env, verb)
            assert done.returncode == 0, done.stderr
            assert f"Asked systemd to {verb} {UNIT}" in done.stdout
    log = Path(env["SYSTEMCTL_DOUBLE_LOG"])
    assert calls(log) == [["--no-block", verb, UNIT] for verb in ("start", "restart", "stop")]
    assert codes == [0, 0, 0], "one run per request: taken before acting, the unit never loops"
    assert not request_path(load_settings(env)).exists()


def test_systemctls_refusal_and_a_missing_path_unit_reach_the_owner(tmp_path: Path) -> None:
    env = tunnel_env(tmp_path)
    with path_unit(env, SYSTEMCTL_DOUBLE_FAIL="1"):
        done = tunnel(env, "restart")
    assert done.returncode == 1
    assert f"could not restart {UNIT}: Failed to restart {UNIT}: Unit {UNIT} not found" in (
        done.stderr
    )
    with pytest.raises(CloudflaredError, match="nobody took the request to start"):
        ask(load_settings(env), "start", timeout=0.5)


def test_without_a_unit_the_commands_say_how_to_run_cloudflared(tmp_path: Path) -> None:
    env = tunnel_env(tmp_path)
    del env["MAXY_TUNNEL_UNIT"]
    done = tunnel(env, "start")
    assert done.returncode == 1
    assert "MAXY_TUNNEL_UNIT is unset" in done.stderr and "tunnel run" in done.stderr
    with pytest.raises(TunnelError, match="MAXY_TUNNEL_UNIT"):
        ask(load_settings(env), "start")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Root's side in this process: the systemctl double on PATH; its log."""
    monkeypatch.setenv("PATH", f"{DOUBLE_DIR}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "systemctl.log"
    monkeypatch.setenv("SYSTEMCTL_DOUBLE_LOG", str(log))
    return log


def answer(settings: Settings) -> dict[str, object]:
    found: dict[str, object] = json.loads(answer_path(settings).read_text())
    return found


def test_root_runs_only_the_three_verbs_on_only_its_own_unit(tmp_path: Path, root: Path) -> None:
    settings = load_settings(tunnel_env(tmp_path))
    request = request_path(settings)
    # Another unit named in the request is ignored: the unit is root's setting.
    request.write_text(json.dumps({"verb": "stop", "id": "00aa11bb", "unit": "ssh.service"}))
    assert run_request(settings) == 0
    assert calls(root) == [["--no-block", "stop", UNIT]]
    assert answer(settings)["id"] == "00aa11bb" and answer(settings)["ok"] is True
    for verb in ("enable", "mask", "kill", "start; reboot"):
        request.write_text(json.dumps({"verb": verb, "id": "22cc33dd"}))
        assert run_request(settings) == 1
        assert answer(settings)["ok"] is False and "not one of start, stop, restart" in str(
            answer(settings)["message"]
        )
        assert not request.exists()
    assert len(calls(root)) == 1


def test_root_refuses_links_other_files_and_garbage_without_acting(
    tmp_path: Path, root: Path
) -> None:
    settings = load_settings(tunnel_env(tmp_path))
    request = request_path(settings)
    secret = tmp_path / "secret"
    secret.write_text(json.dumps({"verb": "start", "id": "00aa11bb"}))
    request.symlink_to(secret)  # a link is not followed, even to a valid request
    assert run_request(settings) == 0 and not request.is_symlink()
    request.mkdir()
    assert run_request(settings) == 0 and not request.exists()
    request.write_text(json.dumps({"verb": "start", "id": "00aa11bb", "pad": "x" * 5000}))
    assert run_request(settings) == 0 and not request.exists()
    for text in ("not json", "[1, 2]", json.dumps({"verb": "start", "id": "../../x"})):
        request.write_text(text)
        run_request(settings)
        assert not request.exists()
    assert calls(root) == [] and not answer_path(settings).exists()
    assert run_request(settings) == 0  # no request at all: nothing to do


def as_root_with(capabilities: str, *command: str) -> list[str]:
    """``command`` as uid 0 holding only ``capabilities`` (setpriv; "" for none at all)."""
    keep = f"-all,+{capabilities}" if capabilities else "-all"
    return [
        "setpriv",
        f"--inh-caps={keep}",
        f"--ambient-caps={keep}",
        f"--bounding-set={keep}",
        "--",
        *command,
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to hand the folder to another user")
def test_root_needs_only_dac_override_to_answer_in_maxys_private_folder(
    tmp_path: Path,
) -> None:
    env = tunnel_env(tmp_path)
    settings = load_settings(env)
    folder = settings.cloudflared_dir
    request_path(settings).write_text(json.dumps({"verb": "start", "id": "00aa11bb"}))
    for path in (folder, request_path(settings)):
        os.chown(path, 990, 990)  # the card's maxy
    folder.chmod(0o700)
    service = unit_file(UNITS / "maxy-tunnel-request.service")["Service"]
    kept = service["CapabilityBoundingSet"].removeprefix("CAP_").lower()
    assert kept == "dac_override"
    root_env = {**env, "PATH": f"{DOUBLE_DIR}{os.pathsep}{env['PATH']}"}
    # Without it, root cannot even see the request in maxy's 0700 folder.
    bare = subprocess.run(
        as_root_with("", *maxy("tunnel", "run-request")), env=root_env, capture_output=True
    )
    assert bare.returncode != 0
    assert f"Permission denied: '{request_path(settings)}'".encode() in bare.stderr
    done = subprocess.run(
        as_root_with(kept, *maxy("tunnel", "run-request")),
        env=root_env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert answer(settings)["ok"] is True and calls(Path(env["SYSTEMCTL_DOUBLE_LOG"])) == [
        ["--no-block", "start", UNIT]
    ]
