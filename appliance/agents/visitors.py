"""A visitor's conversation with a public agent, and its lazy persistence.

Nothing is written for a visitor who says one thing and leaves: the first exchange lives in this
process's memory only. From the visitor's second message on, every message and reply is recorded
through the engine (``conversation.record``: a ``Conversation`` with the agent's slug and public
scope, one embedded ``Message`` per turn, the first exchange included). A persisted conversation
is read back from the graph (``conversation.messages``) when this process does not hold it —
after a restart — so the transcript survives; an unpersisted first exchange does not, by design.

The graph's session id of a conversation is ``public:<slug>:<visitor id>``. A failed write is
logged and retried with the next message; the visitor's chat goes on.

Each conversation knows when its visitor last spoke (``last_at``, by the injected clock) and
whether the lead review has read it (once: a visitor who comes back later is not reviewed again,
so one conversation makes at most one follow-up) (:mod:`appliance.agents.leads`):
:meth:`Visitors.ended` lists the quiet ones, and a lead found in a first exchange is persisted then
(:meth:`Visitors.persist`), so its follow-up task can point at it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime

from appliance.agents.public_agent import Turn
from appliance.core.clock import Clock, utc_now
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RpcError

log = logging.getLogger(__name__)

PERSIST_FROM = 2  # the visitor message that makes a conversation worth keeping
MAX_CONVERSATIONS = 2000  # held in memory; the least recently used is forgotten first
READ_LIMIT = 200


@dataclass
class Conversation:
    """One visitor with one agent."""

    slug: str
    session_id: str
    turns: list[Turn] = field(default_factory=list)
    persisted: int = 0  # how many of ``turns`` are in the graph
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_at: datetime | None = None  # when the visitor last spoke (None: not in this process)
    reviewed: bool = False  # the lead review has read it

    @property
    def visitor_messages(self) -> int:
        """How many messages the visitor has sent (and were answered)."""
        return sum(1 for t in self.turns if t.role == "user")


class Visitors:
    """Conversations of the account's visitors, in memory and (from message 2) in the graph."""

    def __init__(self, engine: RpcClient, account_id: str, clock: Clock = utc_now) -> None:
        self.engine = engine
        self.account_id = account_id
        self.clock = clock
        self._held: OrderedDict[str, Conversation] = OrderedDict()

    def held(self, session_id: str) -> Conversation | None:
        """The conversation of ``session_id`` if this process holds it."""
        return self._held.get(session_id)

    def ended(self, before: datetime) -> list[Conversation]:
        """Held conversations whose visitor has said nothing since ``before``, not yet reviewed
        (oldest first)."""
        quiet = [
            c
            for c in self._held.values()
            if c.turns and not c.reviewed and c.last_at is not None and c.last_at < before
        ]
        return sorted(quiet, key=lambda c: c.last_at or before)

    def caller(self, conversation: Conversation) -> Caller:
        """Who the app is to the engine for this conversation: the agent, public scope only."""
        return Caller(
            account_id=self.account_id,
            scopes=("public",),
            agent=conversation.slug,
            session_id=conversation.session_id,
        )

    async def open(self, visitor: str, slug: str) -> Conversation:
        """The visitor's conversation with ``slug``: from memory, else the graph, else new."""
        session = f"public:{slug}:{visitor}"
        held = self._held.get(session)
        if held is not None:
            self._held.move_to_end(session)
            return held
        conversation = Conversation(slug, session)
        try:
            answer = await self.engine.call(
                "conversation.messages",
                {"caller": self.caller(conversation).to_wire(), "limit": READ_LIMIT},
            )
        except RpcError as err:
            log.warning(
                "[public-chat] op=read-transcript warn=engine session=%s error=%s", session, err
            )
            return conversation  # not held: the next message tries the graph again
        conversation.turns = [Turn(m["role"], m["text"]) for m in answer["messages"]]
        conversation.persisted = len(conversation.turns)
        self._hold(conversation)
        return conversation

    def _hold(self, conversation: Conversation) -> None:
        self._held[conversation.session_id] = conversation
        while len(self._held) > MAX_CONVERSATIONS:
            self._held.popitem(last=False)

    async def add_exchange(self, conversation: Conversation, text: str, reply: str) -> bool:
        """Remember one message and its reply; persist when due. True when all is in the graph."""
        conversation.turns += [Turn("user", text), Turn("assistant", reply)]
        conversation.last_at = self.clock()
        self._hold(conversation)
        if conversation.visitor_messages < PERSIST_FROM:
            return False
        return await self.persist(conversation)

    async def persist(self, conversation: Conversation) -> bool:
        """Record the turns not yet in the graph; True when all of them are."""
        caller = self.caller(conversation).to_wire()
        for turn in conversation.turns[conversation.persisted :]:
            try:
                await self.engine.call(
                    "conversation.record",
                    {
                        "caller": caller,
                        "sessionId": conversation.session_id,
                        "role": turn.role,
                        "text": turn.text,
                        "agentSlug": conversation.slug,
                        "scope": "public",
                    },
                )
            except RpcError as err:
                log.warning(
                    "[public-chat] op=persist warn=engine session=%s pending=%d error=%s",
                    conversation.session_id,
                    len(conversation.turns) - conversation.persisted,
                    err,
                )
                return False
            conversation.persisted += 1
        log.info(
            "[public-chat] op=persist session=%s messages=%d",
            conversation.session_id,
            conversation.persisted,
        )
        return True
