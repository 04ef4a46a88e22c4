"""``maxy engine``: load the embedding model and the Neo4j pool once, serve them over RPC.

Start-up order: the model loads first (a missing model is fatal: nothing works without it), the
RPC socket opens, then the schema is applied in the background, retried with backoff while Neo4j
is unreachable. ``health`` answers at once whatever Neo4j's state, so the edge can report it.

RPC methods:

- ``health`` → ``{ok, account, neo4j: {ok, ms|error}, embedder: {ok, model, dimension},
  schema: {state: pending|applied|mismatch|failed, error}}``
- ``embed`` ``{texts: [str]}`` → ``{model, dimension, vectors: bytes}`` (packed float32, one
  vector after another)
- ``search`` ``{caller, query, labels?, limit?, mode?, vectorWeight?, keywordWeight?, rrfK?,
  threshold?, boosts?, dedup?, expandHops?, fields?, scopes?}`` → ``{results, counts, ms,
  vectorOnly, keywordOnly}`` (keywordOnly: the model failed, keyword results only)
- ``write`` ``{caller, label, properties, id?, edges?, producedByTaskId?, scope?, agents?}`` →
  ``{id, created, embedded, warnings}``
- ``conversation.messages`` ``{caller, sessionId?, limit?}`` → ``{sessionId, conversationId,
  messages: [{id, role, text, createdAt, order}]}`` (one session, oldest first, guarded)
- ``audit.record`` ``{caller, tool, input, output, isError, startedAt, endedAt, ms, sessionId?,
  durable?, produced?: [{label, id}]}`` → ``{id, conversationId, taskId, produced}`` (one MCP tool
  call; a durable one also a Task, see :mod:`appliance.memory.audit`)
- ``context.previous`` ``{caller, maxChars?}`` → ``{text, chars, digest, tasks: {shown, total},
  alerts: {shown, total}}`` (the ``<previous-context>`` block of an admin spawn, see
  :mod:`appliance.memory.context`)
- ``graph.sample`` ``{caller, labels?, q?, limit?}`` → ``{nodes, edges, truncated, categories,
  ms}``; ``graph.node`` ``{caller, id, label?}`` → ``{node, neighbours, edges, degree}`` or
  ``{node: null}`` (see :mod:`appliance.memory.explore`)
- ``agent.knowledge`` ``{caller, limit?}`` → ``{tagged, subscribed: [{id, labels, props,
  document?, keyword?}], truncated}``: what a public agent's KNOWLEDGE.md is made of (the
  caller's agent and subscriptions; public scope only; never conversations or tool calls)

``caller`` (account, scopes, agent, session) is set by the calling process from its own
environment; a caller of another account is refused.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import numpy as np

from appliance.accounts import Account
from appliance.config import Settings
from appliance.memory import audit, context, conversations, explore, lifecycle, reports
from appliance.memory import reindex as reindexing
from appliance.memory.embedder import Embedder
from appliance.memory.errors import EngineError, GraphError, SchemaDimensionMismatch, WriteRejected
from appliance.memory.graph import Graph
from appliance.memory.guards import Caller, GuardError, guard
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.render import render_structured
from appliance.memory.schema import apply_schema
from appliance.memory.search import Expander, Searcher, SearchRequest
from appliance.memory.write import Edge, Writer, WriteRequest
from appliance.rpc.server import RpcServer, report_progress
from appliance.systemd import Notifier

log = logging.getLogger(__name__)

HEALTH_QUERY_TIMEOUT = 2.0
MAX_TEXTS_PER_CALL = 256
PURGE_INTERVAL = 3600.0
KNOWLEDGE_LIMIT = 500  # nodes of each kind (tagged, subscribed) in one KNOWLEDGE.md
# Never knowledge: visitors' own conversations (public, tagged for the agent), the audit trail,
# and sections (their chunks carry the text).
KNOWLEDGE_SKIP = ("Conversation", "Message", "ToolCall", "Section")
_KNOWLEDGE_TAGGED = (
    "MATCH (n) WHERE n.scope = 'public' AND $agent IN coalesce(n.agents, []) AND "
    + guard("n")
    + " AND NOT any(l IN labels(n) WHERE l IN $skip) "
    "OPTIONAL MATCH (d:KnowledgeDocument)-[:HAS_SECTION]->(:Section)-[:HAS_CHUNK]->(n) WHERE "
    + guard("d")
    + " WITH n, head(collect(d)) AS d "
    "RETURN coalesce(n.id, elementId(n)) AS id, labels(n) AS labels, "
    "n {.*, embedding: null, accountId: null} AS props, d.id AS documentId, "
    "d.title AS documentTitle "
    "ORDER BY documentTitle, documentId, n.order, id LIMIT $limit"
)


def _plain(props: dict[str, Any]) -> dict[str, Any]:
    """The text (and chunk order) of a node for KNOWLEDGE.md; never a vector or an account id."""
    return {
        k: v
        for k, v in props.items()
        if k not in ("embedding", "accountId")
        and (isinstance(v, str) or (k == "order" and isinstance(v, int)))
    }


def read_password(settings: Settings) -> str:
    """Read the Neo4j password file, failing with what to do."""
    path = settings.neo4j_password_path
    try:
        return path.read_text().strip()
    except FileNotFoundError as err:
        raise GraphError(
            f"The Neo4j password file {path} does not exist. Start Neo4j once with `maxy run` "
            "or `maxy neo4j start` (which generates it), or set MAXY_NEO4J_PASSWORD_FILE."
        ) from err


def paraphraser(settings: Settings) -> Expander | None:
    """The Anthropic query expander when a key file exists, else None (the SDK stays unloaded)."""
    if not settings.anthropic_api_key_path.is_file():
        return None
    from appliance.agents.anthropic_client import AnthropicClient  # lazy: loads the SDK
    from appliance.agents.retrieval import make_expander

    return make_expander(AnthropicClient(settings), settings)


class Engine:
    """The retrieval engine process: embedder + graph + RPC handlers."""

    def __init__(self, settings: Settings, account: Account, embedder: Embedder) -> None:
        self.settings = settings
        self.account = account
        self.embedder = embedder
        self.graph = Graph(settings.neo4j_uri, settings.neo4j_user, read_password(settings))
        # llama.cpp is not thread-safe: one worker thread owns every embed call.
        self._embed_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self.schema_state = "pending"
        self.schema_error: str | None = None
        self.searcher = Searcher(self.graph, self.embed_one, paraphraser(settings))
        self.writer = Writer(self.graph, self.embed_one, embedder.model_name)
        self.ingester = Ingester(self.graph, self.embed_one, embedder.model_name)

    @property
    def handlers(self) -> dict[str, Any]:
        """RPC method table."""
        return {
            "health": self.health,
            "embed": self.embed,
            "search": self.search,
            "write": self.write,
            "report.write": self.report_write,
            "report.read-latest": self.report_read_latest,
            "report.list": self.report_list,
            "conversation.record": self.conversation_record,
            "conversation.search": self.conversation_search,
            "conversation.messages": self.conversation_messages,
            "ingest": self.ingest,
            "reindex": self.reindex,
            "delete": self.delete,
            "restore": self.restore,
            "graph.sample": self.graph_sample,
            "graph.node": self.graph_node,
            "audit.record": self.audit_record,
            "agent.knowledge": self.agent_knowledge,
            "context.previous": self.previous_context,
        }

    async def embed_one(self, text: str) -> list[float]:
        """Embed one text on the embedding thread."""
        loop = asyncio.get_running_loop()
        vector = await loop.run_in_executor(self._embed_thread, self.embedder.embed, text)
        return [float(x) for x in vector]

    def caller(self, params: dict[str, Any]) -> Caller:
        """The request's caller; it must belong to this engine's account."""
        try:
            caller = Caller.from_wire(params.get("caller") or {})
        except GuardError as err:
            raise WriteRejected(f"invalid caller: {err}") from err
        if caller.account_id != self.account.id:
            log.error(
                "[graph-write] reject reason=invalid-account-id claimed=%s account=%s",
                caller.account_id,
                self.account.id,
            )
            raise WriteRejected("The caller's account is not this device's account.")
        return caller

    async def search(self, params: dict[str, Any]) -> dict[str, Any]:
        """Hybrid search for a caller."""
        caller = self.caller(params).narrow(params.get("scopes"))
        s = self.settings
        query = str(params["query"])
        request = SearchRequest(
            query=query,
            labels=params.get("labels"),
            limit=min(int(params.get("limit") or s.search_limit), 100),
            mode=params.get("mode") or s.search_mode,  # type: ignore[arg-type]
            vector_weight=float(params.get("vectorWeight", s.search_vector_weight)),
            keyword_weight=float(params.get("keywordWeight", s.search_keyword_weight)),
            rrf_k=int(params.get("rrfK", s.search_rrf_k)),
            threshold=float(params.get("threshold", 0.0)),
            boosts=bool(params.get("boosts", s.search_boosts)),
            expand_hops=min(int(params.get("expandHops", 1)), 1),
            fields=params.get("fields"),
            retrieval_class=params.get("retrievalClass"),
            routing=bool(params.get("routing", s.search_routing)),
            expand_queries=bool(params.get("expandQueries", s.search_expansion)),
            dedup=bool(params.get("dedup", s.search_dedup)),
            subscriptions=caller.subscriptions,
        )
        if request.mode not in ("weighted", "rrf"):
            raise ValueError("mode must be weighted or rrf")
        result = await self.searcher.search(caller, request)
        return {
            "results": render_structured(result.results),
            "counts": result.counts,
            "ms": round(result.ms, 1),
            "vectorOnly": result.vector_only,
            "keywordOnly": result.keyword_only,
        }

    async def write(self, params: dict[str, Any]) -> dict[str, Any]:
        """Create or merge one node for a caller."""
        caller = self.caller(params)
        edges = [
            Edge(
                type=str(e["type"]),
                to_id=str(e["toId"]),
                to_label=str(e["toLabel"]),
                direction=str(e.get("direction", "out")),
            )
            for e in params.get("edges") or []
        ]
        request = WriteRequest(
            label=str(params["label"]),
            properties=dict(params.get("properties") or {}),
            id=params.get("id"),
            edges=edges,
            produced_by=params.get("producedByTaskId"),
            scope=params.get("scope"),
            agents=params.get("agents"),
        )
        return await self.writer.write(caller, request)

    async def embed(self, params: dict[str, Any]) -> dict[str, Any]:
        """Embed a list of texts; vectors come back as packed float32 bytes."""
        texts = params["texts"]
        if not isinstance(texts, list) or not all(isinstance(t, str | bytes) for t in texts):
            raise ValueError("texts must be a list of strings")
        if len(texts) > MAX_TEXTS_PER_CALL:
            raise ValueError(f"at most {MAX_TEXTS_PER_CALL} texts per call")
        loop = asyncio.get_running_loop()
        vectors = await loop.run_in_executor(self._embed_thread, self.embedder.embed_many, texts)
        packed = np.stack(vectors).astype("<f4").tobytes() if vectors else b""
        return {
            "model": self.embedder.model_name,
            "dimension": self.embedder.dimension,
            "vectors": packed,
        }

    async def health(self, params: dict[str, Any]) -> dict[str, Any]:
        """Report Neo4j, the embedder and the schema."""
        try:
            ms = await asyncio.wait_for(self.graph.ping(), HEALTH_QUERY_TIMEOUT)
            neo4j: dict[str, Any] = {"ok": True, "ms": round(ms, 1)}
        except TimeoutError:
            neo4j = {"ok": False, "error": f"no answer within {HEALTH_QUERY_TIMEOUT:.0f} s"}
        except GraphError as err:
            neo4j = {"ok": False, "error": str(err)}
        embedder = {
            "ok": True,
            "model": self.embedder.model_name,
            "dimension": self.embedder.dimension,
        }
        schema = {"state": self.schema_state, "error": self.schema_error}
        ok = neo4j["ok"] and self.schema_state == "applied"
        return {
            "ok": ok,
            "account": self.account.id,
            "neo4j": neo4j,
            "embedder": embedder,
            "schema": schema,
        }

    async def ensure_schema(self) -> None:
        """Apply the schema, retrying while Neo4j is unreachable."""
        delay = 0.5
        while True:
            try:
                await apply_schema(self.graph, self.embedder.dimension)
            except SchemaDimensionMismatch as err:
                self.schema_state, self.schema_error = "mismatch", str(err)
                return
            except GraphError as err:
                self.schema_error = str(err)
                log.warning("[schema] op=apply warn=retry in_s=%.1f error=%s", delay, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            self.schema_state, self.schema_error = "applied", None
            return

    async def run(self, notifier: Notifier | None = None) -> None:
        """Serve until SIGTERM or SIGINT; tell systemd (``notifier``) once the socket listens."""
        server = RpcServer(self.handlers, errors=(EngineError,))
        listener = await server.serve(self.settings.engine_socket)
        schema_task = asyncio.create_task(self.ensure_schema())
        purge_task = asyncio.create_task(self.purge_loop())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        log.info(
            "[engine] op=ready account=%s socket=%s", self.account.id, self.settings.engine_socket
        )
        notifier = notifier or Notifier.disabled()
        try:
            socket = self.settings.engine_socket
            async with notifier.serving("engine", f"serving RPC on {socket}"):
                await stop.wait()
        finally:
            schema_task.cancel()
            purge_task.cancel()
            listener.close()
            await listener.wait_closed()
            await self.graph.close()
            self._embed_thread.shutdown(wait=True)
            self.settings.engine_socket.unlink(missing_ok=True)
            log.info("[engine] op=stop")

    async def report_write(self, params: dict[str, Any]) -> dict[str, Any]:
        """Write (or update within the same minute) a report."""
        return await reports.write_report(
            self.graph,
            self.caller(params),
            self.embed_one,
            self.embedder.model_name,
            title=str(params["title"]),
            body=str(params["body"]),
            source_workflow=params.get("sourceWorkflow"),
            keywords=params.get("keywords"),
            scope=params.get("scope"),
        )

    async def report_read_latest(self, params: dict[str, Any]) -> dict[str, Any]:
        """The newest reports, optionally matching a keyword."""
        return await reports.read_latest_reports(
            self.graph,
            self.caller(params),
            keyword=params.get("keyword"),
            limit=int(params.get("limit", 1)),
        )

    async def report_list(self, params: dict[str, Any]) -> dict[str, Any]:
        """Report metadata, newest first, paginated."""
        return await reports.list_reports(
            self.graph,
            self.caller(params),
            keyword=params.get("keyword"),
            source_workflow=params.get("sourceWorkflow"),
            page=int(params.get("page", 1)),
            page_size=int(params.get("pageSize", 20)),
        )

    async def conversation_record(self, params: dict[str, Any]) -> dict[str, Any]:
        """Store one message of a conversation."""
        return await conversations.record_message(
            self.graph,
            self.caller(params),
            self.embed_one,
            self.embedder.model_name,
            session_id=str(params["sessionId"]),
            role=str(params["role"]),
            text=str(params["text"]),
            agent_slug=params.get("agentSlug"),
            scope=params.get("scope"),
        )

    async def conversation_search(self, params: dict[str, Any]) -> dict[str, Any]:
        """Search messages: the caller's session if it has one, else the whole account."""
        return await conversations.conversation_search(
            self.graph,
            self.caller(params),
            self.embed_one,
            query=str(params["query"]),
            session_id=params.get("sessionId"),
            limit=int(params.get("limit", 10)),
        )

    async def conversation_messages(self, params: dict[str, Any]) -> dict[str, Any]:
        """One session's messages in order (the caller's session if it has one)."""
        return await conversations.session_messages(
            self.graph,
            self.caller(params),
            session_id=params.get("sessionId"),
            limit=int(params.get("limit", 50)),
        )

    async def ingest(self, params: dict[str, Any]) -> dict[str, Any]:
        """Ingest a document into KnowledgeDocument → Section → Chunk."""
        request = IngestRequest(
            title=str(params["title"]),
            text=str(params["text"]),
            attachment_id=str(params["attachmentId"]),
            scope=params.get("scope"),
            agents=params.get("agents"),
        )
        return await self.ingester.ingest(self.caller(params), request)

    async def reindex(self, params: dict[str, Any]) -> dict[str, Any]:
        """Embed what is missing or stale, streaming progress frames."""

        async def progress(done: int, total: int, skipped: int) -> None:
            await report_progress({"done": done, "total": total, "skipped": skipped})

        result = await reindexing.reindex(
            self.graph,
            self.caller(params),
            self.embed_one,
            self.embedder.model_name,
            labels=params.get("labels"),
            progress=progress,
            dry_run=bool(params.get("dryRun", False)),
        )
        self.searcher.forget_indexes()
        return result

    async def delete(self, params: dict[str, Any]) -> dict[str, Any]:
        """Soft-delete a node (a document with its sections and chunks)."""
        caller = self.caller(params)
        return await lifecycle.soft_delete(
            self.graph, caller, str(params["label"]), str(params["id"])
        )

    async def restore(self, params: dict[str, Any]) -> dict[str, Any]:
        """Undo a soft delete."""
        caller = self.caller(params)
        return await lifecycle.restore(self.graph, caller, str(params["label"]), str(params["id"]))

    async def graph_sample(self, params: dict[str, Any]) -> dict[str, Any]:
        """A guarded sample of the graph for the Graph page."""
        return await explore.sample(
            self.graph,
            self.caller(params).narrow(params.get("scopes")),
            labels=params.get("labels"),
            q=params.get("q"),
            limit=int(params.get("limit") or explore.DEFAULT_SAMPLE),
        )

    async def graph_node(self, params: dict[str, Any]) -> dict[str, Any]:
        """One node and its guarded one-hop neighbourhood ({node: None} if not visible)."""
        found = await explore.neighbourhood(
            self.graph,
            self.caller(params).narrow(params.get("scopes")),
            str(params["id"]),
            params.get("label"),
        )
        return found or {"node": None}

    async def audit_record(self, params: dict[str, Any]) -> dict[str, Any]:
        """Keep one MCP tool call in the audit trail (timestamps are ISO-8601 strings)."""
        return await audit.record_tool_call(
            self.graph,
            self.caller(params),
            tool=str(params["tool"]),
            tool_input=params.get("input"),
            tool_output=params.get("output"),
            is_error=bool(params.get("isError", False)),
            started_at=datetime.fromisoformat(str(params["startedAt"])),
            ended_at=datetime.fromisoformat(str(params["endedAt"])),
            ms=float(params["ms"]),
            session_id=params.get("sessionId"),
            durable=bool(params.get("durable", False)),
            produced=params.get("produced"),
            embed=self.embed_one,
            model_name=self.embedder.model_name,
        )

    async def previous_context(self, params: dict[str, Any]) -> dict[str, Any]:
        """The ``<previous-context>`` block for an admin session of the caller's account."""
        max_chars = int(params.get("maxChars", context.MAX_CHARS))
        return await context.previous_context(self.graph, self.caller(params), max_chars=max_chars)

    async def agent_knowledge(self, params: dict[str, Any]) -> dict[str, Any]:
        """A public agent's knowledge: public nodes tagged for it, then its subscriptions' hits."""
        caller = self.caller(params).narrow(["public"])
        if caller.agent is None:
            raise ValueError("agent.knowledge needs a public agent's caller (caller.agent)")
        limit = max(1, min(int(params.get("limit") or KNOWLEDGE_LIMIT), KNOWLEDGE_LIMIT))
        rows, _ = await self.graph.run(
            _KNOWLEDGE_TAGGED, {**caller.params(), "skip": list(KNOWLEDGE_SKIP), "limit": limit + 1}
        )
        tagged = [
            {
                "id": row["id"],
                "labels": list(row["labels"]),
                "props": _plain(row["props"]),
                "document": {"id": row["documentId"], "title": row["documentTitle"]}
                if row["documentId"]
                else None,
            }
            for row in rows[:limit]
        ]
        seen = {node["id"] for node in tagged}
        subscribed: list[dict[str, Any]] = []
        for keyword in caller.subscriptions:
            # The search engine's own subscription path: its guards, not a copy of them.
            found = await self.searcher._subscriptions(caller, [keyword], limit, False)
            for row in found:
                labels = list(row["labels"])
                if row["id"] in seen or row["props"].get("scope") != "public":
                    continue
                if any(label in KNOWLEDGE_SKIP for label in labels):
                    continue
                seen.add(row["id"])
                subscribed.append(
                    {
                        "id": row["id"],
                        "labels": labels,
                        "props": _plain(row["props"]),
                        "keyword": keyword,
                    }
                )
        return {
            "tagged": tagged,
            "subscribed": subscribed[:limit],
            "truncated": len(rows) > limit or len(subscribed) > limit,
        }

    async def purge_loop(self) -> None:
        """Hard-delete soft-deleted nodes past the grace period, once an hour."""
        while True:
            try:
                await lifecycle.purge(
                    self.graph, self.settings.purge_grace_days, account_id=self.account.id
                )
            except GraphError as err:
                log.warning("[purge] op=run warn=failed error=%s", err)
            await asyncio.sleep(PURGE_INTERVAL)
