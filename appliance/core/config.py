"""Settings: every knob Maxy has, read once at the edge of the program.

Each setting is declared once in ``SETTINGS`` (name, default, help). Values come from, in order
of precedence: the environment (``MAXY_<NAME>``), an optional TOML file (``MAXY_CONFIG`` or
``/etc/maxy/maxy.toml``; keys are the lower-case names without the prefix), then the default.
``load_settings()`` returns a frozen :class:`Settings` that callers pass down explicitly.

A value that cannot be parsed fails at start with :class:`SettingsError`, naming the setting and
saying how to set it.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from appliance.core.ports import recorded_port

ENV_PREFIX = "MAXY_"
DEFAULT_CONFIG_FILE = Path("/etc/maxy/maxy.toml")


class SettingsError(Exception):
    """A setting is missing or has a value Maxy cannot use."""


@dataclass(frozen=True)
class Setting:
    """One entry of the settings registry."""

    name: str
    default: Any
    help: str
    parse: Callable[[str], Any] = str

    @property
    def env(self) -> str:
        """The environment variable that sets this."""
        return ENV_PREFIX + self.name.upper()


def _port(raw: str) -> int:
    value = int(raw)
    if not 0 < value < 65536:
        raise ValueError("a port is between 1 and 65535")
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError("must be a positive integer")
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be zero or a positive integer")
    return value


def _memory_size(raw: str) -> str:
    text = raw.strip().lower()
    if not re.fullmatch(r"[0-9]+[kmg]", text):
        raise ValueError("a size such as 512m or 1g")
    return text


def _log_level(raw: str) -> str:
    level = raw.strip().upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
        raise ValueError("one of debug, info, warning, error")
    return level


def _bolt_uri(raw: str) -> str:
    schemes = ("bolt", "bolt+s", "bolt+ssc", "neo4j", "neo4j+s", "neo4j+ssc")
    if not raw.startswith(tuple(f"{scheme}://" for scheme in schemes)):
        raise ValueError(
            "a Bolt URI such as bolt://127.0.0.1:7687 (neo4j+s://… for a cluster or Aura)"
        )
    return raw


def _search_mode(raw: str) -> str:
    mode = raw.strip().lower()
    if mode not in {"weighted", "rrf", "convex"}:
        raise ValueError("weighted, rrf or convex")
    return mode


def _weight(raw: str) -> float:
    value = float(raw)
    if not 0.0 <= value <= 1.0:
        raise ValueError("a weight between 0 and 1")
    return value


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 < value < 1.0:
        raise ValueError("a share between 0 and 1, such as 0.75")
    return value


def _seconds(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise ValueError("a positive number of seconds")
    return value


PERMISSION_MODES = ("acceptEdits", "auto", "bypassPermissions", "manual", "dontAsk", "plan")


def _permission_mode(raw: str) -> str:
    mode = raw.strip()
    if mode not in PERMISSION_MODES:
        raise ValueError("one of " + ", ".join(PERMISSION_MODES))
    return mode


def _bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError("true or false")


def _ota_board(raw: str) -> str:
    board = raw.strip().lower()
    if board not in {"", "rpi4", "rpi5", "x86-64"}:
        raise ValueError("rpi4, rpi5 or x86-64 (empty: detect)")
    return board


def _optional_path(raw: str) -> Path | None:
    return _path(raw) if raw else None


def _optional_url(raw: str) -> str | None:
    url = raw.strip().rstrip("/")
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ValueError("an http:// or https:// URL")
    return url


def _optional_unit(raw: str) -> str | None:
    name = raw.strip()
    if not name:
        return None
    if not re.fullmatch(r"[A-Za-z0-9:_.@-]+\.service", name):
        raise ValueError("a systemd service name, like cloudflared.service")
    return name


def _path(raw: str) -> Path:
    try:
        return Path(raw).expanduser().absolute()
    except RuntimeError as err:  # "~name" of a user that does not exist
        raise ValueError(f"{raw.split('/')[0]} names no user with a home directory") from err


UPLOAD_TYPES = ("md", "markdown", "txt", "html", "htm", "pdf", "docx")  # what convert.py reads


def _upload_types(raw: str) -> tuple[str, ...]:
    types = tuple(dict.fromkeys(p.strip().lower().lstrip(".") for p in raw.split(",") if p.strip()))
    unknown = [t for t in types if t not in UPLOAD_TYPES]
    if not types or unknown:
        raise ValueError("a comma-separated list of " + ", ".join(UPLOAD_TYPES))
    return types


def _time_of_day(raw: str) -> str:
    text = raw.strip().lower()
    if text == "off":
        return text
    match = re.fullmatch(r"([01]?[0-9]|2[0-3]):([0-5][0-9])", text)
    if not match:
        raise ValueError("a time of day as HH:MM (24-hour), or off")
    return f"{int(match.group(1)):02d}:{match.group(2)}"


def _names(raw: str) -> tuple[str, ...]:
    """A comma-separated list: host names, addresses or networks (empty: none)."""
    return tuple(part.strip().lower() for part in raw.split(",") if part.strip())


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", Path("/data"), "Persistent data: accounts, keys, the Neo4j store.", _path),
    Setting(
        "runtime_dir",
        Path("/run/maxy"),
        "Unix sockets of the roles (created mode 0700).",
        _path,
    ),
    Setting(
        "cache_dir",
        Path("~/.cache/maxy").expanduser(),
        "Development downloads and builds: Neo4j jars, the GGUF model, wheels.",
        _path,
    ),
    Setting("account_id", "", "The account this device serves; must exist under data_dir."),
    Setting("host", "0.0.0.0", "Address the edge listens on."),
    Setting("port", 19200, "TCP port of the edge (the web UI).", _port),
    Setting(
        "trusted_proxies",
        (),
        "Comma-separated addresses or networks whose X-Forwarded-For the edge believes.",
        _names,
    ),
    Setting(
        "admin_hostnames",
        (),
        "Comma-separated tunnel host names that reach the admin UI (remote password).",
        _names,
    ),
    Setting(
        "public_hostnames",
        (),
        "Comma-separated host names that serve public agents and /sites only.",
        _names,
    ),
    Setting(
        "lan_hostnames",
        (),
        "More names the device answers to on the LAN (besides maxy.local, its own name, "
        "localhost and IP addresses); any other Host gets 421.",
        _names,
    ),
    Setting("log_level", "INFO", "debug, info, warning or error.", _log_level),
    Setting(
        "neo4j_uri",
        "bolt://127.0.0.1:7687",
        "Bolt address of Neo4j. Port 0: the development instance takes a free port on its first "
        "start and keeps it (recorded in neo4j_home/run/bolt.port).",
        _bolt_uri,
    ),
    Setting("neo4j_user", "neo4j", "Neo4j user name."),
    Setting(
        "neo4j_password_file",
        None,
        "File holding the Neo4j password (default: data_dir/keys/neo4j-password).",
        _optional_path,
    ),
    Setting(
        "premium_dir",
        None,
        "Premium plugin bundles (BUNDLE.md + plugins/…) an account's brand may ship "
        "(default: the ones inside the program).",
        _optional_path,
    ),
    Setting("neo4j_version", "2026.08.1", "Neo4j release the development instance runs."),
    Setting(
        "neo4j_home",
        None,
        "Home of the development Neo4j instance (default: data_dir/neo4j).",
        _optional_path,
    ),
    Setting("neo4j_heap", "512m", "Java heap of the development Neo4j.", _memory_size),
    Setting("neo4j_pagecache", "256m", "Page cache of the development Neo4j.", _memory_size),
    Setting(
        "embed_model",
        None,
        "GGUF embedding model (default: cache_dir/models/all-minilm-l6-v2.f16.gguf, or its "
        "bf16 form beside it where llama.cpp's CPU code has AVX512_BF16).",
        _optional_path,
    ),
    Setting(
        "embed_max_chars",
        8000,
        "Longer texts are cut to this many characters before embedding.",
        _positive_int,
    ),
    Setting(
        "embed_threads",
        0,
        "CPU threads for embedding (0: every core, but half of them for a search's query, which "
        "runs beside Neo4j's keyword statement).",
        _non_negative_int,
    ),
    Setting(
        "search_mode",
        "convex",
        "Fusion of vector and keyword scores: weighted, rrf or convex (see memory/fusion.py).",
        _search_mode,
    ),
    Setting(
        "search_vector_weight",
        0.5,
        "Weight of the vector score in weighted and convex fusion.",
        _weight,
    ),
    Setting(
        "search_keyword_weight",
        0.5,
        "Weight of the keyword score in weighted and convex fusion.",
        _weight,
    ),
    Setting("search_rrf_k", 60, "The k of reciprocal rank fusion.", _positive_int),
    Setting("search_boosts", False, "Apply the compiledTruth and backlink boosts.", _bool),
    Setting(
        "search_routing",
        False,
        "Route by the caller's retrievalClass hint (label filter and weights).",
        _bool,
    ),
    Setting(
        "search_expansion",
        False,
        "Also search paraphrases of the query from the configured expander.",
        _bool,
    ),
    Setting(
        "search_dedup",
        False,
        "Drop duplicates by slug, canonicalName and contentHash (highest score wins).",
        _bool,
    ),
    Setting(
        "purge_grace_days",
        7,
        "Days a soft-deleted node is kept before the purge job deletes it.",
        _positive_int,
    ),
    Setting(
        "graph_audit_interval",
        3600.0,
        "Seconds between graph-health audits (nodes without an embedding or an accountId).",
        _seconds,
    ),
    Setting(
        "backup_at",
        "03:00",
        "Time of day (HH:MM, the owner's time zone) of the nightly backup; off: none.",
        _time_of_day,
    ),
    Setting(
        "backup_keep",
        7,
        "Backups kept on the data partition; older ones are deleted after a new one.",
        _positive_int,
    ),
    Setting(
        "backup_keys",
        False,
        "Include the keys (cookie key, password hashes, API keys, Claude login) in backups.",
        _bool,
    ),
    Setting(
        "backup_dir",
        None,
        "Folder of the backups (default: backups/ in the data dir).",
        _optional_path,
    ),
    Setting(
        "upload_max_mb",
        50,
        "Largest file (MB) an upload or memory-ingest-file takes.",
        _positive_int,
    ),
    Setting(
        "upload_types",
        UPLOAD_TYPES,
        "File extensions an upload may have (comma-separated, of these).",
        _upload_types,
    ),
    Setting(
        "search_limit",
        10,
        "Results a search returns unless the caller asks otherwise.",
        _positive_int,
    ),
    Setting("claude_bin", "claude", "The Claude Code CLI the session manager runs (name or path)."),
    Setting("claude_model", "sonnet", "Model of a session unless its spawn names one."),
    Setting(
        "claude_permission_mode",
        "bypassPermissions",
        "Permission mode of an admin session unless its spawn names one.",
        _permission_mode,
    ),
    Setting(
        "specialist_cap",
        3,
        "Specialist sessions at once; a new one evicts the oldest idle.",
        _positive_int,
    ),
    Setting(
        "operator_reserve",
        2,
        "PTY slots kept for the operator: specialists never take them.",
        _non_negative_int,
    ),
    Setting("pty_cap", 8, "Claude Code sessions (PTYs) at once, all kinds.", _positive_int),
    Setting(
        "session_memory_mb",
        1024,
        "Free memory (MB, the kernel's MemAvailable) a new session needs, less what sessions "
        "still starting will take; with less the spawn is refused (0: no check).",
        _non_negative_int,
    ),
    Setting(
        "idle_reap_interval", 30.0, "Seconds between idle-reaper passes over specialists.", _seconds
    ),
    Setting(
        "idle_limit", 120.0, "Seconds a specialist may stay silent before it is stopped.", _seconds
    ),
    Setting(
        "stop_grace", 5.0, "Seconds a stopped session gets after SIGTERM before SIGKILL.", _seconds
    ),
    Setting(
        "context_window",
        200000,
        "Tokens of the admin sessions' model context window (what compaction counts against).",
        _positive_int,
    ),
    Setting(
        "compact_threshold",
        0.75,
        "Share of the context window past which the manager asks an admin session for its "
        "compaction briefing (session-compact).",
        _fraction,
    ),
    Setting(
        "compact_timeout",
        120.0,
        "Seconds an admin session gets to call session-compact once asked.",
        _seconds,
    ),
    Setting(
        "schedule_interval",
        30.0,
        "Seconds between the manager's checks for due reminders and events (sooner when one "
        "is due sooner).",
        _seconds,
    ),
    Setting(
        "manager_keepalive",
        25.0,
        "Seconds between keep-alive comments on the session feed.",
        _seconds,
    ),
    Setting("cloudflared_bin", "cloudflared", "The cloudflared program `maxy tunnel` drives."),
    Setting(
        "chromium_bin",
        "chromium",
        "The headless Chromium the `browser-render` tool runs (a name on PATH, or a path).",
    ),
    Setting(
        "tunnel_unit",
        None,
        "The systemd unit running cloudflared, which `maxy tunnel` asks root to start, stop "
        "and restart (unset: none; the card sets cloudflared.service).",
        _optional_unit,
    ),
    Setting(
        "anthropic_base_url",
        None,
        "Base URL of the Anthropic API (default: the SDK's own).",
        _optional_url,
    ),
    Setting(
        "anthropic_api_key_file",
        None,
        "File holding the Anthropic API key (default: data_dir/keys/anthropic-api-key).",
        _optional_path,
    ),
    Setting("gateway_model", "claude-haiku-4-5", "Model of the inbound gateway (screening)."),
    Setting("agent_model", "claude-sonnet-4-6", "Model of the public agents that answer visitors."),
    Setting(
        "gateway_timeout",
        3.0,
        "Seconds the gateway may take before a message passes through unscreened.",
        _seconds,
    ),
    Setting(
        "lead_idle",
        1800.0,
        "Seconds without a message after which a visitor's conversation has ended and is "
        "reviewed for a lead.",
        _seconds,
    ),
    Setting(
        "telegram_api_url",
        None,
        "Base URL of the Telegram Bot API (default: Telegram's own; tests point it at a local "
        "one).",
        _optional_url,
    ),
    Setting(
        "telegram_poll_timeout",
        25.0,
        "Seconds one long poll for Telegram updates may wait for a message.",
        _seconds,
    ),
    Setting(
        "telegram_turn_timeout",
        300.0,
        "Seconds an admin turn asked on Telegram may take before it counts as unanswered.",
        _seconds,
    ),
    Setting(
        "channel_input_ack",
        10.0,
        "Seconds after an owner's message is typed into their session by which a turn must have "
        "started; later, op=input-no-turn is logged.",
        _seconds,
    ),
    Setting(
        "channel_stale_after",
        900.0,
        "A channel message this many seconds old when it is taken up again after a restart is "
        "kept but not answered (no stale reply).",
        _seconds,
    ),
    Setting(
        "preset_file",
        Path("/etc/maxy/preset/account.json"),
        "Account preset `maxy firstboot` creates the account from when there is none.",
        _path,
    ),
    Setting(
        "service_user",
        "maxy",
        "User the roles run as; `maxy firstboot` (as root) gives it data_dir's new files.",
    ),
    Setting(
        "data_disk",
        None,
        "Disk whose data partition `maxy firstboot` grows (default: found from data_dir's mount).",
        _optional_path,
    ),
    Setting(
        "data_partition",
        0,
        "Its number on data_disk (0: 6, the data partition of Maxy's card layout).",
        _non_negative_int,
    ),
    Setting("ota_device", Path("/dev/mmcblk0"), "The card `maxy ota` updates (whole disk).", _path),
    Setting(
        "ota_trust_dir",
        Path("/etc/maxy/ota/trust"),
        "Public keys (*.pub) whose update signatures the device accepts.",
        _path,
    ),
    Setting(
        "ota_firmware_dir",
        Path("/proc/device-tree/chosen/bootloader"),
        "Where the boot firmware publishes tryboot, partition and build-timestamp.",
        _path,
    ),
    Setting(
        "ota_reboot_param",
        Path("/run/systemd/reboot-param"),
        "systemd's reboot parameter file; `0 tryboot` in it arms the trial boot.",
        _path,
    ),
    Setting("ota_reboot_command", "systemctl reboot", "Command that reboots after apply."),
    Setting("ota_board", "", "rpi4, rpi5 or x86-64 (default: detected).", _ota_board),
    Setting("ota_backup", True, "Dump the Neo4j database before writing a slot (on/off).", _bool),
    Setting(
        "ota_neo4j_unit",
        "maxy-neo4j.service",
        "systemd unit stopped and restarted around the pre-update Neo4j dump.",
    ),
    Setting(
        "ota_commit_window",
        300.0,
        "Seconds a trial boot has to prove healthy before it is rolled back.",
        _seconds,
    ),
    Setting(
        "ota_verify_timeout", 900.0, "Seconds to verify a bundle (signature, hashes).", _seconds
    ),
    Setting("ota_backup_timeout", 900.0, "Seconds for the pre-update Neo4j dump.", _seconds),
    Setting("ota_write_timeout", 1800.0, "Seconds to write both slot images.", _seconds),
    Setting("ota_readback_timeout", 900.0, "Seconds to read back and hash the slot.", _seconds),
    Setting("ota_reboot_timeout", 120.0, "Seconds the reboot command may take.", _seconds),
)

_BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class Settings:
    """Typed settings; build with :func:`load_settings`."""

    data_dir: Path
    runtime_dir: Path
    cache_dir: Path
    account_id: str
    host: str
    port: int
    trusted_proxies: tuple[str, ...]
    admin_hostnames: tuple[str, ...]
    public_hostnames: tuple[str, ...]
    lan_hostnames: tuple[str, ...]
    log_level: str
    neo4j_uri: str
    neo4j_user: str
    neo4j_password_file: Path | None
    neo4j_version: str
    premium_dir: Path | None
    neo4j_home: Path | None
    neo4j_heap: str
    neo4j_pagecache: str
    embed_model: Path | None
    embed_max_chars: int
    embed_threads: int
    search_mode: str
    search_vector_weight: float
    search_keyword_weight: float
    search_rrf_k: int
    search_boosts: bool
    search_routing: bool
    search_expansion: bool
    search_dedup: bool
    purge_grace_days: int
    graph_audit_interval: float
    backup_at: str
    backup_keep: int
    backup_keys: bool
    backup_dir: Path | None
    upload_max_mb: int
    upload_types: tuple[str, ...]
    search_limit: int
    claude_bin: str
    claude_model: str
    claude_permission_mode: str
    specialist_cap: int
    operator_reserve: int
    pty_cap: int
    session_memory_mb: int
    idle_reap_interval: float
    idle_limit: float
    stop_grace: float
    context_window: int
    compact_threshold: float
    compact_timeout: float
    schedule_interval: float
    manager_keepalive: float
    cloudflared_bin: str
    chromium_bin: str
    tunnel_unit: str | None
    anthropic_base_url: str | None
    anthropic_api_key_file: Path | None
    gateway_model: str
    agent_model: str
    gateway_timeout: float
    lead_idle: float
    telegram_api_url: str | None
    telegram_poll_timeout: float
    telegram_turn_timeout: float
    channel_input_ack: float
    channel_stale_after: float
    preset_file: Path
    service_user: str
    data_disk: Path | None
    data_partition: int
    ota_device: Path
    ota_trust_dir: Path
    ota_firmware_dir: Path
    ota_reboot_param: Path
    ota_reboot_command: str
    ota_board: str
    ota_backup: bool
    ota_neo4j_unit: str
    ota_commit_window: float
    ota_verify_timeout: float
    ota_backup_timeout: float
    ota_write_timeout: float
    ota_readback_timeout: float
    ota_reboot_timeout: float

    @property
    def accounts_dir(self) -> Path:
        """Directory holding one folder per account."""
        return self.data_dir / "accounts"

    @property
    def backups_path(self) -> Path:
        """Directory of the backup archives (``maxy-backup-*.tar``)."""
        return self.backup_dir or self.data_dir / "backups"

    @property
    def keys_dir(self) -> Path:
        """Directory holding secrets (mode 0700)."""
        return self.data_dir / "keys"

    @property
    def neo4j_password_path(self) -> Path:
        """Where the Neo4j password is kept."""
        return self.neo4j_password_file or self.keys_dir / "neo4j-password"

    @property
    def neo4j_home_path(self) -> Path:
        """Home of the development Neo4j instance."""
        return self.neo4j_home or self.data_dir / "neo4j"

    @property
    def bolt_port_file(self) -> Path:
        """Where the development instance records the port it got for ``bolt://…:0``."""
        return self.neo4j_home_path / "run" / "bolt.port"

    def neo4j_address(self) -> str:
        """The Bolt URI to connect to: ``neo4j_uri``, its port 0 replaced by the recorded one."""
        parts = urlsplit(self.neo4j_uri)
        if parts.port != 0:
            return self.neo4j_uri
        port = recorded_port(self.bolt_port_file)
        if not port:
            return self.neo4j_uri  # never started: connecting fails and says where
        return parts._replace(netloc=f"{parts.hostname}:{port}").geturl()

    @property
    def embed_model_path(self) -> Path:
        """The GGUF file the engine loads."""
        return self.embed_model or self.cache_dir / "models" / "all-minilm-l6-v2.f16.gguf"

    @property
    def engine_socket(self) -> Path:
        """Unix socket of the engine's RPC server."""
        return self.runtime_dir / "engine.sock"

    @property
    def app_socket(self) -> Path:
        """Unix socket of the web app (the edge proxies to it)."""
        return self.runtime_dir / "app.sock"

    @property
    def manager_socket(self) -> Path:
        """Unix socket of the PTY session manager."""
        return self.runtime_dir / "manager.sock"

    @property
    def edge_health_url(self) -> str:
        """The edge's ``/healthz`` as a process on this device reaches it."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}/healthz"

    @property
    def log_dir(self) -> Path:
        """Where ``maxy run`` keeps each role's output in development (``<role>.log``)."""
        return self.data_dir / "logs"

    @property
    def cookie_key_path(self) -> Path:
        """HMAC key of login cookies, shared by the edge and the app."""
        return self.keys_dir / "cookie-hmac.key"

    @property
    def anthropic_api_key_path(self) -> Path:
        """Where the Anthropic API key is kept (never logged)."""
        return self.anthropic_api_key_file or self.keys_dir / "anthropic-api-key"

    @property
    def claude_token_path(self) -> Path:
        """The owner's long-lived Claude token from Connect Claude (never logged)."""
        return self.keys_dir / "claude-oauth-token"

    @property
    def telegram_token_path(self) -> Path:
        """The Telegram bot's token from BotFather (never logged)."""
        return self.keys_dir / "telegram-bot-token"

    @property
    def channels_dir(self) -> Path:
        """The device account's channel settings and status (``telegram.json``, …)."""
        return self.accounts_dir / self.account_id / "channels"

    @property
    def cloudflared_dir(self) -> Path:
        """Maxy's cloudflared files: config.yml, roles.json, alias-domains.json, credentials."""
        return self.data_dir / "cloudflared"

    @property
    def cloudflared_config(self) -> Path:
        """The cloudflared config.yml Maxy owns (the tunnel's ingress rules)."""
        return self.cloudflared_dir / "config.yml"

    @property
    def tunnel_roles_path(self) -> Path:
        """Role (admin or public) of each tunnel host name."""
        return self.cloudflared_dir / "roles.json"

    @property
    def alias_domains_path(self) -> Path:
        """Extra public host names the resolver may offer after the tunnel's own."""
        return self.cloudflared_dir / "alias-domains.json"

    def require_account_id(self) -> str:
        """Return the account id or fail naming the setting."""
        if not self.account_id:
            raise SettingsError(
                "MAXY_ACCOUNT_ID is not set. Create an account with `maxy account create` "
                "and set MAXY_ACCOUNT_ID to its id."
            )
        return self.account_id

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with some values changed (already typed)."""
        return dataclasses.replace(self, **changes)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise SettingsError(f"{path} is not valid TOML ({err}). Fix or remove the file.") from err
    unknown = sorted(set(data) - set(_BY_NAME))
    if unknown:
        raise SettingsError(
            f"{path} has unknown settings: {', '.join(unknown)}. "
            "`maxy doctor --settings` lists the valid names."
        )
    return data


def load_settings(
    environ: Mapping[str, str] | None = None, config_file: Path | None = None
) -> Settings:
    """Read the environment and the optional TOML file into a :class:`Settings`."""
    env = os.environ if environ is None else environ
    if config_file is None:
        named = env.get(ENV_PREFIX + "CONFIG")
        if named:
            config_file = Path(named)
            if not config_file.is_file():
                raise SettingsError(
                    f"MAXY_CONFIG names {config_file}, which does not exist. "
                    "Point it at a TOML file or unset it."
                )
        elif DEFAULT_CONFIG_FILE.is_file():
            config_file = DEFAULT_CONFIG_FILE
    file_values = _read_toml(config_file) if config_file else {}

    values: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.env in env:
            raw, origin = env[setting.env], setting.env
        elif setting.name in file_values:
            value = file_values[setting.name]
            raw = ",".join(map(str, value)) if isinstance(value, list) else str(value)
            origin = f"{setting.name} in {config_file}"
        else:
            values[setting.name] = setting.default
            continue
        try:
            values[setting.name] = setting.parse(raw)
        except ValueError as err:
            raise SettingsError(
                f"{origin}={raw!r} is not valid: {err}. Set {setting.env} to a valid value "
                f"({setting.help})"
            ) from err
    return Settings(**values)


def settings_table() -> str:
    """Render the registry as the Markdown table kept in README.md."""
    rows = ["| setting | default | what it does |", "|---|---|---|"]
    for setting in SETTINGS:
        if setting.default in (None, "", ()):
            default = "(none)"
        elif setting.name == "cache_dir":
            default = "`~/.cache/maxy`"  # not the expanded home of whoever renders the table
        elif isinstance(setting.default, tuple):
            default = f"`{','.join(setting.default)}`"  # as it is written in the environment
        else:
            default = f"`{setting.default}`"
        rows.append(f"| `{setting.env}` | {default} | {setting.help} |")
    return "\n".join(rows)
