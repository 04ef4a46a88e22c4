"""What a session is started with: the request, argv, environment and a pre-seeded config dir.

Two kinds of spawn:

- ``rc-spawn`` (admin): the owner's agent. Every enabled plugin is registered before the first
  turn (:mod:`appliance.plugins.claude`): its MCP server in ``--mcp-config`` (through ``maxy
  mcp-helper``, with the account's environment), its roles and skills in a generated
  ``--plugin-dir``, its instructions in the system prompt; ``--add-dir`` names the bundled agent
  directories, permission mode and model come from the request or the settings, and
  ``--resume`` continues an earlier session; ``sessionId`` chooses a new session's id (a
  channel's per-sender thread is one id, the same after every restart). With a ``role`` (a role
  of an enabled plugin), the session runs as that role, ``--agent <plugin>:<role>``: its prompt
  and its ``tools:`` line; a specialist (``specialist: true``) is one the manager's caps count
  as such.
- ``public-spawn``: a visitor's chat: ``--strict-mcp-config`` with only the plugins that allow a
  public tool (their servers list only those tools), no built-in tools (``--tools ""``), an
  allow-list of exactly the public tools and a deny list covering the native tools and every
  other MCP tool. With no public plugin it is toolless; the shipped ones give it the time
  (``scheduling``: ``current-datetime``, ``time-resolve``).

An admin spawn also starts with what the memory graph holds for it: the engine's
``context.previous`` block (``<previous-context>`` — the active projects with their health, and
the ready set of tasks by project; see :mod:`appliance.memory.context`) goes in
``--append-system-prompt``, ahead of any system prompt of the request. A public spawn never gets
it. When the engine cannot answer, the session starts without it and
``[sessions] warn reason=context-unavailable`` is logged once.

Both kinds authenticate with the owner's Claude subscription once it is connected (Connect
Claude, :mod:`appliance.sessions.login`): the stored token is read at each spawn and given as
``CLAUDE_CODE_OAUTH_TOKEN`` (in place of any ``ANTHROPIC_API_KEY`` the manager inherited).

The initial message is the trailing argument (after ``--``), never typed into the PTY. The
account's ``CLAUDE_CONFIG_DIR`` is seeded so the CLI never stops on a prompt nobody would answer:
onboarding done, the API key approved, the bypass-mode warning and auto-mode offer seen, folder
trust for each working directory; ``settings.json`` holds ``permissions.allow: []`` and the
bypass default mode.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from appliance.core.accounts import Account
from appliance.core.config import PERMISSION_MODES, Settings
from appliance.core.fsio import read_secret, write_atomic
from appliance.core.identity import Caller
from appliance.core.resources import external_environ
from appliance.plugins.claude import Registration, register
from appliance.plugins.errors import PluginError, PluginNotFound
from appliance.plugins.resolver import Installed, read_account_file, resolve
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError
from appliance.sessions.errors import BadRequest, ClaudeNotFound, PluginsBroken

log = logging.getLogger(__name__)

Kind = Literal["admin", "public"]

# Native tools a public agent must never have, and every MCP tool.
DENIED_TOOLS = (
    "Agent",
    "Task",
    "Bash",
    "BashOutput",
    "KillShell",
    "Edit",
    "MultiEdit",
    "Write",
    "Read",
    "Glob",
    "Grep",
    "LS",
    "NotebookEdit",
    "NotebookRead",
    "WebFetch",
    "WebSearch",
    "TodoWrite",
    "Skill",
    "SlashCommand",
    "ExitPlanMode",
    "mcp__*",
)
PUBLIC_PERMISSION_MODE = "dontAsk"
CONTEXT_TIMEOUT = 3.0  # seconds the engine gets to build <previous-context>; a spawn waits no more
SEED_PERMISSION_MODE = "bypassPermissions"
# Variables a parent Claude Code sets that would make the child think it is nested.
_PARENT_VARIABLES = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT")
_AGENT_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _text(data: Mapping[str, Any], key: str, limit: int = 2000) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise BadRequest(f"{key} must be a string of at most {limit} characters.")
    return value


def _flag(data: Mapping[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false.")
    return value


@dataclass(frozen=True)
class SpawnRequest:
    """One spawn, as the app asks for it."""

    kind: Kind
    message: str | None = None
    model: str | None = None
    permission_mode: str | None = None
    resume: str | None = None
    session_id: str | None = None
    agent: str | None = None
    system_prompt: str | None = None
    specialist: bool = False
    close_after_turn: bool = False
    hidden: bool = False
    sender_id: str | None = None
    role: str | None = None
    channel: str | None = None
    url: str | None = None

    @classmethod
    def from_json(cls, kind: Kind, data: Any) -> SpawnRequest:
        """Validate a request body; raise :class:`BadRequest` naming the field."""
        if not isinstance(data, dict):
            raise BadRequest("The body must be a JSON object.")
        mode = _text(data, "permissionMode", 40)
        if mode is not None and mode not in PERMISSION_MODES:
            raise BadRequest(f"permissionMode must be one of {', '.join(PERMISSION_MODES)}.")
        if kind == "public" and (mode is not None or data.get("resume")):
            raise BadRequest("A public session takes neither permissionMode nor resume.")
        resume = _text(data, "resume", 36)
        if resume is not None and not _UUID.match(resume):
            raise BadRequest("resume must be a session id (a UUID).")
        session_id = _text(data, "sessionId", 36)
        if session_id is not None and (
            kind == "public" or resume is not None or not _UUID.match(session_id)
        ):
            raise BadRequest(
                "sessionId names a new admin session (a lower-case UUID), without resume."
            )
        agent = _text(data, "agent", 64)
        if agent is not None and not _AGENT_SLUG.match(agent):
            raise BadRequest("agent must be an agent slug (lower-case letters, digits, -).")
        return cls(
            kind=kind,
            message=_text(data, "message", 100_000),
            model=_text(data, "model", 100),
            permission_mode=mode,
            resume=resume,
            session_id=session_id,
            agent=agent,
            system_prompt=_text(data, "systemPrompt", 100_000),
            specialist=_flag(data, "specialist"),
            close_after_turn=_flag(data, "closeAfterTurn"),
            hidden=_flag(data, "hidden"),
            sender_id=_text(data, "senderId", 200),
            role=_text(data, "role", 100),
            channel=_text(data, "channel", 100),
            url=_text(data, "url", 2000),
        )


@dataclass(frozen=True)
class Plan:
    """Everything needed to start one process."""

    session_id: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    sidecar: dict[str, Any]


def child_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment every session starts from: the manager's, minus a parent CLI's marks."""
    env = {k: v for k, v in external_environ(environ).items() if k not in _PARENT_VARIABLES}
    env["DISABLE_AUTOUPDATER"] = "1"
    env.setdefault("TERM", "xterm-256color")
    env.setdefault("COLORTERM", "truecolor")
    return env


