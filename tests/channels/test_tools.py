"""The telegram plugin's tools, as `maxy mcp --plugin telegram` runs them, against the real engine
and the local Bot API: the chats, a message to a chat that wrote to the bot (by name, @username,
id or a contact's name) through the outbound gate, and the token checked before it is stored."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from appliance.channels.outbound import HELD_BACK
from appliance.core.identity import Caller
from appliance.mcp.telegram import telegram_chats, telegram_send, telegram_token_set
from appliance.mcp.tool import ToolContext, ToolError
from appliance.rpc.client import RpcClient
from tests.channels.conftest import Channels
from tests.fakes.telegram_api import TOKEN

pytestmark = pytest.mark.timeout(120)


def context(channels: Channels, caller: Caller | None = None) -> ToolContext:
    settings = channels.settings
    return ToolContext(
        settings,
        caller or Caller(account_id=channels.stack.env.account_id),
        RpcClient(settings.engine_socket, timeout=30),
    )


def run(tool: Any, ctx: ToolContext, **arguments: Any) -> Any:
    return asyncio.run(tool(ctx, arguments))


def wrote(channels: Channels, chat: int, name: str, handle: str) -> None:
    """``name`` writes to the bot once (kept as the lifeline keeps it)."""
    channels.api.chat(chat)
    channels.stack.rpc(
        "channel.record",
        {
            "channel": "telegram",
            "key": f"{channels.api.bot_id}:tools-{chat}",
            "chatId": str(chat),
            "senderId": str(chat),
            "senderName": name,
            "senderHandle": handle,
            "messageId": "1",
            "text": "hi bot",
        },
    )
    # Answered long ago: nothing for a running lifeline to take up.
    found = channels.stack.rpc("channel.pending", {"channel": "telegram"})["messages"]
    for message in found:
        if message["chatId"] == str(chat):
            channels.stack.rpc("channel.update", {"id": message["id"], "state": "answered"})


def test_the_owner_writes_to_a_chat_by_name_handle_or_id(channels: Channels) -> None:
    wrote(channels, 801, "Erin Fox", "erinf")
    wrote(channels, 802, "Gus Lee", "gusl")
    ctx = context(channels)
    chats = run(telegram_chats, ctx, limit=50)["chats"]
    assert {"801", "802"} <= {c["chatId"] for c in chats}
    for n, to in enumerate(("Erin Fox", "@erinf", "801")):
        sent = run(telegram_send, ctx, to=to, text=f"Your parcel is here ({n}).")
        assert sent["chatId"] == "801" and sent["sent"] is True
    assert [s.text for s in channels.api.sent_to(801)] == [
        f"Your parcel is here ({n})." for n in range(3)
    ]
    kept = [r["text"] for r in channels.rows(801) if r["role"] == "assistant"]
    assert kept == [f"Your parcel is here ({n})." for n in range(3)]


def test_a_chat_that_never_wrote_is_unreachable_and_a_secret_never_leaves(
    channels: Channels,
) -> None:
    ctx = context(channels)
    with pytest.raises(ToolError, match="Only people who have written to the bot") as refused:
        run(telegram_send, ctx, to="Nobody Known", text="hello")
    assert refused.value.code == "unknown-chat"
    wrote(channels, 803, "Hal Moe", "halm")
    run(telegram_send, ctx, to="Hal Moe", text=f"the bot's token is {TOKEN}")
    assert [s.text for s in channels.api.sent_to(803)] == [HELD_BACK]


def test_a_public_caller_may_use_none_of_the_tools(channels: Channels) -> None:
    visitor = context(channels, Caller(channels.stack.env.account_id, ("public",), "front-desk"))
    for tool, arguments in (
        (telegram_chats, {}),
        (telegram_send, {"to": "801", "text": "hi"}),
        (telegram_token_set, {"token": TOKEN}),
    ):
        with pytest.raises(ToolError) as refused:
            run(tool, visitor, **arguments)
        assert refused.value.code == "owner-only"


def test_a_token_is_stored_only_once_telegram_accepts_it(channels: Channels) -> None:
    ctx = context(channels)
    path = channels.settings.telegram_token_path
    before = path.read_text()
    with pytest.raises(ToolError, match="not a bot token"):
        run(telegram_token_set, ctx, token="hello")
    with pytest.raises(ToolError, match="Nothing was saved"):
        run(telegram_token_set, ctx, token="555555555:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw0")
    assert path.read_text() == before
    saved = run(telegram_token_set, ctx, token=TOKEN)
    assert saved["bot"]["username"] == channels.api.username
    assert path.read_text().strip() == TOKEN and path.stat().st_mode & 0o777 == 0o600
