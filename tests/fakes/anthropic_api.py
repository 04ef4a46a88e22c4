"""A local stand-in for the Anthropic Messages API: real HTTP on loopback, scripted per test.

It answers ``POST /v1/messages`` with a plain JSON message, or — when the request asks for a
stream — the server-sent events of one reply (``message_start``, ``content_block_start``,
``content_block_delta`` once per word of text or as one ``input_json_delta`` for a tool call,
``content_block_stop``, ``message_delta`` with the stop reason, ``message_stop``).
``GET /v1/models`` lists models (the cheap call that checks a key); other ``HEAD``/``GET`` (the
Claude Code CLI's connectivity check) and ``count_tokens`` answer too, so the real CLI can run a
turn against it.

Credentials: by default any request is served. Given ``api_keys`` and/or ``oauth_tokens`` (what
``CLAUDE_CODE_OAUTH_TOKEN`` sends), a request whose ``x-api-key`` or ``Authorization: Bearer``
(the SDK sends a key that way too) is none of them is answered 401 ``authentication_error``.

What it answers is scripted per test, per model or for every model::

    with FakeAnthropic() as api:
        api.queue(Reply(text='{"verdict": "DISCARD", ...}'), model="claude-haiku-4-5")
        api.always(Reply(text="Hello!"))            # every other request
        api.always(Reply(text="{...}"), when=is_x)   # every request is_x accepts
        api.queue(Reply(status=429))                 # the next request, whatever its model
        api.queue(Reply(delay=10))                   # answers after 10 s (past a timeout)
        api.queue(Reply(malformed=True))             # a 200 whose body is not JSON
        api.queue(Reply(tool=ToolUse("mcp__memory__memory-write", {...})), when=has_tools)

A one-shot reply queued for the request's model wins over one queued for any model, which wins
over a standing reply for the model, then one for any model, then ``reply`` (the constructor's
text). A reply queued ``when=predicate`` answers only a request whose body the predicate accepts
(e.g. :func:`has_tools`: the main turn of a Claude Code session, not its small title call).
Every request is recorded: ``requests`` as (method, path, body) and ``messages`` as the decoded
bodies of the Messages API calls.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

REPLY = "Hello from the local Messages API."
ANY = "*"
ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


MODELS = ("claude-sonnet-4-6", "claude-haiku-4-5")
Predicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class ToolUse:
    """A tool call the scripted reply makes (one ``tool_use`` block)."""

    name: str
    input: dict[str, Any]
    id: str = "toolu_local_1"


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    text: str = REPLY
    status: int = 200
    delay: float = 0.0  # seconds before the status line
    malformed: bool = False  # a 200 whose body (or stream) is not valid JSON
    stop_reason: str = "end_turn"
    tool: ToolUse | None = None  # a tool call instead of text (stop_reason tool_use)


def has_tools(body: dict[str, Any]) -> bool:
    """True for a request that offers the model tools (a session's turn, not a title call)."""
    return bool(body.get("tools"))


def _content(reply: Reply | None) -> list[dict[str, Any]]:
    if reply is None:
        return []
    if reply.tool is not None:
        tool = reply.tool
        return [{"type": "tool_use", "id": tool.id, "name": tool.name, "input": tool.input}]
    return [{"type": "text", "text": reply.text}]


def _stop_reason(reply: Reply) -> str:
    return "tool_use" if reply.tool is not None else reply.stop_reason


def _message(model: str, reply: Reply | None) -> dict[str, Any]:
    return {
        "id": "msg_local_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content(reply),
        "stop_reason": None if reply is None else _stop_reason(reply),
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1 if reply is None else 8},
    }


def _pieces(text: str) -> list[str]:
    """Split ``text`` into word-sized deltas that join back to it exactly."""
    pieces: list[str] = []
    for index, word in enumerate(text.split(" ")):
        pieces.append(word if index == 0 else " " + word)
    return [p for p in pieces if p] or [""]


def stream_events(model: str, reply: Reply) -> list[tuple[str, dict[str, Any]]]:
    """The events of one streamed reply (text, or one tool call), in wire order."""
    if reply.tool is not None:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": reply.tool.id,
            "name": reply.tool.name,
            "input": {},
        }
        deltas = [{"type": "input_json_delta", "partial_json": json.dumps(reply.tool.input)}]
    else:
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(reply.text)]
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": _message(model, None)}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
    ]
    for delta in deltas:
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
                "usage": {"output_tokens": 8},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


