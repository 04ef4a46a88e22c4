"""Settings: defaults, precedence (env > TOML > default), validation messages, the README table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.core.config import (
    DEFAULT_CONFIG_FILE,
    SETTINGS,
    Settings,
    SettingsError,
    load_settings,
    settings_table,
)

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
HOME = Path("~").expanduser()
# An empty config file that exists everywhere: keeps /etc/maxy/maxy.toml out of the picture.
NO_CONFIG = Path(os.devnull)


@pytest.fixture
def empty_toml(tmp_path: Path) -> Path:
    """A config file with nothing in it: the defaults apply, whatever /etc holds."""
    path = tmp_path / "maxy.toml"
    path.write_text("")
    return path


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "maxy.toml"
    path.write_text(text)
    return path


# --- defaults -------------------------------------------------------------------------------

DEFAULTS: list[tuple[str, Any]] = [
    ("data_dir", Path("/data")),
    ("runtime_dir", Path("/run/maxy")),
    ("cache_dir", HOME / ".cache" / "maxy"),
    ("account_id", ""),
    ("host", "0.0.0.0"),
    ("port", 19200),
    ("trusted_proxies", ()),
    ("admin_hostnames", ()),
    ("public_hostnames", ()),
    ("lan_hostnames", ()),
    ("log_level", "INFO"),
    ("neo4j_uri", "bolt://127.0.0.1:7687"),
    ("neo4j_user", "neo4j"),
    ("neo4j_password_file", None),
    ("premium_dir", None),
    ("neo4j_version", "2026.08.1"),
    ("neo4j_home", None),
    ("neo4j_heap", "512m"),
    ("neo4j_pagecache", "256m"),
    ("embed_model", None),
    ("embed_max_chars", 8000),
    ("embed_threads", 0),
    ("search_mode", "convex"),
    ("search_vector_weight", 0.5),
    ("search_keyword_weight", 0.5),
    ("search_rrf_k", 60),
    ("search_boosts", False),
    ("search_routing", False),
    ("search_expansion", False),
    ("search_dedup", False),
    ("purge_grace_days", 7),
    ("graph_audit_interval", 3600.0),
    ("backup_at", "03:00"),
    ("backup_keep", 7),
    ("backup_keys", False),
    ("backup_dir", None),
    ("upload_max_mb", 50),
    ("upload_types", ("md", "markdown", "txt", "html", "htm", "pdf", "docx")),
    ("search_limit", 10),
    ("claude_bin", "claude"),
    ("claude_model", "sonnet"),
    ("claude_permission_mode", "bypassPermissions"),
    ("specialist_cap", 3),
    ("operator_reserve", 2),
    ("pty_cap", 8),
    ("session_memory_mb", 1024),
    ("idle_reap_interval", 30.0),
    ("idle_limit", 120.0),
    ("stop_grace", 5.0),
    ("context_window", 200000),
    ("compact_threshold", 0.75),
    ("compact_timeout", 120.0),
    ("schedule_interval", 30.0),
    ("manager_keepalive", 25.0),
    ("cloudflared_bin", "cloudflared"),
    ("chromium_bin", "chromium"),
    ("tunnel_unit", None),
    ("anthropic_base_url", None),
    ("anthropic_api_key_file", None),
    ("gateway_model", "claude-haiku-4-5"),
    ("agent_model", "claude-sonnet-4-6"),
    ("gateway_timeout", 3.0),
    ("lead_idle", 1800.0),
    ("telegram_api_url", None),
    ("telegram_poll_timeout", 25.0),
    ("telegram_turn_timeout", 300.0),
    ("channel_input_ack", 10.0),
    ("channel_stale_after", 900.0),
    ("preset_file", Path("/etc/maxy/preset/account.json")),
    ("service_user", "maxy"),
    ("data_disk", None),
    ("data_partition", 0),
    ("ota_device", Path("/dev/mmcblk0")),
    ("ota_trust_dir", Path("/etc/maxy/ota/trust")),
    ("ota_firmware_dir", Path("/proc/device-tree/chosen/bootloader")),
    ("ota_reboot_param", Path("/run/systemd/reboot-param")),
    ("ota_reboot_command", "systemctl reboot"),
    ("ota_board", ""),
    ("ota_backup", True),
    ("ota_neo4j_unit", "maxy-neo4j.service"),
    ("ota_commit_window", 300.0),
    ("ota_verify_timeout", 900.0),
    ("ota_backup_timeout", 900.0),
    ("ota_write_timeout", 1800.0),
    ("ota_readback_timeout", 900.0),
    ("ota_reboot_timeout", 120.0),
]


@pytest.mark.parametrize(("name", "expected"), DEFAULTS)
def test_defaults_apply_when_nothing_is_set(empty_toml: Path, name: str, expected: Any) -> None:
    settings = load_settings(environ={}, config_file=empty_toml)
    assert getattr(settings, name) == expected


def test_every_setting_has_a_documented_default_case() -> None:
    assert [name for name, _ in DEFAULTS] == [s.name for s in SETTINGS]


@pytest.mark.skipif(DEFAULT_CONFIG_FILE.exists(), reason=f"{DEFAULT_CONFIG_FILE} exists here")
def test_no_environment_and_no_config_file_gives_the_registry_defaults() -> None:
    settings = load_settings(environ={}, config_file=None)
    assert settings == Settings(**{s.name: s.default for s in SETTINGS})


def test_default_derived_paths(empty_toml: Path) -> None:
    settings = load_settings(environ={}, config_file=empty_toml)
    assert settings.accounts_dir == Path("/data/accounts")
    assert settings.keys_dir == Path("/data/keys")
    assert settings.neo4j_password_path == Path("/data/keys/neo4j-password")
    assert settings.neo4j_home_path == Path("/data/neo4j")
    assert settings.engine_socket == Path("/run/maxy/engine.sock")
    assert settings.app_socket == Path("/run/maxy/app.sock")
    assert settings.cookie_key_path == Path("/data/keys/cookie-hmac.key")
    assert settings.embed_model_path == (
        HOME / ".cache" / "maxy" / "models" / "all-minilm-l6-v2.f16.gguf"
    )


# --- precedence -----------------------------------------------------------------------------

# (name, TOML line, value the TOML gives, env value, value the env gives)
PRECEDENCE: list[tuple[str, str, Any, str, Any]] = [
    ("port", "port = 8080", 8080, "8081", 8081),
    ("port", 'port = "8080"', 8080, "8081", 8081),
    ("host", 'host = "127.0.0.1"', "127.0.0.1", "::1", "::1"),
    ("log_level", 'log_level = "debug"', "DEBUG", "error", "ERROR"),
    (
        "data_dir",
        'data_dir = "/srv/maxy"',
        Path("/srv/maxy"),
        "/var/lib/maxy",
        Path("/var/lib/maxy"),
    ),
    ("neo4j_heap", 'neo4j_heap = "1G"', "1g", "768m", "768m"),
    ("embed_threads", "embed_threads = 4", 4, "2", 2),
    ("embed_max_chars", "embed_max_chars = 100", 100, "50", 50),
    ("neo4j_uri", 'neo4j_uri = "neo4j://db:7687"', "neo4j://db:7687", "bolt://h:1", "bolt://h:1"),
    ("account_id", 'account_id = "from-file"', "from-file", "from-env", "from-env"),
]


@pytest.mark.parametrize(("name", "toml", "from_toml", "env", "from_env"), PRECEDENCE)
def test_toml_beats_default(
    tmp_path: Path, name: str, toml: str, from_toml: Any, env: str, from_env: Any
) -> None:
    settings = load_settings(environ={}, config_file=write_toml(tmp_path, toml))
    assert getattr(settings, name) == from_toml


@pytest.mark.parametrize(("name", "toml", "from_toml", "env", "from_env"), PRECEDENCE)
def test_environment_beats_toml(
    tmp_path: Path, name: str, toml: str, from_toml: Any, env: str, from_env: Any
) -> None:
    variable = "MAXY_" + name.upper()
    settings = load_settings(environ={variable: env}, config_file=write_toml(tmp_path, toml))
    assert getattr(settings, name) == from_env


def test_settings_not_named_in_env_or_toml_keep_their_default(tmp_path: Path) -> None:
    settings = load_settings(
        environ={"MAXY_PORT": "1234"}, config_file=write_toml(tmp_path, 'host = "10.0.0.1"')
    )
    assert (settings.port, settings.host, settings.log_level) == (1234, "10.0.0.1", "INFO")


def test_maxy_config_names_the_toml_file(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "port = 9999")
    settings = load_settings(environ={"MAXY_CONFIG": str(path)}, config_file=None)
    assert settings.port == 9999


def test_maxy_config_naming_a_missing_file_fails(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={"MAXY_CONFIG": str(missing)}, config_file=None)
    assert "MAXY_CONFIG" in str(caught.value)
    assert str(missing) in str(caught.value)


def test_home_is_expanded_in_paths(empty_toml: Path) -> None:
    settings = load_settings(environ={"MAXY_DATA_DIR": "~/maxy-data"}, config_file=empty_toml)
    assert settings.data_dir == HOME / "maxy-data"


# --- invalid values -------------------------------------------------------------------------

INVALID: list[tuple[str, str]] = [
    ("MAXY_PORT", "abc"),
    ("MAXY_PORT", "70000"),
    ("MAXY_PORT", "0"),
    ("MAXY_PORT", "-1"),
    ("MAXY_PORT", ""),
    ("MAXY_LOG_LEVEL", "loud"),
    ("MAXY_NEO4J_URI", "http://x"),
    ("MAXY_NEO4J_URI", "127.0.0.1:7687"),
    ("MAXY_EMBED_MAX_CHARS", "0"),
    ("MAXY_EMBED_MAX_CHARS", "many"),
    ("MAXY_EMBED_THREADS", "-1"),
    ("MAXY_NEO4J_HEAP", "lots"),
    ("MAXY_NEO4J_HEAP", "512"),
    ("MAXY_NEO4J_HEAP", ""),
    ("MAXY_NEO4J_PAGECACHE", "m"),
    ("MAXY_NEO4J_PAGECACHE", "1t"),
    ("MAXY_COMPACT_THRESHOLD", "75"),
    ("MAXY_COMPACT_THRESHOLD", "1"),
    ("MAXY_BACKUP_AT", "25:00"),
    ("MAXY_BACKUP_AT", "nightly"),
    ("MAXY_BACKUP_KEEP", "0"),
]


@pytest.mark.parametrize(("raw", "stored"), [("3:05", "03:05"), ("23:59", "23:59"), ("OFF", "off")])
def test_the_backup_time_is_a_time_of_day_or_off(empty_toml: Path, raw: str, stored: str) -> None:
    settings = load_settings(environ={"MAXY_BACKUP_AT": raw}, config_file=empty_toml)
    assert settings.backup_at == stored


@pytest.mark.parametrize(
    "uri", ["neo4j://db:7687", "neo4j+s://abc.databases.neo4j.io", "bolt+ssc://db:7687"]
)
def test_cluster_and_tls_bolt_uris_are_accepted(empty_toml: Path, uri: str) -> None:
    assert load_settings(environ={"MAXY_NEO4J_URI": uri}, config_file=empty_toml).neo4j_uri == uri


@pytest.mark.parametrize(("variable", "raw"), INVALID)
def test_invalid_environment_value_names_the_variable(
    empty_toml: Path, variable: str, raw: str
) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={variable: raw}, config_file=empty_toml)
    message = str(caught.value)
    assert variable in message
    assert repr(raw) in message


@pytest.mark.parametrize(("variable", "raw"), [("MAXY_PORT", "abc"), ("MAXY_LOG_LEVEL", "loud")])
def test_invalid_toml_value_names_the_file_and_the_variable(
    tmp_path: Path, variable: str, raw: str
) -> None:
    key = variable.removeprefix("MAXY_").lower()
    path = write_toml(tmp_path, f'{key} = "{raw}"')
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={}, config_file=path)
    message = str(caught.value)
    assert str(path) in message
    assert variable in message


@pytest.mark.parametrize(
    "text",
    [
        "port = ",  # no value
        "port = 1\nport = 2",  # duplicate key
        "[unclosed",
        "port: 8080",
    ],
)
def test_invalid_toml_fails_naming_the_file(tmp_path: Path, text: str) -> None:
    path = write_toml(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={}, config_file=path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("prot = 8080", "prot"),
        ("MAXY_PORT = 8080", "MAXY_PORT"),
        ("[neo4j]\nuri = 'bolt://x'", "neo4j"),
    ],
)
def test_unknown_toml_key_fails_naming_the_file_and_key(
    tmp_path: Path, text: str, key: str
) -> None:
    path = write_toml(tmp_path, text)
    with pytest.raises(SettingsError) as caught:
        load_settings(environ={}, config_file=path)
    message = str(caught.value)
    assert str(path) in message
    assert key in message


@given(port=st.integers(min_value=1, max_value=65535))
def test_every_valid_port_is_accepted(port: int) -> None:
    assert load_settings(environ={"MAXY_PORT": str(port)}, config_file=NO_CONFIG).port == port


@given(port=st.integers().filter(lambda p: not 0 < p < 65536))
def test_every_out_of_range_port_is_refused(port: int) -> None:
    with pytest.raises(SettingsError, match="MAXY_PORT"):
        load_settings(environ={"MAXY_PORT": str(port)}, config_file=NO_CONFIG)


@given(setting=st.sampled_from(SETTINGS), raw=st.text())
def test_any_text_either_parses_or_raises_settings_error(setting: Any, raw: str) -> None:
    """Whatever a user types, start-up fails with a SettingsError, never a traceback."""
    try:
        load_settings(environ={setting.env: raw}, config_file=NO_CONFIG)
    except SettingsError as err:
        assert setting.env in str(err)


@pytest.mark.parametrize("raw", ["²m", "٣g"])
def test_memory_size_accepts_only_ascii_digits(raw: str) -> None:
    with pytest.raises(SettingsError, match="MAXY_NEO4J_HEAP"):
        load_settings(environ={"MAXY_NEO4J_HEAP": raw}, config_file=NO_CONFIG)


# --- derived paths --------------------------------------------------------------------------


def test_derived_paths_follow_their_directories(empty_toml: Path) -> None:
    settings = load_settings(
        environ={
            "MAXY_DATA_DIR": "/srv/d",
            "MAXY_CACHE_DIR": "/srv/c",
            "MAXY_RUNTIME_DIR": "/srv/r",
        },
        config_file=empty_toml,
    )
    assert settings.neo4j_password_path == Path("/srv/d/keys/neo4j-password")
    assert settings.neo4j_home_path == Path("/srv/d/neo4j")
    assert settings.accounts_dir == Path("/srv/d/accounts")
    assert settings.embed_model_path == Path("/srv/c/models/all-minilm-l6-v2.f16.gguf")
    assert settings.engine_socket == Path("/srv/r/engine.sock")


@pytest.mark.parametrize(
    ("variable", "value", "attribute"),
    [
        ("MAXY_NEO4J_PASSWORD_FILE", "/etc/pw", "neo4j_password_path"),
        ("MAXY_NEO4J_HOME", "/opt/neo4j", "neo4j_home_path"),
        ("MAXY_EMBED_MODEL", "/models/m.gguf", "embed_model_path"),
    ],
)
def test_explicit_path_beats_the_derived_one(
    empty_toml: Path, variable: str, value: str, attribute: str
) -> None:
    env = {"MAXY_DATA_DIR": "/srv/d", "MAXY_CACHE_DIR": "/srv/c", variable: value}
    settings = load_settings(environ=env, config_file=empty_toml)
    assert getattr(settings, attribute) == Path(value)


@pytest.mark.parametrize(
    ("variable", "attribute", "derived"),
    [
        ("MAXY_NEO4J_PASSWORD_FILE", "neo4j_password_path", "/srv/d/keys/neo4j-password"),
        ("MAXY_NEO4J_HOME", "neo4j_home_path", "/srv/d/neo4j"),
        ("MAXY_EMBED_MODEL", "embed_model_path", "/srv/c/models/all-minilm-l6-v2.f16.gguf"),
    ],
)
def test_empty_optional_path_falls_back_to_the_derived_one(
    empty_toml: Path, variable: str, attribute: str, derived: str
) -> None:
    env = {"MAXY_DATA_DIR": "/srv/d", "MAXY_CACHE_DIR": "/srv/c", variable: ""}
    settings = load_settings(environ=env, config_file=empty_toml)
    assert getattr(settings, attribute) == Path(derived)


# --- account id -----------------------------------------------------------------------------


def test_require_account_id_fails_naming_the_variable(empty_toml: Path) -> None:
    settings = load_settings(environ={}, config_file=empty_toml)
    with pytest.raises(SettingsError, match="MAXY_ACCOUNT_ID"):
        settings.require_account_id()


def test_require_account_id_returns_the_id(empty_toml: Path) -> None:
    settings = load_settings(environ={"MAXY_ACCOUNT_ID": "abc"}, config_file=empty_toml)
    assert settings.require_account_id() == "abc"


# --- the settings table in README.md --------------------------------------------------------


def test_settings_table_has_one_row_per_setting() -> None:
    rows = settings_table().splitlines()
    assert len(rows) == 2 + len(SETTINGS)
    columns = rows[0].count("|")
    assert all(row.count("|") == columns for row in rows), "a cell contains a stray '|'"
    for setting, row in zip(SETTINGS, rows[2:], strict=True):
        assert row.startswith(f"| `{setting.env}` |")


def test_settings_table_shows_the_home_relative_cache_dir() -> None:
    assert "| `MAXY_CACHE_DIR` | `~/.cache/maxy` |" in settings_table()


def test_readme_contains_the_settings_table_verbatim() -> None:
    assert README.is_file(), f"{README} is missing"
    text = README.read_text()
    assert "## Settings" in text
    assert settings_table() in text, (
        "README.md's settings table is out of date; paste the output of "
        "`python -c 'from appliance.core.config import settings_table; print(settings_table())'`"
    )


def test_readme_mentions_every_setting() -> None:
    assert README.is_file(), f"{README} is missing"
    text = README.read_text()
    missing = [setting.env for setting in SETTINGS if setting.env not in text]
    assert missing == [], f"README.md does not mention {', '.join(missing)}"


def test_relative_paths_become_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Neo4j server runs with its home as working directory: a relative home would nest.
    monkeypatch.chdir(tmp_path)
    settings = load_settings({"MAXY_DATA_DIR": "rel/data"}, config_file=Path(os.devnull))
    assert settings.data_dir == tmp_path / "rel" / "data"
    assert settings.neo4j_home_path.is_absolute()


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("", ()),
        ("a.example, B.Example ,", ("a.example", "b.example")),
        ("10.0.0.0/8", ("10.0.0.0/8",)),
    ],
)
def test_host_lists_are_comma_separated_and_lower_case(
    empty_toml: Path, raw: str, expected: tuple[str, ...]
) -> None:
    settings = load_settings({"MAXY_PUBLIC_HOSTNAMES": raw}, config_file=empty_toml)
    assert settings.public_hostnames == expected


def test_host_lists_may_be_toml_arrays(tmp_path: Path) -> None:
    config = tmp_path / "maxy.toml"
    config.write_text('admin_hostnames = ["admin.example", "Ops.Example"]\n')
    settings = load_settings({}, config_file=config)
    assert settings.admin_hostnames == ("admin.example", "ops.example")


def test_upload_types_are_a_list_of_the_kinds_maxy_reads() -> None:
    assert load_settings({"MAXY_UPLOAD_TYPES": " PDF, .docx,pdf "}, NO_CONFIG).upload_types == (
        "pdf",
        "docx",
    )
    with pytest.raises(SettingsError, match="MAXY_UPLOAD_TYPES"):
        load_settings({"MAXY_UPLOAD_TYPES": "pdf,exe"}, NO_CONFIG)
