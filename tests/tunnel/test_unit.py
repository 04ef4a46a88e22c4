"""The systemd unit for cloudflared."""

from __future__ import annotations

from pathlib import Path

from appliance.core.config import load_settings
from appliance.tunnel.unit import render_unit


def test_the_unit_is_notify_typed_and_never_updates_itself(tmp_path: Path) -> None:
    settings = load_settings({"MAXY_DATA_DIR": str(tmp_path / "my data")})
    unit = render_unit(settings)
    assert "Type=notify" in unit.splitlines()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == (
        f"ExecStart=/usr/bin/cloudflared --no-autoupdate --config "
        f"'{tmp_path}/my data/cloudflared/config.yml' tunnel run"
    )
    assert "${" not in unit and "User=maxy" in unit
