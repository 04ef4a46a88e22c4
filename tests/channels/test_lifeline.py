"""The inbound lifeline through `maxy channels`, the real engine and manager, and the local Bot
API: every message kept before any decision; the owner's thread is one admin session, relayed
from its transcript; strangers and groups reach the public agent; duplicates are answered once;
turns that get no answer are attributed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from appliance.channels.admin_turn import thread_id
from tests.channels.conftest import OWNER, PUBLIC_ANSWER, Channels, manager_row
from tests.support.processes import wait_until
from tests.support.stacks import start_manager

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module", autouse=True)
def running(channels: Channels) -> Iterator[None]:
    channels.start()
    yield
    channels.stop()


def test_the_owner_talks_to_one_admin_session_that_answers_in_order(channels: Channels) -> None:
    api = channels.api
    first = api.message(OWNER, OWNER, "hello there", name="Owner")
    reply = channels.reply_to(first)
    assert api.final_text(reply) == "Reply 1 to: hello there"
    second = api.message(OWNER, OWNER, "and how are you?\nsecond line", name="Owner")
    again = channels.reply_to(second)
    assert api.final_text(again) == "Reply 2 to: and how are you? ⏎ second line"
    session = thread_id(channels.stack.env.account_id, "telegram", str(OWNER))
    row = manager_row(channels, session)
    assert row is not None and row["channel"] == "telegram" and row["senderId"] == str(OWNER)
    channels.handled(OWNER, 2)
    rows = channels.rows(OWNER)
    assert [r["text"] for r in rows if r["role"] == "user"] == [
        "hello there",
        "and how are you?\nsecond line",
    ]
    assert [r["text"] for r in rows if r["role"] == "assistant"] == [
        "Reply 1 to: hello there",
        "Reply 2 to: and how are you? ⏎ second line",
    ]
    wait_until(
        lambda: (
            "op=inbound-outcome relay-ok=2 timeout-no-turn=0 timeout-relay-missed=0"
            in channels.output()
        ),
        10,
        "the owner's tally",
    )


def test_a_stranger_reaches_the_public_agent_and_is_kept(channels: Channels) -> None:
    stranger = channels.api.message(501, 501, "When are you open on weekdays?", name="Bo")
    reply = channels.reply_to(stranger)
    assert reply.text == PUBLIC_ANSWER and reply.chat_id == 501
    channels.handled(501, 1)
    assert [r["role"] for r in channels.rows(501)] == ["user", "assistant"]
    # The stranger's words reached the public agent, never an admin session.
    assert (
        manager_row(channels, thread_id(channels.stack.env.account_id, "telegram", "501")) is None
    )


def test_groups_are_answered_only_when_addressed_as_their_mode_says(channels: Channels) -> None:
    api = channels.api
    group = -1001
    chatter = api.message(group, 601, "lunch at noon?", kind="group", title="Family")
    called = api.message(
        group, 602, "what are your hours?", kind="group", title="Family", mention=True
    )
    answer = channels.reply_to(called)
    assert answer.chat_id == group and answer.text == PUBLIC_ANSWER
    follow = api.message(
        group,
        601,
        "thanks, and Saturday?",
        kind="group",
        title="Family",
        reply_to_bot=answer.message_id,
    )
    channels.reply_to(follow)
    # The owner in a group is answered by the public agent, never their admin agent.
    owner_there = api.message(group, OWNER, "tell them the hours", kind="group", mention=True)
    assert channels.reply_to(owner_there).text == PUBLIC_ANSWER
    channels.handled(group, 4)
    assert api.replies_to(group, chatter.message_id) == []
    channels.configure(groups={str(group): "off"})
    muted = api.message(group, 602, "hello bot?", kind="group", title="Family", mention=True)
    channels.handled(group, 5)  # the settings are read when a message is handled
    channels.configure(groups={str(group): "all"})
    everyone = api.message(group, 603, "anyone?", kind="group", title="Family")
    channels.reply_to(everyone)
    channels.handled(group, 6)
    assert api.replies_to(group, muted.message_id) == []
    channels.configure()
    kept = [r["text"] for r in channels.rows(group) if r["role"] == "user"]
    assert "lunch at noon?" in kept and "hello bot?" in kept  # kept, though never answered


def test_a_redelivered_update_is_answered_once(channels: Channels) -> None:
    api = channels.api
    first = api.message(502, 502, "Do you deliver to the old town?", name="Cy")
    channels.reply_to(first)
    api.redeliver(first.update_id)
    api.redeliver(first.update_id)
    second = api.message(502, 502, "And on Sundays?", name="Cy")
    channels.reply_to(second)
    channels.handled(502, 2)
    assert len(api.replies_to(502, first.message_id)) == 1
    assert [r["role"] for r in channels.rows(502)] == ["user", "assistant", "user", "assistant"]
    assert channels.stack.processes["engine"].output().count("created=False chat=502") >= 2


def test_an_owner_turn_that_never_ends_and_input_that_starts_none_are_attributed(
    channels: Channels,
) -> None:
    channels.stop()
    channels.start(MAXY_TELEGRAM_TURN_TIMEOUT="6", MAXY_CHANNEL_INPUT_ACK="2")
    owner = 43
    channels.configure(ownerIds=[str(OWNER), str(owner)])
    try:
        held = channels.api.message(owner, owner, "think forever [double hold=1]")
        reply = channels.reply_to(held, 30)
        assert "took too long" in reply.text
        stuck = channels.api.message(owner, owner, "are you there?")
        assert "took too long" in channels.reply_to(stuck, 30).text
        out = channels.output()
        assert re.search(r"op=turn-timeout cause=relay-missed channel=telegram sender=43", out)
        assert re.search(r"op=input-no-turn channel=telegram sender=43 .*waitedMs=2000", out)
        assert re.search(r"op=turn-timeout cause=no-turn channel=telegram sender=43", out)
        assert (
            "op=inbound-outcome relay-ok=0 timeout-no-turn=1 timeout-relay-missed=1 failed=0 "
            "channel=telegram sender=43" in out
        )
        # The input-no-turn line came seconds after the message, before its timeout line.
        assert out.index("op=input-no-turn") < out.rindex("cause=no-turn")
    finally:
        channels.configure()
        channels.stop()
        channels.stop_sessions()  # the held turn would hold its PTY forever
        channels.start()


def open_state(channels: Channels, chat: int) -> str | None:
    """The state of the chat's oldest message still being handled, if any."""
    pending = channels.stack.rpc("channel.pending", {"channel": "telegram"})["messages"]
    mine = [m for m in pending if m["chatId"] == str(chat)]
    return str(mine[0]["state"]) if mine else None