def find_claude(claude_bin: str, env: Mapping[str, str]) -> str:
    """The absolute path of the CLI, or :class:`ClaudeNotFound` saying how to fix it."""
    found = shutil.which(claude_bin, path=env.get("PATH", os.defpath))
    if found is None:
        raise ClaudeNotFound(
            f"The Claude Code CLI {claude_bin!r} was not found on PATH. Install it "
            "(npm i -g @anthropic-ai/claude-code) or set MAXY_CLAUDE_BIN to its path."
        )
    return os.path.abspath(found)


def _write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2) + "\n")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def seed_config(config_dir: Path, api_key: str | None, cwds: list[Path]) -> None:
    """Pre-seed ``.claude.json`` and ``settings.json`` so no first-run prompt appears."""
    config_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    state_path = config_dir / ".claude.json"
    state = _read_json(state_path)
    before = json.dumps(state, sort_keys=True)
    state["hasCompletedOnboarding"] = True
    state["bypassPermissionsModeAccepted"] = True
    state["hasSeenAutoDefaultNudge"] = True
    if api_key:
        responses = state.setdefault("customApiKeyResponses", {"approved": [], "rejected": []})
        approved = responses.setdefault("approved", [])
        responses.setdefault("rejected", [])
        tail = api_key.strip()[-20:]  # the CLI remembers a key by its last 20 characters
        if tail not in approved:
            approved.append(tail)
    projects = state.setdefault("projects", {})
    for cwd in cwds:
        projects.setdefault(str(cwd), {})["hasTrustDialogAccepted"] = True
    if json.dumps(state, sort_keys=True) != before:
        _write_json(state_path, state)
    settings_path = config_dir / "settings.json"
    settings = _read_json(settings_path)
    if not settings_path.exists() or "permissions" not in settings:
        permissions = settings.setdefault("permissions", {})
        permissions.setdefault("allow", [])
        permissions.setdefault("defaultMode", SEED_PERMISSION_MODE)
        settings.setdefault("skipDangerousModePermissionPrompt", True)
        _write_json(settings_path, settings)


