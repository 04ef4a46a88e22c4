"""Reports: bounded text an agent or a workflow writes for the owner to read later.

- :func:`write_report` stores one ``Report`` node (title, body of at most 10,000 characters,
  optional ``sourceWorkflow`` and ``keywords``), stamped with the caller's account and a scope
  the caller may write at (default: the most private one it holds; a public agent also tags the
  report for itself so it can read it back). It is embedded from its title and the opening of
  its body (:func:`appliance.memory.write.embedding_text`); a failed embed never aborts the write
  (``[graph-write] warn reason=embed-failed``).
- Writes are idempotent per account, title and UTC minute: a second write with the same title in
  the same minute updates that report (``minuteKey`` = title + ``@`` + ISO minute, merged with
  ``accountId``), so a retried workflow step does not leave duplicates. A report of that minute
  the caller cannot see (another scope or agent, or soft-deleted) is never overwritten.
- :func:`read_latest_reports` returns full bodies, newest first; :func:`list_reports` returns
  metadata only (never the body), newest first, paginated. Both apply every guard of
  :mod:`appliance.memory.guards`.

One log line per operation: ``[reports] op=write|read-latest|list …``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from appliance.core.identity import SCOPES, Caller
from appliance.memory.chunking import content_hash
from appliance.memory.errors import EngineError, WriteRejected, rejected
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.write import EmbedText, embedding_text
from appliance.rpc.protocol import BadParams

log = logging.getLogger(__name__)

MAX_BODY_CHARS = 10_000
MAX_TITLE_CHARS = 300
MAX_KEYWORDS = 32
MAX_KEYWORD_CHARS = 100
MAX_READ_LIMIT = 20  # full bodies: 20 x 10,000 characters is already a large tool answer
MAX_PAGE_SIZE = 100

# Keyword match on title, body or keywords; ``$kw`` is a lower-cased keyword or null.
_KEYWORD_FILTER = (
    "($kw IS NULL OR toLower(r.title) CONTAINS $kw OR toLower(r.body) CONTAINS $kw"
    " OR any(k IN coalesce(r.keywords, []) WHERE toLower(k) CONTAINS $kw))"
)


def resolve_scope(caller: Caller, requested: str | None) -> str:
    """The scope a caller writes at: ``requested`` if allowed, else its most private scope."""
    if requested is not None:
        if requested not in SCOPES:
            raise WriteRejected(f"scope must be one of {', '.join(SCOPES)}.")
        if caller.scopes is not None and requested not in caller.scopes:
            raise WriteRejected(f"This caller may not write at scope {requested!r}.")
        return requested
    if caller.scopes is None:
        return "admin"
    # Most private first: what the writer produced should reach no wider than it must.
    for scope in reversed(SCOPES):
        if scope in caller.scopes:
            return scope
    raise WriteRejected("This caller holds no scope and may not write.")


def caller_agents(caller: Caller, agent_slug: str | None = None) -> list[str] | None:
    """The ``agents`` tag for a new node: a public agent tags it for itself so it can read it."""
    agent = caller.agent or agent_slug
    return [agent] if agent else None


def _clean_keywords(keywords: Sequence[str] | None) -> list[str] | None:
    if keywords is None:
        return None
    if isinstance(keywords, str) or not all(isinstance(k, str) for k in keywords):
        raise rejected("reports", "invalid-keywords", "keywords must be a list of strings.")
    cleaned = list(dict.fromkeys(k.strip() for k in keywords if k.strip()))
    if len(cleaned) > MAX_KEYWORDS or any(len(k) > MAX_KEYWORD_CHARS for k in cleaned):
        raise rejected(
            "reports",
            "invalid-keywords",
            f"At most {MAX_KEYWORDS} keywords of at most {MAX_KEYWORD_CHARS} characters each.",
        )
    return cleaned or None


def _check(title: str, body: str) -> None:
    if not isinstance(title, str) or not title.strip():
        raise rejected("reports", "empty-title", "A report needs a non-empty title.")
    if len(title) > MAX_TITLE_CHARS:
        raise rejected(
            "reports",
            "title-too-long",
            f"The report title is {len(title):,} characters; the limit is {MAX_TITLE_CHARS:,}.",
            chars=len(title),
        )
    if not isinstance(body, str) or not body.strip():
        raise rejected("reports", "empty-body", "A report needs a non-empty body.")
    if len(body) > MAX_BODY_CHARS:
        raise rejected(
            "reports",
            "body-too-long",
            f"The report body is {len(body):,} characters; the limit is {MAX_BODY_CHARS:,}. "
            "Shorten it, split it into several reports, or store it as a document.",
            chars=len(body),
        )


async def write_report(
    graph: Graph,
    caller: Caller,
    embed: EmbedText,
    model_name: str,
    title: str,
    body: str,
    source_workflow: str | None = None,
    keywords: Sequence[str] | None = None,
    *,
    scope: str | None = None,
) -> dict[str, Any]:
    """Write (or, within the same UTC minute and title, update) one report; return its id."""
    _check(title, body)
    title = title.strip()
    cleaned = _clean_keywords(keywords)
    if source_workflow is not None and not isinstance(source_workflow, str):
        raise rejected("reports", "invalid-source-workflow", "source_workflow must be a string.")
    node_scope = resolve_scope(caller, scope)
    now = datetime.now(UTC)
    minute_key = f"{title}@{now:%Y-%m-%dT%H:%M}Z"
    params = {**caller.params(), "key": minute_key}

    existing, _ = await graph.run(
        f"MATCH (r:Report {{accountId: $account, minuteKey: $key}}) "
        f"RETURN {guard('r')} AS visible, r.contentHash AS hash, r.embeddingModel AS model",
        params,
    )
    if existing and not existing[0]["visible"]:
        raise rejected(
            "reports",
            "hidden-report",
            "A report with this title was already written this minute where this caller may "
            "not update it; use another title or write again next minute.",
            key=minute_key,
        )

    text = embedding_text("Report", {"title": title, "body": body})
    digest = content_hash(text)
    fresh = bool(existing) and existing[0]["hash"] == digest and existing[0]["model"] == model_name
    embedding: list[float] | None = None
    warnings: list[str] = []
    new_id = str(uuid.uuid4())
    if not fresh:
        try:
            embedding = await embed(text)
        except EngineError as err:
            log.warning(
                "[graph-write] warn reason=embed-failed label=Report key=%s error=%s",
                minute_key,
                err,
            )
            warnings.append("embed-failed")
    if embedding is not None:
        set_embedding = (
            "SET r.embedding = $embedding, r.embeddingModel = $model, r.contentHash = $hash "
        )
    elif fresh:
        set_embedding = ""
    else:
        # The old vector (if any) no longer describes the body: drop it so a reindex finds it.
        set_embedding = "REMOVE r.embedding, r.embeddingModel, r.contentHash "

    # The guard after MERGE repeats the visibility check inside the write itself, so a report
    # made hidden between the two statements is still never overwritten.
    rows, _ = await graph.run(
        "MERGE (r:Report {accountId: $account, minuteKey: $key}) "
        "ON CREATE SET r.id = $id, r.createdAt = $now, r.scope = $scope, r.agents = $agents "
        f"WITH r WHERE {guard('r')} "
        "SET r.title = $title, r.body = $body, r.keywords = $keywords, "
        "r.sourceWorkflow = $workflow, r.updatedAt = $now "
        f"{set_embedding}"
        "RETURN r.id AS id, r.id = $id AS created",
        {
            **params,
            "id": new_id,
            "now": now,
            "scope": node_scope,
            "agents": caller_agents(caller),
            "title": title,
            "body": body,
            "keywords": cleaned,
            "workflow": source_workflow,
            "embedding": embedding,
            "model": model_name,
            "hash": digest,
        },
    )
    if not rows:
        raise rejected("reports", "hidden-report", "That report cannot be updated by this caller.")
    report_id, created = str(rows[0]["id"]), bool(rows[0]["created"])
    log.info(
        "[reports] op=write id=%s created=%s scope=%s chars=%d embedded=%s",
        report_id,
        created,
        node_scope,
        len(body),
        embedding is not None or fresh,
    )
    return {
        "id": report_id,
        "created": created,
        "embedded": embedding is not None or fresh,
        "warnings": warnings,
    }


def _keyword(keyword: str | None) -> str | None:
    if keyword is None or not keyword.strip():
        return None
    return keyword.strip().lower()


async def read_latest_reports(
    graph: Graph, caller: Caller, keyword: str | None = None, limit: int = 1
) -> dict[str, Any]:
    """The newest reports (full bodies) the caller may see, optionally matching a keyword."""
    if not 1 <= limit <= MAX_READ_LIMIT:
        raise BadParams(f"limit must be between 1 and {MAX_READ_LIMIT}")
    # A CONTAINS filter, not the entity_search full-text index: the answer is ordered by date,
    # not relevance, so a full-text pool cut at its own limit could drop the newest match;
    # substring matching also finds "invoice" in "invoices" without analyser surprises; and
    # an account's reports are few enough for the accountId index to narrow them first.
    rows, _ = await graph.read(
        f"MATCH (r:Report) WHERE {guard('r')} AND {_KEYWORD_FILTER} "
        "RETURN r.id AS id, r.title AS title, r.body AS body, r.createdAt AS createdAt, "
        "r.updatedAt AS updatedAt, r.sourceWorkflow AS sourceWorkflow, "
        "coalesce(r.keywords, []) AS keywords, r.scope AS scope "
        "ORDER BY r.createdAt DESC, r.id DESC LIMIT $limit",
        {**caller.params(), "kw": _keyword(keyword), "limit": limit},
    )
    log.info(
        "[reports] op=read-latest keyword=%s limit=%d found=%d",
        _keyword(keyword) is not None,
        limit,
        len(rows),
    )
    return {"reports": rows}


async def list_reports(
    graph: Graph,
    caller: Caller,
    keyword: str | None = None,
    source_workflow: str | None = None,
    page: int = 1,
    page_size: int = 20,
) -> dict[str, Any]:
    """Report metadata (no bodies) the caller may see, newest first, one page at a time."""
    if page < 1:
        raise BadParams("page must be 1 or more")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise BadParams(f"page_size must be between 1 and {MAX_PAGE_SIZE}")
    skip = (page - 1) * page_size
    rows, _ = await graph.read(
        f"MATCH (r:Report) WHERE {guard('r')} AND {_KEYWORD_FILTER} "
        "AND ($workflow IS NULL OR r.sourceWorkflow = $workflow) "
        "WITH r ORDER BY r.createdAt DESC, r.id DESC "
        "WITH collect(r) AS matched "
        "RETURN size(matched) AS total, [r IN matched[$skip..$end] | {id: r.id, title: r.title, "
        "createdAt: r.createdAt, sourceWorkflow: r.sourceWorkflow, "
        "keywords: coalesce(r.keywords, []), bodyLength: size(r.body)}] AS items",
        {
            **caller.params(),
            "kw": _keyword(keyword),
            "workflow": source_workflow,
            "skip": skip,
            "end": skip + page_size,
        },
    )
    total = int(rows[0]["total"]) if rows else 0
    items: list[dict[str, Any]] = rows[0]["items"] if rows else []
    log.info(
        "[reports] op=list page=%d page_size=%d total=%d returned=%d",
        page,
        page_size,
        total,
        len(items),
    )
    return {"items": items, "page": page, "pageSize": page_size, "total": total}
