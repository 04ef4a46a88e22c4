"""An executable stand-in for the `claude` CLI, for the session manager's tests.

It behaves like the real CLI where the manager looks (``--version`` too; ``--agent`` is taken
and recorded like the rest of argv): it writes ``sessions/<pid>.json`` under
``$CLAUDE_CONFIG_DIR`` at start (status idle/busy, ``procStart`` from ``/proc/self/stat``),
writes the transcript ``projects/<slug>/<sessionId>.jsonl`` on its first turn, adds title lines,
ends turns with a ``stop_reason``, removes its PID file when it exits cleanly, and takes prompts
typed into its terminal (one line a turn; ``/exit`` quits; ``!flood N`` prints N bytes and
``!size`` prints the terminal size, for the terminal bridge's tests).

MCP, like the real CLI: ``--mcp-config`` (JSON text or a file, repeatable) names stdio servers;
the double starts one (with the CLI's environment plus the server's ``env``) the first time a
prompt needs a tool it lists, speaks MCP's JSON-RPC over its stdin/stdout (``initialize``,
``notifications/initialized``, ``tools/list``, ``tools/call``) and stops it at exit. A prompt asks
for a tool in plain words: "search memory for X" calls ``memory-search {query: X}``,
"remember X" calls ``memory-write {label: Note, properties: {name: X}}``, "resolve the time X"
calls ``time-resolve {text: X}`` (the scheduling plugin's), "call the session-compact tool" calls
``session-compact`` (the admin plugin's) with a briefing made of the session's earlier prompts:
``asked`` lists them, ``aboutOwner`` keeps their sentences that start "I " or "My ". Each call
is written to the transcript as the real CLI writes it: an assistant ``tool_use`` block named
``mcp__<server>__<tool>`` (stop_reason ``tool_use``), then a user entry with the matching
``tool_result`` (and ``toolUseResult``), then the final assistant reply. The server's stderr goes
to ``$CLAUDE_CONFIG_DIR/debug/mcp-<server>-<sessionId>.log``.

``claude setup-token`` (Connect Claude) is acted out as the real CLI shows it, up to what the real
one cannot do offline: a welcome, "Browser didn't open? Use the URL below to sign in" with the
sign-in URL as an OSC 8 link, a "Paste code here if prompted" prompt; a pasted code is then
accepted (the token, :func:`token_for` the code, printed once and wrapped at the terminal's
width, then exit 0) unless it is ``bad``: then "OAuth error: …" and "Press Enter to retry", as the
real CLI answers a refused code.

With ``CLAUDE_DOUBLE_DELEGATE=<path of the real CLI>`` everything but ``setup-token`` is handed to
the real CLI (exec), so a test can connect Claude through the double and run real sessions.

Behaviour is set by environment variables ``CLAUDE_DOUBLE_<KEY>`` and, per spawn, by a directive
in the initial prompt, ``[double key=value …]``, which wins. Keys:

    start_delay=S      seconds before the PID file is written
    turn=S             seconds a turn takes (default 0.05)
    hold=1             a turn never ends: status stays busy
    stop_reason=R      how a turn ends (end_turn, tool_use, max_tokens, …)
    title=T            an ai-title line after the first turn
    custom_title=T     a custom-title line after the first turn
    crash=start|turn   exit 3 before the PID file, or in the middle of the first turn
    slow_flush=S       write each transcript line in two parts, S seconds apart
    ignore_term=1      ignore SIGTERM
    ignore_hup=1       outlive the terminal: ignore SIGHUP and a closed PTY
    exit_after_turn=1  exit 0 after the first turn
    output=N           print N bytes to the terminal at start
    bridge=ID          a bridgeSessionId in the PID file
    record=DIR         write argv, environment and cwd to DIR/<sessionId>.json
    usage=N            every assistant message carries usage adding up to N tokens of context
    compact=ignore|bad asked for session-compact, never call it (ignore), or call it with no
                       briefing (bad: the tool answers an error)
    require_auth=1     without ANTHROPIC_API_KEY or CLAUDE_CODE_OAUTH_TOKEN, answer each turn
                       as the real CLI does: "Not logged in · Please run /login" (an API error)
    refuse_root=1      act as the real CLI run as root: refuse --permission-mode
                       bypassPermissions with its words and exit 1 before the PID file
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

VERSION = "2.1.328-double"
# Options that take one value, and those that take values up to the next option.
SINGLE = {
    "--session-id",
    "--resume",
    "--permission-mode",
    "--model",
    "--append-system-prompt",
    "--plugin-dir",
    "--agent",
}
VARIADIC = {"--mcp-config", "--add-dir", "--allowedTools", "--disallowedTools", "--tools"}
DIRECTIVE = re.compile(r"\[double ([^\]]*)\]")
MCP_PROTOCOL = "2025-06-18"
MCP_TIMEOUT = 60.0  # seconds for one MCP answer (a first `maxy mcp` imports a lot)
TRIGGERS = (
    (re.compile(r"\bsearch memory for (.+?)(?:[.?!]|$)", re.IGNORECASE), "memory-search"),
    (re.compile(r"\bremember (?:that )?(.+?)(?:[.!]|$)", re.IGNORECASE), "memory-write"),
    (re.compile(r"\bresolve the time (.+?)(?:[.?!]|$)", re.IGNORECASE), "time-resolve"),
    (re.compile(r"\bcall the (session-compact) tool\b", re.IGNORECASE), "session-compact"),
)


ROOT_REFUSAL = (
    "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"
)
NOT_LOGGED_IN = "Not logged in · Please run /login"
SIGN_IN_URL = "https://claude.com/cai/oauth/authorize?code=true&client_id=double&state="


def token_for(code: str) -> str:
    """The long-lived token the double's setup-token gives for a pasted code."""
    return "sk-ant-oat01-" + hashlib.sha256(code.encode()).hexdigest() + "-doubleAA"


