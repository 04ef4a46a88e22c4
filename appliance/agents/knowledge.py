"""KNOWLEDGE.md: the snapshot of the graph a public agent reads with every message.

:func:`regenerate` asks the engine (``agent.knowledge``) as the agent itself — public scope, its
slug, its keyword subscriptions — so the retrieval engine's guards decide what is visible
(account, soft delete, scope, agent tag; subscriptions without the tag, as in search), narrowed
further to nodes whose scope is exactly ``public``. Visitors' conversations, tool calls and
sections (their chunks carry the text) are never knowledge.

The file is rendered deterministically — the same graph gives the same bytes::

    # <display name>: knowledge
    <!-- Generated from the memory graph: regenerate it; edits here are overwritten. -->

    ## <title>
    <text>

First every node tagged for the agent (a document's chunks in order under the document's title),
by title; then each keyword subscription's matches, by keyword in the owner's order. An entry is
cut at :data:`MAX_ENTRY_CHARS`, the file at :data:`MAX_CHARS` (a last line says how many entries
were left out). It is written atomically, so the staleness guard of
:mod:`appliance.agents.public_agent` prefers it over an older KNOWLEDGE-SUMMARY.md.

``maxy agents knowledge SLUG`` does the same from a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.agents import store
from appliance.core.config import Settings
from appliance.core.fsio import write_atomic
from appliance.core.identity import Caller
from appliance.rpc.client import RpcClient

log = logging.getLogger(__name__)

KNOWLEDGE_FILE = "KNOWLEDGE.md"
MAX_ENTRY_CHARS = 4_000
MAX_CHARS = 40_000
MAX_TITLE_CHARS = 120
CALL_TIMEOUT = 120.0
TITLE_KEYS = ("name", "title", "canonicalName", "headline", "subject", "slug")
TEXT_KEYS = ("text", "content", "compiledTruth", "description", "body", "summary")
HEADER = "<!-- Generated from the memory graph: regenerate it; edits here are overwritten. -->"
# The tags that frame the parts of an agent's system prompt: stored text never closes or opens one.
_PROMPT_TAG = re.compile(
    r"<(/?\s*(?:identity|soul|knowledge|relevant-memory|message-metadata)\b)", re.IGNORECASE
)


def defuse(text: str) -> str:
    """``text`` with anything that looks like one of the prompt's own tags made inert."""
    return _PROMPT_TAG.sub(lambda m: "&lt;" + m.group(1), text)


def title_of(props: Mapping[str, Any], labels: Sequence[str]) -> str:
    """A node's best name: a naming property, else its first label."""
    for key in TITLE_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:MAX_TITLE_CHARS]
    return labels[0] if labels else "Note"


def text_of(props: Mapping[str, Any], title: str = "") -> str:
    """A node's text: the first text-like property that says more than its title."""
    for key in TEXT_KEYS:
        value = props.get(key)
        if isinstance(value, str) and value.strip() and value.strip() != title:
            return value.strip()
    return ""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass(frozen=True)
class Entry:
    """One heading and its text in KNOWLEDGE.md."""

    title: str
    text: str
    key: str  # a stable tie-breaker (the node or document id)
    note: str = ""  # e.g. which keyword subscription matched

    def render(self) -> str:
        """The entry's markdown."""
        heading = defuse(self.title).lstrip("#").strip() or "Untitled"
        lines = [f"## {heading}"]
        if self.note:
            lines.append(f"_{self.note}_")
        if self.text:
            lines.append(defuse(_cut(self.text, MAX_ENTRY_CHARS)))
        return "\n".join(lines)


def tagged_entries(nodes: Iterable[Mapping[str, Any]]) -> list[Entry]:
    """Entries of the nodes tagged for the agent: chunks under their document, by title."""
    documents: dict[str, tuple[str, list[tuple[int, str, str]]]] = {}
    own: dict[str, Entry] = {}
    for node in nodes:
        props, labels = node.get("props") or {}, list(node.get("labels") or [])
        document = node.get("document")
        if "Chunk" in labels and document:
            title = str(document.get("title") or "Untitled document")
            pieces = documents.setdefault(str(document["id"]), (title, []))[1]
            order = props.get("order")
            pieces.append((order if isinstance(order, int) else 0, str(node["id"]), text_of(props)))
            continue
        title = title_of(props, labels)
        text = text_of(props, title)
        if text or title not in labels:  # a node with neither name nor text says nothing
            own[str(node["id"])] = Entry(title, text, str(node["id"]))
    entries = []
    for doc_id, (title, pieces) in documents.items():
        own.pop(doc_id, None)  # the document's chunks say more than its summary
        text = "\n\n".join(text for _, _, text in sorted(pieces) if text)
        entries.append(Entry(" ".join(title.split()), text, doc_id))
    entries += own.values()
    return sorted(entries, key=lambda e: (e.title.casefold(), e.key))