def test_a_message_the_manager_could_not_take_is_held_and_answered_once(
    channels: Channels,
) -> None:
    """The manager refuses connections for a moment: the owner's message is held, the one after
    it waits behind it, and both are answered once, in order, when it is back."""
    api = channels.api
    owner = 44
    channels.configure(ownerIds=[str(OWNER), str(owner)])
    channels.stack.processes["manager"].stop()
    try:
        first = api.message(owner, owner, "are you back?")
        wait_until(
            lambda: "op=handle error=ManagerUnavailable" in channels.output(),
            60,
            f"the message held\n{channels.output()[-3000:]}",
        )
        second = api.message(owner, owner, "and this one after it")
    finally:
        start_manager(channels.stack)
    try:
        assert api.final_text(channels.reply_to(first, 120)) == "Reply 1 to: are you back?"
        again = channels.reply_to(second, 60)
        assert api.final_text(again) == "Reply 2 to: and this one after it"
        channels.handled(owner, 2)
        assert [len(api.replies_to(owner, m.message_id)) for m in (first, second)] == [1, 1]
    finally:
        channels.configure()


def test_a_message_the_engine_failed_in_the_middle_of_is_held_and_answered_once(
    channels: Channels,
) -> None:
    """The engine goes away while the owner's turn runs (its reply cannot be noted): the
    message is held and, the engine back, its turn is relayed — not typed again — once."""
    api = channels.api
    owner = 45
    channels.configure(ownerIds=[str(OWNER), str(owner)])
    stack = channels.stack
    try:
        slow = api.message(owner, owner, "take your time [double turn=3]")
        wait_until(lambda: open_state(channels, owner) == "submitted", 60, "the turn typed")
        stack.processes["engine"].stop()
        try:
            wait_until(
                lambda: "op=handle error=RpcUnavailable" in channels.output(),
                60,
                f"the message held\n{channels.output()[-3000:]}",
            )
        finally:
            stack.start("engine")
            wait_until(stack.engine_healthy, 120, f"the engine again\n{stack.output()}")
        reply = channels.reply_to(slow, 180)
        assert api.final_text(reply) == "Reply 1 to: take your time [double turn=3]"
        channels.handled(owner, 1, 60)
        assert len(api.replies_to(owner, slow.message_id)) == 1
    finally:
        channels.configure()


def test_killed_while_a_reply_is_in_flight_the_older_message_ends_before_the_newer(
    channels: Channels,
) -> None:
    """The role dies while the reply to m0 is on its way; m1 and m2 come while it is down. After
    the restart m0 (taken up from the graph) is never sent again, and m1 and m2 are answered
    after it, in order, each its own turn of the owner's session."""
    api = channels.api
    owner = 46
    channels.configure(ownerIds=[str(OWNER), str(owner)])
    try:
        api.hold_sends(owner)
        m0 = api.message(owner, owner, "m0")
        wait_until(
            lambda: any(
                name == "sendMessage" and str(params.get("chat_id")) == str(owner)
                for name, params in api.calls
            ),
            60,
            "the reply to m0 in flight",
            0.01,
        )
        channels.kill()
        later = [api.message(owner, owner, text) for text in ("m1", "m2")]
        api.release(owner)  # Telegram had the request: it is sent, though no one hears back
        channels.start()
        replies = [channels.reply_to(m, 120) for m in later]
        channels.handled(owner, 3)
        assert [api.final_text(r) for r in replies] == ["Reply 2 to: m1", "Reply 3 to: m2"]
        assert [len(api.replies_to(owner, m.message_id)) for m in (m0, *later)] == [1, 1, 1]
        sent = [api.replies_to(owner, m.message_id)[0].message_id for m in (m0, *later)]
        assert sent == sorted(sent)
        assert re.search(r"op=reply-uncertain channel=telegram message=", channels.output())
    finally:
        api.release(owner)
        channels.configure()