def tool_requests(prompt: str) -> list[tuple[str, dict[str, Any]]]:
    """The MCP tool calls a prompt asks for, in the order it asks."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    for pattern, tool in TRIGGERS:
        for match in pattern.finditer(DIRECTIVE.sub("", prompt)):
            text = match.group(1).strip()
            if tool == "memory-search":
                arguments: dict[str, Any] = {"query": text}
            elif tool == "time-resolve":
                arguments = {"text": text}
            elif tool == "session-compact":
                arguments = {}  # the double fills in its briefing (Double.briefing)
            else:
                arguments = {"label": "Note", "properties": {"name": text}}
            found.append((match.start(), tool, arguments))
    return [(tool, arguments) for _, tool, arguments in sorted(found, key=lambda f: f[0])]


class McpError(Exception):
    """An MCP server failed to start or to answer."""


class McpServer:
    """One stdio MCP server, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, name: str, config: dict[str, Any], cwd: str, log: Path) -> None:
        self.name = name
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (config.get("env") or {}).items()})
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [config["command"], *[str(a) for a in config.get("args") or []]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=cwd,
        )
        self.buffer = b""
        self.ids = 0
        self.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL,
                "capabilities": {},
                "clientInfo": {"name": "claude-code", "version": VERSION},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.tools = {tool["name"] for tool in self.request("tools/list", {}).get("tools", [])}

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except OSError as err:
            raise McpError(f"MCP server {self.name} is gone: {err}") from err

    def receive(self, deadline: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise McpError(f"MCP server {self.name} did not answer")
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise McpError(f"MCP server {self.name} exited")
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.ids += 1
        self.send({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params})
        deadline = time.monotonic() + MCP_TIMEOUT
        while True:
            message = self.receive(deadline)
            if "method" in message:  # a notification, or a request of the server's own
                if "id" in message:
                    self.send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
                continue
            if message.get("id") != self.ids:
                continue
            if "error" in message:
                raise McpError(f"{method}: {message['error'].get('message')}")
            result: dict[str, Any] = message.get("result") or {}
            return result

    def close(self) -> None:
        """Close its stdin (a stdio server's signal to stop), then terminate it if it lingers."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        for stop in (None, self.proc.terminate, self.proc.kill):
            if stop is not None:
                stop()
            try:
                self.proc.wait(0.5)
                break
            except subprocess.TimeoutExpired:
                continue
        self.log.close()


def mcp_servers(values: list[str]) -> dict[str, dict[str, Any]]:
    """The stdio servers of every ``--mcp-config`` value (JSON text or a file holding it)."""
    servers: dict[str, dict[str, Any]] = {}
    for value in values:
        text = value if value.lstrip().startswith("{") else Path(value).read_text()
        for name, config in (json.loads(text).get("mcpServers") or {}).items():
            if config.get("type", "stdio") == "stdio" and config.get("command"):
                servers[name] = config
    return servers


def parse_argv(argv: list[str]) -> tuple[dict[str, list[str]], dict[str, bool], str | None]:
    """Options with values, flags, and the trailing prompt."""
    options: dict[str, list[str]] = {}
    flags: dict[str, bool] = {}
    prompt = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            prompt = " ".join(argv[i + 1 :]) or None
            break
        if arg in SINGLE:
            options.setdefault(arg, []).append(argv[i + 1])
            i += 2
        elif arg in VARIADIC:
            i += 1
            values = options.setdefault(arg, [])
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        elif arg.startswith("--"):
            flags[arg] = True
            i += 1
        else:
            prompt = arg
            i += 1
    return options, flags, prompt


def now_ms() -> int:
    return int(time.time() * 1000)


def iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Double:
    def __init__(self, argv: list[str]) -> None:
        self.options, self.flags, prompt = parse_argv(argv)
        self.conf: dict[str, str] = {
            k[len("CLAUDE_DOUBLE_") :].lower(): v
            for k, v in os.environ.items()
            if k.startswith("CLAUDE_DOUBLE_")
        }
        if prompt:
            for match in DIRECTIVE.finditer(prompt):
                for pair in match.group(1).split():
                    key, _, value = pair.partition("=")
                    self.conf[key] = value
        self.prompt = prompt
        self.session_id = (
            self.options.get("--resume") or self.options.get("--session-id") or [""]
        )[0] or str(uuid.uuid4())
        self.config = Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude")
        self.cwd = os.getcwd()
        slug = re.sub(r"[^A-Za-z0-9]", "-", self.cwd)
        self.transcript = self.config / "projects" / slug / f"{self.session_id}.jsonl"
        self.pid_file = self.config / "sessions" / f"{os.getpid()}.json"
        self.status = "idle"
        self.parent: str | None = None
        self.mcp_config = mcp_servers(self.options.get("--mcp-config") or [])
        self.mcp: dict[str, McpServer] = {}
        self.tool_ids = 0
        self.turns = 0
        self.prompts: list[str] = []
        self.started = now_ms()

    def get(self, key: str, default: str = "") -> str:
        return self.conf.get(key, default)

    def write_pid_file(self) -> None:
        stat = Path("/proc/self/stat").read_text()
        proc_start = stat[stat.rindex(")") + 2 :].split()[19]
        data: dict[str, Any] = {
            "pid": os.getpid(),
            "sessionId": self.session_id,
            "cwd": self.cwd,
            "startedAt": self.started,
            "procStart": proc_start,
            "version": VERSION,
            "kind": "interactive",
            "entrypoint": "cli",
            "name": f"double-{self.session_id[:4]}",
            "nameSource": "derived",
            "status": self.status,
            "updatedAt": now_ms(),
            "statusUpdatedAt": now_ms(),
        }
        if self.get("bridge"):
            data["bridgeSessionId"] = self.get("bridge")
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        # Written in place, like the CLI: a reader may see it half written.
        with self.pid_file.open("w") as handle:
            handle.write(json.dumps(data))

    def set_status(self, status: str) -> None:
        self.status = status
        self.write_pid_file()

    def remove_pid_file(self) -> None:
        try:
            self.pid_file.unlink()
        except FileNotFoundError:
            pass

    def append(self, entry: dict[str, Any]) -> None:
        entry.setdefault("sessionId", self.session_id)
        line = (json.dumps(entry) + "\n").encode()
        self.transcript.parent.mkdir(parents=True, exist_ok=True)
        with self.transcript.open("ab") as handle:
            slow = float(self.get("slow_flush", "0") or 0)
            if slow:
                handle.write(line[: len(line) // 2])
                handle.flush()
                time.sleep(slow)
                handle.write(line[len(line) // 2 :])
            else:
                handle.write(line)

    def message(self, kind: str, message: dict[str, Any], **extra: Any) -> None:
        uid = str(uuid.uuid4())
        tokens = int(self.get("usage", "0") or 0)
        if kind == "assistant" and tokens and message.get("model") != "<synthetic>":
            # As the API reports it: most of the context read from the prompt cache.
            read = max(0, tokens - 60)
            message["usage"] = {
                "input_tokens": min(tokens, 10),
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": read,
                "output_tokens": tokens - read - min(tokens, 10),
            }
        entry = {
            "parentUuid": self.parent,
            "type": kind,
            "message": message,
            "uuid": uid,
            "timestamp": iso(),
            "cwd": self.cwd,
            "version": VERSION,
            **extra,
        }
        self.append(entry)
        self.parent = uid

    def turn(self, prompt: str) -> None:
        self.turns += 1
        self.set_status("busy")
        out(f"\r\n> {prompt}\r\n")
        if self.turns == 1 and not self.transcript.exists():
            mode = (self.options.get("--permission-mode") or ["default"])[0]
            self.append({"type": "permission-mode", "permissionMode": mode})
        self.message("user", {"role": "user", "content": prompt})
        if self.get("require_auth") == "1" and not (
            os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("CLAUDE_CODE_OAUTH_TOKEN")
        ):
            self.not_logged_in()
            return
        time.sleep(float(self.get("turn", "0.05") or 0))
        if self.get("crash") == "turn":
            os._exit(3)
        while self.get("hold") == "1":
            time.sleep(0.5)
        reason = self.get("stop_reason", "end_turn")
        model = (self.options.get("--model") or ["claude-double"])[0]
        if reason == "end_turn":
            for tool, arguments in tool_requests(prompt):
                if tool == "session-compact":
                    if self.get("compact") == "ignore":
                        continue
                    arguments = {} if self.get("compact") == "bad" else self.briefing()
                self.use_tool(model, tool, arguments)
        self.prompts.append(DIRECTIVE.sub("", prompt).strip())
        if reason == "tool_use":
            content: list[dict[str, Any]] = [
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
            ]
        else:
            content = [{"type": "text", "text": f"Reply {self.turns} to: {prompt}"}]
        self.message(
            "assistant",
            {"role": "assistant", "model": model, "content": content, "stop_reason": reason},
        )
        if reason == "tool_use":
            self.message(
                "user",
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
            )
            return  # the turn goes on; the status stays busy
        self.append({"type": "system", "subtype": "turn_duration", "durationMs": 50})
        if self.turns == 1 and self.get("title"):
            self.append({"type": "ai-title", "aiTitle": self.get("title")})
        if self.turns == 1 and self.get("custom_title"):
            self.append({"type": "custom-title", "customTitle": self.get("custom_title")})
        out(f"Reply {self.turns}\r\n")
        self.set_status("idle")
        if self.get("exit_after_turn") == "1":
            self.exit(0)

    def briefing(self) -> dict[str, str]:
        """A session-compact briefing made of the earlier prompts of this run."""
        sentences = [
            part.strip()
            for prompt in self.prompts
            for part in re.split(r"(?<=[.!?])\s+", prompt)
            if re.match(r"(I|My)\b", part.strip())
        ]
        return {
            "asked": "; ".join(self.prompts) or "nothing yet",
            "done": f"Replied to {len(self.prompts)} prompt(s).",
            "decisions": "None.",
            "inProgress": "Nothing open.",
            "aboutOwner": " ".join(sentences),
        }

    def not_logged_in(self) -> None:
        """The real CLI's answer to a turn it has no credentials for (a synthetic API error)."""
        self.message(
            "assistant",
            {
                "role": "assistant",
                "model": "<synthetic>",
                "content": [{"type": "text", "text": NOT_LOGGED_IN}],
                "stop_reason": "stop_sequence",
            },
            error="authentication_failed",
            isApiErrorMessage=True,
        )
        self.append({"type": "system", "subtype": "turn_duration", "durationMs": 5})
        out(f"  ⎿  {NOT_LOGGED_IN}\r\n")
        self.set_status("idle")

    def server_for(self, tool: str) -> McpServer | None:
        """The running server that lists ``tool``, starting configured ones as needed."""
        for server in self.mcp.values():
            if tool in server.tools:
                return server
        for name, config in self.mcp_config.items():
            if name in self.mcp:
                continue
            log = self.config / "debug" / f"mcp-{name}-{self.session_id}.log"
            try:
                self.mcp[name] = McpServer(name, config, self.cwd, log)
            except (McpError, OSError, ValueError) as err:
                out(f"MCP server {name} failed: {err}\r\n")
                continue
            if tool in self.mcp[name].tools:
                return self.mcp[name]
        return None

    def use_tool(self, model: str, tool: str, arguments: dict[str, Any]) -> None:
        """Call one MCP tool and write its tool_use and tool_result, as the real CLI does."""
        server = self.server_for(tool)
        if server is None:
            return
        self.tool_ids += 1
        use_id = f"toolu_double_{self.tool_ids:04d}_{uuid.uuid4().hex[:8]}"
        name = f"mcp__{server.name}__{tool}"
        self.message(
            "assistant",
            {
                "role": "assistant",
                "model": model,
                "content": [{"type": "tool_use", "id": use_id, "name": name, "input": arguments}],
                "stop_reason": "tool_use",
            },
        )
        out(f"  {name}({json.dumps(arguments)})\r\n")
        try:
            result = server.request("tools/call", {"name": tool, "arguments": arguments})
        except McpError as err:
            result = {"content": [{"type": "text", "text": str(err)}], "isError": True}
        content = [c for c in result.get("content") or [] if c.get("type") == "text"]
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use_id, "content": content}
        if result.get("isError"):
            block["is_error"] = True
        self.message("user", {"role": "user", "content": [block]}, toolUseResult=content)

    def exit(self, code: int) -> None:
        for server in self.mcp.values():
            server.close()
        self.remove_pid_file()
        os._exit(code)

    def run(self) -> None:
        record = self.get("record")
        if record:
            Path(record).mkdir(parents=True, exist_ok=True)
            info = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": self.cwd}
            (Path(record) / f"{self.session_id}.json").write_text(json.dumps(info))
        if self.get("ignore_term") == "1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGTERM, lambda *_: self.exit(143))
        if self.get("ignore_hup") == "1":
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        else:
            signal.signal(signal.SIGHUP, lambda *_: self.exit(129))
        if self.get("refuse_root") == "1" and "bypassPermissions" in (
            self.options.get("--permission-mode") or []
        ):
            out(f"\x1b[31m{ROOT_REFUSAL}\x1b[0m\r\n")
            os._exit(1)
        if self.get("crash") == "start":
            out("fatal: the double was told to crash\r\n")
            os._exit(3)
        time.sleep(float(self.get("start_delay", "0") or 0))
        self.write_pid_file()
        out(f"claude double {VERSION} session {self.session_id}\r\n")
        filler = int(self.get("output", "0") or 0)
        if filler:
            out("x" * filler)
        if self.prompt:
            self.turn(self.prompt)
        buffered = b""
        while True:
            ready, _, _ = select.select([0], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(0, 4096)
            except OSError:
                chunk = b""
            if not chunk:  # the terminal is gone
                while self.get("ignore_hup") == "1":
                    time.sleep(1)
                self.exit(0)
            buffered += chunk
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                text = line.decode(errors="replace").strip()
                if text == "/exit":
                    self.exit(0)
                if text.startswith("!flood "):
                    flood(int(text.split()[1]))
                elif text == "!size":
                    size = os.get_terminal_size(0)
                    out(f"size {size.lines}x{size.columns}\r\n")
                elif text:
                    self.turn(text)


def flood(size: int) -> None:
    """Print ``size`` bytes in 32 KiB pieces, about as fast as a busy terminal program."""
    while size > 0:
        piece = min(size, 32 * 1024)
        out("y" * piece)
        size -= piece
        time.sleep(0.001)
    out("\r\nflood done\r\n")


def out(text: str) -> None:
    try:
        os.write(1, text.encode())
    except OSError:
        pass


def setup_token() -> None:
    """``claude setup-token`` as the real CLI shows it, with a code that is accepted offline."""
    out("\x1b[1mClaude Code\x1b[22m " + VERSION + "\r\n\r\n")
    out(
        " This will guide you through long-lived (1-year) auth token setup for your Claude\r\n"
        " account. Claude subscription required.\r\n\r\n"
    )
    url = SIGN_IN_URL + uuid.uuid4().hex
    width = max(20, os.get_terminal_size(0).columns - 2)
    out(" Browser didn't open? Use the URL below to sign in (c to copy)\r\n\r\n")
    for start in range(0, len(url), width):
        out(f"\x1b]8;id=double;{url}\x07{url[start : start + width]}\x1b]8;;\x07\r\n")
    buffered = b""
    while True:
        out("\r\n Paste code here if prompted > ")
        while b"\r" not in buffered and b"\n" not in buffered:
            try:
                chunk = os.read(0, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                os._exit(0)  # the terminal is gone
            buffered += chunk
            out(chunk.decode(errors="replace"))  # the CLI echoes what is typed
        line, _, buffered = buffered.replace(b"\r\n", b"\n").replace(b"\r", b"\n").partition(b"\n")
        code = line.decode(errors="replace").strip()
        if not code:
            continue
        if code == "bad":
            out(
                "\r\n \x1b[38;5;211m✘ OAuth error: Invalid code. Please make sure the full code "
                "was copied\x1b[39m\r\n\r\n Press \x1b[1mEnter\x1b[22m to retry\r\n"
            )
            continue
        break
    token = token_for(code)
    out("\r\n\x1b[32m✓ Long-lived authentication token created successfully!\x1b[39m\r\n\r\n")
    out(" Your OAuth token (valid for 1 year):\r\n\r\n")
    for start in range(0, len(token), width):
        out(" \x1b[33m" + token[start : start + width] + "\x1b[39m\r\n")
    out("\r\n Store this token securely. You won't be able to see it again.\r\n\r\n")
    out(" Use this token by setting: export CLAUDE_CODE_OAUTH_TOKEN=<token>\r\n")
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["setup-token"]:
        setup_token()
    delegate = os.environ.get("CLAUDE_DOUBLE_DELEGATE")
    if delegate:
        os.execv(delegate, [delegate, *sys.argv[1:]])  # noqa: S606 - the double hands over to the CLI
    if sys.argv[1:2] == ["--version"]:
        print(f"{VERSION} (Claude Code)")
        sys.exit(0)
    Double(sys.argv[1:]).run()
