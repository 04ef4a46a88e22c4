"""One visitor message answered by a public agent, whatever channel it came by.

The web chat (:mod:`appliance.app.chat`) and the channels (:mod:`appliance.channels`: a Telegram
stranger, a group) answer a visitor the same way, here:

1. the inbound gateway screens the message (public channel) unless the caller already did; a
   DISCARD is answered with the refusal and the agent never runs;
2. what memory holds for it is fetched as the agent (:mod:`appliance.agents.recall`);
3. the agent answers — through the Messages API when an API key is stored
   (:class:`~appliance.agents.public_agent.PublicAgent`), else as a public Claude Code session
   when Claude is connected (:class:`~appliance.agents.claude_code.SessionAgent`);
4. the exchange is kept by :mod:`appliance.agents.visitors` (in the graph from the visitor's
   second message).

:meth:`Answering.answer` yields :class:`Said` pieces: ``delta`` (a piece of the reply, in
order), ``refusal``, ``error`` (the friendly sentence: nothing more can be said now; the cause
is logged, never said) and ``done``. One visitor's messages are answered one at a time.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from appliance.agents.anthropic_client import AnthropicClient
from appliance.agents.claude_code import SessionAgent, visitor_path
from appliance.agents.errors import AgentConfigError, AnthropicError
from appliance.agents.gateway import REFUSAL, Gateway, Screening
from appliance.agents.public_agent import PublicAgent
from appliance.agents.recall import recall
from appliance.agents.store import subscriptions_of
from appliance.agents.visitors import Visitors
from appliance.core.accounts import Account
from appliance.core.config import Settings
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient

log = logging.getLogger(__name__)

UNAVAILABLE = "Sorry — I can't answer right now. Please try again in a little while."


@dataclass(frozen=True)
class Said:
    """One piece of an answer."""

    kind: Literal["delta", "refusal", "error", "done"]
    text: str = ""
    persisted: bool = False
    outcome: str = ""  # answered, refused, empty-reply, degraded-<reason>, agent-config


class Answering:
    """Answers visitors' messages with the account's public agents."""

    def __init__(
        self,
        settings: Settings,
        account: Account,
        engine: RpcClient,
        visitors: Visitors | None = None,
    ) -> None:
        """``visitors`` holds the conversations; the app shares its own with the lead review."""
        self.settings = settings
        self.account = account
        self.engine = engine
        self.client = AnthropicClient(settings)
        self.gateway = Gateway(self.client, settings.gateway_model, settings.gateway_timeout)
        self.visitors = visitors or Visitors(engine, account.id)

    async def aclose(self) -> None:
        """Close the API client's connections (when the role or the test that made it ends)."""
        await self.client.aclose()

    def agent(self, folder: Path) -> PublicAgent:
        """The agent of ``folder``, answering through the API key or, without one, Claude."""
        settings = self.settings
        if visitor_path(settings) == "claude":
            return SessionAgent(
                self.client, settings.agent_model, folder, self.account, settings.manager_socket
            )
        return PublicAgent(self.client, settings.agent_model, folder, self.account)

    async def answer(
        self, agent: PublicAgent, visitor: str, text: str, screening: Screening | None = None
    ) -> AsyncIterator[Said]:
        """Answer one message of ``visitor``; never raises for the model's or agent's failures."""
        conversation = await self.visitors.open(visitor, agent.slug)
        async with conversation.lock:
            if screening is None:
                screening = await self.gateway.screen(text, "public")
            if screening.refuse("public"):
                yield Said("refusal", REFUSAL, outcome="refused")
                yield Said("done", outcome="refused")
                return
            caller = Caller(
                self.account.id,
                ("public",),
                agent.slug,
                conversation.session_id,
                subscriptions_of(agent.folder),
            )
            found = await recall(
                self.client, self.settings, self.engine, caller, text, conversation.turns
            )
            pieces: list[str] = []
            try:
                async for delta in agent.reply(
                    list(conversation.turns), text, screening, found.block
                ):
                    pieces.append(delta)
                    yield Said("delta", delta)
            except AgentConfigError as err:
                log.error("[public-chat] op=reply error=agent-config agent=%s: %s", agent.slug, err)
                yield Said("error", UNAVAILABLE, outcome="agent-config")
                return
            except AnthropicError as err:
                yield Said("error", UNAVAILABLE, outcome=f"degraded-{err.reason}")
                return
            reply = "".join(pieces)
            if not reply.strip():
                yield Said("error", UNAVAILABLE, outcome="empty-reply")
                return
            persisted = await self.visitors.add_exchange(conversation, text, reply)
            yield Said("done", persisted=persisted, outcome="answered")