class Spawner:
    """Builds the plan of each spawn for one account."""

    def __init__(self, settings: Settings, environ: Mapping[str, str], mcp_command: list[str]):
        self.settings = settings
        self.account_id = settings.require_account_id()
        self.account_dir = settings.accounts_dir / self.account_id
        self.config_dir = self.account_dir / "claude"
        self.public_dir = self.account_dir / "public"
        self.base_env = child_environment(environ)
        self.api_key = environ.get("ANTHROPIC_API_KEY") or None
        self.token_path = settings.claude_token_path
        self.mcp_command = mcp_command

    def agent_dirs(self) -> list[Path]:
        """The bundled agent directories an admin session may read."""
        agents = self.account_dir / "agents"
        try:
            return sorted(p for p in agents.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def working_dirs(self) -> list[Path]:
        """Every directory a session may start in (each gets folder trust)."""
        return [self.account_dir.resolve(), self.public_dir.resolve()] + [
            p.resolve() for p in self.agent_dirs()
        ]

    def prepare(self) -> None:
        """Check the plugins, create the config dir and seed it (once at start; cheap again)."""
        installed = self.plugins()  # a refusal stops the manager here, with its one line
        log.info(
            "[plugins] op=resolved enabled=%s missing=%s",
            ",".join(p.name for p in installed.enabled) or "-",
            ",".join(installed.missing()) or "-",
        )
        self.public_dir.mkdir(parents=True, exist_ok=True)
        seed_config(self.config_dir, self.api_key, self.working_dirs())

    def cwd_for(self, request: SpawnRequest) -> Path:
        """The working directory of a session."""
        if request.kind == "admin":
            return self.account_dir.resolve()
        if request.agent:
            agent_dir = self.account_dir / "agents" / request.agent
            if agent_dir.is_dir():
                return agent_dir.resolve()
        return self.public_dir.resolve()

    def server_env(self, session_id: str) -> dict[str, str]:
        """The environment of a session's plugin MCP servers: the account and the paths."""
        settings = self.settings
        return {
            "ACCOUNT_ID": self.account_id,
            "SESSION_ID": session_id,
            "MAXY_ACCOUNT_ID": self.account_id,
            "MAXY_DATA_DIR": str(settings.data_dir),
            "MAXY_RUNTIME_DIR": str(settings.runtime_dir),
            "MAXY_LOG_LEVEL": settings.log_level,
        }

    def plugins(self) -> Installed:
        """The account's plugins, read again at each spawn (a refusal stops the spawn)."""
        return resolve(self.settings, self.account_id)

    def checked_plugins(self) -> Installed:
        """:meth:`plugins` for a spawn: a refusal is the spawn's answer, a 503 naming it."""
        try:
            return self.plugins()
        except PluginError as err:
            log.error("[plugins] %s", err)
            raise PluginsBroken(f"{err}. Fix or remove that plugin, then try again.") from err

    def registration(
        self, kind: Kind, session_id: str, installed: Installed | None = None
    ) -> Registration:
        """What this spawn gets from the enabled plugins (servers, roles, skills, prompt)."""
        product = Account.from_json(read_account_file(self.settings, self.account_id))
        return register(
            installed or self.checked_plugins(),
            kind,
            product.product_name(),
            session_id,
            self.mcp_command,
            self.server_env(session_id),
            self.config_dir,
        )

    def agent_for(self, request: SpawnRequest, installed: Installed) -> str | None:
        """The ``--agent`` of an admin spawn for a role: ``<plugin>:<role>`` (None without one).

        The generated ``--plugin-dir`` names each role after its plugin; a role no enabled
        plugin defines is the request's mistake (400), found before a slot is taken.
        """
        if request.kind != "admin" or request.role is None:
            return None
        try:
            plugin = installed.role(request.role)
        except PluginNotFound as err:
            roles = ", ".join(sorted(r for p in installed.enabled for r in p.agents))
            raise BadRequest(
                f"{err} The roles here: {roles or 'none'}.", role=request.role
            ) from err
        return f"{plugin.name}:{request.role}"

    async def previous_context(self, request: SpawnRequest) -> str | None:
        """The ``<previous-context>`` block for an admin spawn; None for public or on failure."""
        if request.kind != "admin":
            return None
        engine = RpcClient(self.settings.engine_socket, timeout=CONTEXT_TIMEOUT)
        caller = Caller(account_id=self.account_id).to_wire()
        try:
            answer = await engine.call("context.previous", {"caller": caller})
        except RpcError as err:
            log.warning(
                "[sessions] warn reason=context-unavailable error=%s",
                getattr(err, "code", None) or type(err).__name__,
            )
            return None
        text = answer.get("text") if isinstance(answer, dict) else None
        return text if isinstance(text, str) and text.strip() else None

    def plan(self, request: SpawnRequest, context: str | None = None) -> Plan:
        """Argv, environment, working directory and sidecar of one spawn.

        ``context`` (the ``<previous-context>`` block) is appended to an admin session's system
        prompt and ignored for a public one.
        """
        claude = find_claude(self.settings.claude_bin, self.base_env)
        session_id = request.resume or request.session_id or str(uuid.uuid4())
        cwd = self.cwd_for(request)
        model = request.model or self.settings.claude_model
        argv = [claude]
        argv += ["--resume", session_id] if request.resume else ["--session-id", session_id]
        env = dict(self.base_env)
        env.update(CLAUDE_CONFIG_DIR=str(self.config_dir), SESSION_ID=session_id)
        token = read_secret(self.token_path)
        if token is not None:
            env.pop("ANTHROPIC_API_KEY", None)
            env["CLAUDE_CODE_OAUTH_TOKEN"] = token
        installed = self.checked_plugins()
        agent = self.agent_for(request, installed)
        plugins = self.registration(request.kind, session_id, installed)
        argv += ["--mcp-config", json.dumps({"mcpServers": plugins.servers})]
        if request.kind == "admin":
            mode = request.permission_mode or self.settings.claude_permission_mode
            if plugins.plugin_dir is not None:
                argv += ["--plugin-dir", str(plugins.plugin_dir)]
            if agent is not None:
                argv += ["--agent", agent]
            for folder in self.agent_dirs():
                argv += ["--add-dir", str(folder.resolve())]
            env.update(ACCOUNT_ID=self.account_id)
        else:
            mode = PUBLIC_PERMISSION_MODE
            argv += ["--strict-mcp-config", "--tools", ""]
            argv += ["--allowedTools", ",".join(plugins.allowed)]
            # Every MCP tool is denied unless a public plugin allows some: then only its other
            # tools are (and dontAsk refuses whatever no rule allows).
            native = [t for t in DENIED_TOOLS if t != "mcp__*" or not plugins.allowed]
            argv += ["--disallowedTools", ",".join([*native, *plugins.denied])]
            env.update(ACCOUNT_ID=self.account_id, ALLOWED_SCOPES="public")
            if request.agent:
                env["AGENT_SLUG"] = request.agent
        argv += ["--permission-mode", mode]
        if model:
            argv += ["--model", model]
        appended = [request.system_prompt] if request.system_prompt else []
        if plugins.instructions:
            appended.insert(0, plugins.instructions)
        if context and request.kind == "admin":
            appended.insert(0, context)
        if appended:
            argv += ["--append-system-prompt", "\n\n".join(appended)]
        if request.message:
            argv += ["--", request.message]
        sidecar = {
            "sessionId": session_id,
            "kind": request.kind,
            "senderId": request.sender_id,
            "role": request.role,
            "channel": request.channel,
            "url": request.url,
            "startedAt": int(time.time() * 1000),
            "permissionMode": mode,
            "model": model,
            "hidden": request.hidden,
            "specialist": request.specialist,
            "closeAfterTurn": request.close_after_turn,
            "agent": request.agent,
            "cwd": str(cwd),
            "plugins": list(plugins.plugins),
        }
        return Plan(session_id, argv, env, cwd, sidecar)


def write_sidecar(path: Path, sidecar: dict[str, Any]) -> None:
    """Write (or replace) a session's sidecar atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_json(path, sidecar)