def subscribed_entries(nodes: Iterable[Mapping[str, Any]], keywords: Sequence[str]) -> list[Entry]:
    """Entries of the keyword subscriptions' matches: by keyword (the owner's order), by title."""
    rank = {keyword: index for index, keyword in enumerate(keywords)}
    ranked = []
    for node in nodes:
        props, labels = node.get("props") or {}, list(node.get("labels") or [])
        keyword = str(node.get("keyword") or "")
        title = title_of(props, labels)
        entry = Entry(title, text_of(props, title), str(node["id"]), f"Matches “{keyword}”")
        ranked.append(((rank.get(keyword, len(rank)), keyword, title.casefold(), entry.key), entry))
    return [entry for _, entry in sorted(ranked, key=lambda pair: pair[0])]


@dataclass(frozen=True)
class Rendered:
    """A rendered KNOWLEDGE.md and what went into it."""

    text: str
    entries: int
    omitted: int


def render(
    display_name: str,
    tagged: Sequence[Mapping[str, Any]],
    subscribed: Sequence[Mapping[str, Any]],
    keywords: Sequence[str],
    *,
    truncated: bool = False,
) -> Rendered:
    """KNOWLEDGE.md's text: a title, then each entry, within :data:`MAX_CHARS`."""
    head = f"# {defuse(' '.join(display_name.split())) or 'Agent'}: knowledge\n{HEADER}\n"
    entries = tagged_entries(tagged) + subscribed_entries(subscribed, keywords)
    parts = [head]
    size = len(head)
    kept = 0
    for entry in entries:
        block = "\n" + entry.render() + "\n"
        if size + len(block) > MAX_CHARS:
            break
        parts.append(block)
        size += len(block)
        kept += 1
    omitted = len(entries) - kept
    if not entries:
        parts.append("\nNothing in the memory graph is tagged for this agent yet.\n")
    if omitted or truncated:
        parts.append("\n(Some entries were left out: the knowledge file has a size limit.)\n")
    return Rendered("".join(parts), kept, omitted)


@dataclass(frozen=True)
class Regenerated:
    """The outcome of one regeneration."""

    slug: str
    path: Path
    tagged: int
    subscribed: int
    entries: int
    omitted: int
    chars: int

    def to_json(self) -> dict[str, Any]:
        """The API form."""
        return {
            "slug": self.slug,
            "tagged": self.tagged,
            "subscribed": self.subscribed,
            "entries": self.entries,
            "omitted": self.omitted,
            "chars": self.chars,
        }


async def regenerate(
    engine: RpcClient, account_id: str, agents_dir: Path, slug: str
) -> Regenerated:
    """Rebuild agents/<slug>/KNOWLEDGE.md from the graph (raises AgentStoreError, RpcError)."""
    folder = store.folder_of(agents_dir, slug)
    keywords = store.subscriptions_of(folder)
    caller = Caller(account_id, ("public",), folder.name, subscriptions=keywords)
    answer = await engine.call("agent.knowledge", {"caller": caller.to_wire()})
    tagged, subscribed = list(answer["tagged"]), list(answer["subscribed"])
    name = store.read_config(folder).get("displayName")
    rendered = render(
        name if isinstance(name, str) and name.strip() else folder.name,
        tagged,
        subscribed,
        keywords,
        truncated=bool(answer.get("truncated")),
    )
    path = folder / KNOWLEDGE_FILE
    write_atomic(path, rendered.text)
    log.info(
        "[agents] op=knowledge agent=%s tagged=%d subscribed=%d entries=%d omitted=%d chars=%d",
        folder.name,
        len(tagged),
        len(subscribed),
        rendered.entries,
        rendered.omitted,
        len(rendered.text),
    )
    return Regenerated(
        folder.name,
        path,
        len(tagged),
        len(subscribed),
        rendered.entries,
        rendered.omitted,
        len(rendered.text),
    )


def cmd_knowledge(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy agents knowledge SLUG``."""
    account_id = settings.require_account_id()
    agents_dir = store.agents_dir_of(settings.accounts_dir, account_id)
    engine = RpcClient(settings.engine_socket, timeout=CALL_TIMEOUT)
    done = asyncio.run(regenerate(engine, account_id, agents_dir, args.slug))
    print(
        f"wrote {done.path} ({done.chars:,} characters): {done.tagged} tagged, "
        f"{done.subscribed} from keyword subscriptions"
        + (f", {done.omitted} left out (size limit)" if done.omitted else "")
    )
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``agents knowledge`` on the ``maxy`` parser."""
    agents = sub.add_parser("agents", help="the account's public agents")
    agents_sub = agents.add_subparsers(dest="agents_command", required=True)
    knowledge = agents_sub.add_parser(
        "knowledge", help="regenerate an agent's KNOWLEDGE.md from the memory graph"
    )
    knowledge.add_argument("slug", help="the agent's slug (its address, /SLUG)")
    knowledge.set_defaults(func=cmd_knowledge)