class FakeAnthropic:
    """A threaded HTTP server on loopback; use as a context manager."""

    def __init__(
        self,
        reply: str = REPLY,
        api_keys: Iterable[str] = (),
        oauth_tokens: Iterable[str] = (),
    ) -> None:
        self.reply = reply
        self.api_keys = set(api_keys)
        self.oauth_tokens = set(oauth_tokens)
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.headers: list[dict[str, str]] = []
        self._queued: dict[str, deque[tuple[Predicate | None, Reply]]] = {}
        self._standing: dict[str, list[tuple[Predicate | None, Reply]]] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                fake._record("HEAD", self.path, None, dict(self.headers))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                if not self.path.startswith("/v1/models"):
                    self.do_HEAD()
                    return
                fake._record("GET", self.path, None, dict(self.headers))
                if self._refused():
                    return
                models = [
                    {
                        "type": "model",
                        "id": name,
                        "display_name": name,
                        "created_at": "2026-01-01T00:00:00Z",
                    }
                    for name in MODELS
                ]
                listing = {
                    "data": models,
                    "has_more": False,
                    "first_id": models[0]["id"],
                    "last_id": models[-1]["id"],
                }
                self._send(200, "application/json", json.dumps(listing).encode())

            def _refused(self) -> bool:
                """Answer 401 unless the request carries an accepted key or token."""
                if fake._authorised(
                    self.headers.get("x-api-key"), self.headers.get("authorization")
                ):
                    return False
                error = {
                    "type": "error",
                    "error": {"type": "authentication_error", "message": "invalid x-api-key"},
                }
                self._send(401, "application/json", json.dumps(error).encode())
                return True

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsable": raw.decode(errors="replace")}
                fake._record("POST", self.path, body, dict(self.headers))
                if self._refused():
                    return
                if not self.path.startswith("/v1/messages") or self.path.startswith(
                    "/v1/messages/count_tokens"
                ):
                    self._send(200, "application/json", json.dumps({"input_tokens": 10}).encode())
                    return
                reply = fake._next(body)
                if reply.delay and fake._closing.wait(reply.delay):
                    return
                model = str(body.get("model") or "claude-local")
                if reply.status != 200:
                    kind = ERRORS.get(reply.status, "api_error")
                    error = {"type": "error", "error": {"type": kind, "message": "scripted"}}
                    self._send(reply.status, "application/json", json.dumps(error).encode())
                elif body.get("stream"):
                    self._stream(model, reply)
                elif reply.malformed:
                    self._send(200, "application/json", b'{"id": "msg_local_1", "content": [')
                else:
                    message = _message(model, reply)
                    self._send(200, "application/json", json.dumps(message).encode())

            def _send(self, status: int, kind: str, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(payload)))
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, model: str, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for name, data in stream_events(model, reply):
                    broken = reply.malformed and name != "message_start"
                    text = "{not json" if broken else json.dumps(data)
                    chunk = f"event: {name}\ndata: {text}\n\n".encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def queue(self, *replies: Reply, model: str = ANY, when: Predicate | None = None) -> None:
        """Answer the next requests (for ``model``, or any; ``when`` accepts) with ``replies``."""
        with self._lock:
            self._queued.setdefault(model, deque()).extend((when, reply) for reply in replies)

    def always(self, reply: Reply, model: str = ANY, when: Predicate | None = None) -> None:
        """Answer every request (for ``model``, or any; that ``when`` accepts) with ``reply``
        unless one is queued; a standing reply with ``when`` is asked before one without."""
        with self._lock:
            kept = [entry for entry in self._standing.get(model, []) if entry[0] is not when]
            # Those with a predicate are asked first; the one without answers the rest.
            self._standing[model] = sorted([(when, reply), *kept], key=lambda e: e[0] is None)

    def _authorised(self, api_key: str | None, authorization: str | None) -> bool:
        if not self.api_keys and not self.oauth_tokens:
            return True
        bearer = (authorization or "").removeprefix("Bearer ").strip()
        accepted = self.api_keys | self.oauth_tokens  # the SDK sends a key as a bearer, too
        return (api_key or "") in accepted or bearer in accepted

    def _next(self, body: dict[str, Any]) -> Reply:
        model = str(body.get("model") or "")
        with self._lock:
            for key in (model, ANY):
                queued = self._queued.get(key, deque())
                for entry in queued:
                    when, reply = entry
                    if when is None or when(body):
                        queued.remove(entry)
                        return reply
            for key in (model, ANY):
                for when, reply in self._standing.get(key, []):
                    if when is None or when(body):
                        return reply
        return Reply(text=self.reply)

    def _record(
        self, method: str, path: str, body: dict[str, Any] | None, headers: dict[str, str]
    ) -> None:
        with self._lock:
            self.requests.append((method, path, body))
            self.headers.append({k.lower(): v for k, v in headers.items()})

    def credential_of(self, index: int) -> str:
        """The key or token request ``index`` carried."""
        headers = self.headers[index]
        return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The bodies of every Messages API call so far, oldest first."""
        with self._lock:
            return [
                body
                for method, path, body in self.requests
                if method == "POST"
                and path.startswith("/v1/messages")
                and "count_tokens" not in path
                and body is not None
            ]

    def calls_for(self, model: str) -> list[dict[str, Any]]:
        """The Messages API bodies that named ``model``."""
        return [body for body in self.messages if body.get("model") == model]

    @property
    def url(self) -> str:
        """Base URL for ANTHROPIC_BASE_URL or MAXY_ANTHROPIC_BASE_URL."""
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
