"""A local stand-in for the Telegram Bot API: real HTTP on loopback, driven per test.

It answers ``POST|GET /bot<token>/<method>`` as the Bot API does — ``{"ok": true, "result": …}``
or ``{"ok": false, "error_code": …, "description": …}`` — for the methods Maxy uses:

- ``getMe``: the bot (``id``, ``username``, ``first_name``);
- ``getUpdates``: updates from ``offset`` on (every update below ``offset`` is confirmed and
  forgotten, as Telegram does), at most ``limit``, waiting up to ``timeout`` seconds for one
  (long polling). A second ``getUpdates`` while one waits ends the first with 409 "Conflict:
  terminated by other getUpdates request", as Telegram does;
- ``sendMessage`` (``chat_id``, ``text``, ``reply_parameters`` or ``reply_to_message_id``),
  ``editMessageText`` (``chat_id``, ``message_id``, ``text``; the same text again is 400 "message
  is not modified") and ``sendChatAction``. A chat the bot has never seen is 400 "chat not
  found", as for a real bot (it cannot write first).

Parameters come as JSON, a URL-encoded form (what python-telegram-bot sends; objects as JSON
text) or a query string. A token not in ``tokens`` (or added by ``add_bot``) is 401
Unauthorized. ``delay`` holds every answer that long (the API's own latency, which the
lifeline's figures leave out). ``fail(method, status, description, times)`` makes the next calls
of a method fail; ``redeliver(update_id)`` hands an update out once more (a duplicate);
``hold_sends(chat)`` keeps the bot's sendMessage to a chat in flight until ``release(chat)``.

A test writes as a person would (:meth:`FakeTelegram.message`) and reads what the bot did:
``sent`` (every sendMessage, with the message it replied to), ``edits``, ``actions``, ``calls``.

    with FakeTelegram() as api:
        update = api.message(chat=42, sender=42, text="hello")
        ...
        assert api.replies_to(42, update.message_id)
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0"
BOT_ID = 123456789
BOT_USERNAME = "maxy_home_bot"


@dataclass(frozen=True)
class Sent:
    """One message the bot sent."""

    chat_id: int
    message_id: int
    text: str
    reply_to: int | None
    at: float  # time.monotonic() when it arrived


@dataclass(frozen=True)
class Delivered:
    """One update handed to the bot."""

    update_id: int
    chat_id: int
    message_id: int
    sender_id: int
    text: str
    at: float | None = None  # when a getUpdates first carried it


@dataclass
class _Chat:
    id: int
    type: str
    title: str | None
    next_message_id: int = 1
    bot_messages: dict[int, str] = field(default_factory=dict)


class FakeTelegram:
    """The Bot API on a loopback port; ``url`` is what MAXY_TELEGRAM_API_URL is set to."""

    def __init__(
        self,
        tokens: tuple[str, ...] = (TOKEN,),
        username: str = BOT_USERNAME,
        bot_id: int = BOT_ID,
        delay: float = 0.0,
    ) -> None:
        self.bots = {token: (bot_id, username) for token in tokens}
        self.username = username
        self.bot_id = bot_id
        self.delay = delay
        self.lock = threading.Condition()
        self.updates: list[dict[str, Any]] = []
        self._all: list[dict[str, Any]] = []
        self.again: list[dict[str, Any]] = []
        self.delivered: dict[int, Delivered] = {}
        self.next_update_id = 1000
        self.chats: dict[int, _Chat] = {}
        self.sent: list[Sent] = []
        self.edits: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, list[tuple[int, str]]] = {}
        self.holding: set[int] = set()  # chats whose sendMessage waits (hold_sends)
        self.confirmed = 0  # the highest offset a getUpdates has confirmed
        self.confirmed_at: dict[int, float] = {}  # update id → when an offset confirmed it
        self._poll_generation = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._handle()

            def do_POST(self) -> None:
                self._handle()

            def _handle(self) -> None:
                parts = urlsplit(self.path)
                segments = parts.path.strip("/").split("/")
                params: dict[str, Any] = dict(parse_qsl(parts.query))
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                kind = self.headers.get("content-type", "")
                if raw and kind.startswith("application/json"):
                    params.update(json.loads(raw))
                elif raw:
                    params.update(dict(parse_qsl(raw.decode())))
                if len(segments) != 2 or not segments[0].startswith("bot"):
                    self._send(404, {"ok": False, "error_code": 404, "description": "Not Found"})
                    return
                token, method = segments[0][3:], segments[1]
                status, body = fake._call(token, method, params)
                self._send(status, body)

            def _send(self, status: int, body: dict[str, Any]) -> None:
                if fake.delay:
                    time.sleep(fake.delay)
                payload = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- what a person does --------------------------------------------------------------

    def chat(self, chat_id: int, kind: str = "private", title: str | None = None) -> _Chat:
        with self.lock:
            return self.chats.setdefault(chat_id, _Chat(chat_id, kind, title))

    def message(
        self,
        chat: int,
        sender: int,
        text: str,
        *,
        name: str = "Ann",
        username: str | None = None,
        kind: str = "private",
        title: str | None = None,
        reply_to_bot: int | None = None,
        mention: bool = False,
    ) -> Delivered:
        """A person writes ``text`` in ``chat``: one update queued for the bot."""
        with self.lock:
            room = self.chat(chat, kind, title)
            message_id = room.next_message_id
            room.next_message_id += 1
            if mention:
                text = f"@{self.username} {text}"
            message: dict[str, Any] = {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": self._chat_object(room),
                "from": {
                    "id": sender,
                    "is_bot": False,
                    "first_name": name,
                    **({"username": username} if username else {}),
                },
                "text": text,
            }
            if mention:
                message["entities"] = [
                    {"type": "mention", "offset": 0, "length": len(self.username) + 1}
                ]
            if reply_to_bot is not None:
                message["reply_to_message"] = {
                    "message_id": reply_to_bot,
                    "date": int(time.time()),
                    "chat": self._chat_object(room),
                    "from": self._me(),
                    "text": room.bot_messages.get(reply_to_bot, ""),
                }
            update_id = self.next_update_id
            self.next_update_id += 1
            self.updates.append({"update_id": update_id, "message": message})
            self._all.append(self.updates[-1])
            delivered = Delivered(update_id, chat, message_id, sender, text)
            self.delivered[update_id] = delivered
            self.lock.notify_all()
            return delivered

    def other_update(self) -> int:
        """An update that carries no message (a member change): it is confirmed all the same."""
        with self.lock:
            update_id = self.next_update_id
            self.next_update_id += 1
            self.updates.append({"update_id": update_id, "my_chat_member": {"date": 0}})
            self.lock.notify_all()
            return update_id

    def add_bot(self, token: str, bot_id: int, username: str) -> None:
        """Another bot (another token) this API accepts."""
        with self.lock:
            self.bots[token] = (bot_id, username)

    def redeliver(self, update_id: int) -> None:
        """Deliver an update once more in the next batch, whatever the offset (a duplicate)."""
        with self.lock:
            self.again.append(next(u for u in self._all if u["update_id"] == update_id))
            self.lock.notify_all()

    def fail(self, method: str, status: int, description: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method`` answer ``status`` with ``description``."""
        with self.lock:
            self.failures.setdefault(method, []).extend([(status, description)] * times)

    def hold_sends(self, chat: int) -> None:
        """Hold every sendMessage to ``chat`` unanswered until :meth:`release` (a send in
        flight); a held one is sent when released, as Telegram would once it had the request."""
        with self.lock:
            self.holding.add(chat)

    def release(self, chat: int) -> None:
        with self.lock:
            self.holding.discard(chat)
            self.lock.notify_all()

    # --- what the bot did ----------------------------------------------------------------

    def replies_to(self, chat: int, message_id: int) -> list[Sent]:
        """The messages the bot sent as replies to one message."""
        with self.lock:
            return [s for s in self.sent if s.chat_id == chat and s.reply_to == message_id]

    def sent_to(self, chat: int) -> list[Sent]:
        with self.lock:
            return [s for s in self.sent if s.chat_id == chat]

    def final_text(self, sent: Sent) -> str:
        """A sent message's text after its last edit."""
        with self.lock:
            text = sent.text
            for edit in self.edits:
                if edit["chat_id"] == sent.chat_id and edit["message_id"] == sent.message_id:
                    text = edit["text"]
            return text

    def methods(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.calls]

    def pending(self) -> int:
        """Updates not yet confirmed by an offset."""
        with self.lock:
            return len(self.updates)

    # --- the API -------------------------------------------------------------------------

    def _me(self) -> dict[str, Any]:
        return {
            "id": self.bot_id,
            "is_bot": True,
            "first_name": "Maxy",
            "username": self.username,
            "can_join_groups": True,
            "can_read_all_group_messages": False,
            "supports_inline_queries": False,
        }

    @staticmethod
    def _chat_object(room: _Chat) -> dict[str, Any]:
        chat: dict[str, Any] = {"id": room.id, "type": room.type}
        if room.title:
            chat["title"] = room.title
        return chat

    @staticmethod
    def _error(status: int, description: str) -> tuple[int, dict[str, Any]]:
        return status, {"ok": False, "error_code": status, "description": description}

    def _call(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            self.calls.append((method, params))
            if token not in self.bots:
                return self._error(401, "Unauthorized")
            queued = self.failures.get(method)
            if queued:
                return self._error(*queued.pop(0))
        if method == "getUpdates":
            return self._get_updates(params)
        with self.lock:
            if method == "getMe":
                bot_id, username = self.bots[token]
                return 200, {
                    "ok": True,
                    "result": {**self._me(), "id": bot_id, "username": username},
                }
            if method == "deleteWebhook":
                return 200, {"ok": True, "result": True}
            if method in ("sendMessage", "editMessageText", "sendChatAction"):
                room = self.chats.get(int(params.get("chat_id", 0)))
                if room is None:
                    return self._error(400, "Bad Request: chat not found")
                if method == "sendChatAction":
                    self.actions.append({"chat_id": room.id, "action": params.get("action")})
                    return 200, {"ok": True, "result": True}
                text = str(params.get("text") or "")
                if not text.strip():
                    return self._error(400, "Bad Request: message text is empty")
                if len(text) > 4096:
                    return self._error(400, "Bad Request: message is too long")
                if method == "sendMessage":
                    while room.id in self.holding:
                        self.lock.wait(0.5)
                    return self._send_message(room, text, params)
                return self._edit(room, text, params)
        return self._error(404, "Not Found")

    def _send_message(
        self, room: _Chat, text: str, params: dict[str, Any]
    ) -> tuple[int, dict[str, Any]]:
        reply_to = params.get("reply_to_message_id")
        reply = params.get("reply_parameters")
        if isinstance(reply, str):
            reply = json.loads(reply)
        if isinstance(reply, dict):
            reply_to = reply.get("message_id")
        message_id = room.next_message_id
        room.next_message_id += 1
        room.bot_messages[message_id] = text
        self.sent.append(
            Sent(room.id, message_id, text, int(reply_to) if reply_to else None, time.monotonic())
        )
        result = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": self._chat_object(room),
            "from": self._me(),
            "text": text,
        }
        return 200, {"ok": True, "result": result}

    def _edit(self, room: _Chat, text: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        message_id = int(params.get("message_id", 0))
        if message_id not in room.bot_messages:
            return self._error(400, "Bad Request: message can't be edited")
        if room.bot_messages[message_id] == text:
            return self._error(
                400,
                "Bad Request: message is not modified: specified new message content and reply "
                "markup are exactly the same as a current content and reply markup of the message",
            )
        room.bot_messages[message_id] = text
        self.edits.append({"chat_id": room.id, "message_id": message_id, "text": text})
        result = {
            "message_id": message_id,
            "date": int(time.time()),
            "edit_date": int(time.time()),
            "chat": self._chat_object(room),
            "from": self._me(),
            "text": text,
        }
        return 200, {"ok": True, "result": result}

    def _get_updates(self, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self.lock:
            self._poll_generation += 1
            generation = self._poll_generation
            self.lock.notify_all()
            if offset:
                now = time.monotonic()
                for update in self.updates:
                    if update["update_id"] < offset:
                        self.confirmed_at.setdefault(update["update_id"], now)
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
                self.confirmed = max(self.confirmed, offset)
            while True:
                if generation != self._poll_generation:
                    return self._error(
                        409,
                        "Conflict: terminated by other getUpdates request; make sure that only "
                        "one bot instance is running",
                    )
                batch = self.again + self.updates[:limit]
                if batch or time.monotonic() >= deadline:
                    self.again = []
                    break
                self.lock.wait(min(0.5, deadline - time.monotonic()))
            now = time.monotonic()
            for update in batch:
                seen = self.delivered.get(update["update_id"])
                if seen is not None and seen.at is None:
                    self.delivered[update["update_id"]] = Delivered(
                        seen.update_id,
                        seen.chat_id,
                        seen.message_id,
                        seen.sender_id,
                        seen.text,
                        now,
                    )
            return 200, {"ok": True, "result": batch}

    # --- life cycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeTelegram:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self._poll_generation += 1
            self.lock.notify_all()
        self.server.shutdown()
        self.server.server_close()
