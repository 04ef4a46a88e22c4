"""``maxy engine``: load the embedding model and the Neo4j pool once, serve them over RPC.

Start-up order: the model loads first (a missing model is fatal: nothing works without it), the
RPC socket opens, then the schema is applied in the background, retried with backoff while Neo4j
is unreachable. ``health`` answers at once whatever Neo4j's state, so the edge can report it.

RPC methods: one request and one response type each, declared once in
:mod:`appliance.rpc.engine` (the README's table of methods is generated from it).

``caller`` (account, scopes, agent, session) is set by the calling process from its own
environment; a caller of another account is refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import signal
from collections.abc import Coroutine, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import numpy as np

from appliance.core.accounts import Account, AccountError, owner_zone
from appliance.core.clock import utc_now
from appliance.core.config import Settings
from appliance.core.documents import keep_text
from appliance.core.fsio import DiskFull, free_bytes, low_on_space
from appliance.core.identity import Caller, GuardError
from appliance.core.systemd import Notifier
from appliance.memory import (
    archive,
    audit,
    backup,
    briefings,
    channels,
    context,
    conversations,
    explore,
    lifecycle,
    reports,
    uploads,
    versions,
)
from appliance.memory import reindex as reindexing
from appliance.memory.bulk import BulkEmbeds
from appliance.memory.contacts import Contacts
from appliance.memory.embedder import Embedder
from appliance.memory.errors import (
    BackupError,
    EngineError,
    GraphError,
    SchemaDimensionMismatch,
    WriteRejected,
    rejected,
)
from appliance.memory.graph import Graph
from appliance.memory.guards import guard
from appliance.memory.housekeeping import Housekeeping
from appliance.memory.ingest import Ingester, IngestRequest
from appliance.memory.projects import Projects
from appliance.memory.render import render_structured
from appliance.memory.scheduling import Scheduling
from appliance.memory.schema import apply_schema
from appliance.memory.search import Expander, Searcher, SearchRequest
from appliance.memory.tasks import Tasks
from appliance.memory.work_rpc import WorkHandlers, fields
from appliance.memory.write import Edge, Writer, WriteRequest
from appliance.rpc import engine as api
from appliance.rpc.calls import Called
from appliance.rpc.protocol import BadParams
from appliance.rpc.server import Handler, RpcServer, report_progress

log = logging.getLogger(__name__)
_T = TypeVar("_T")

HEALTH_QUERY_TIMEOUT = 2.0
BACKUP_TICK = 60.0  # how often the housekeeping loop looks whether the nightly backup is due
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


async def _progress_frames(stage: str, done: int, total: int) -> None:
    """Stream an ingest's progress to the caller as RPC progress frames."""
    await report_progress({"stage": stage, "done": done, "total": total})


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


class Engine:
    """The retrieval engine process: embedder + graph + RPC handlers.

    ``expander`` paraphrases queries for multi-query expansion (the role that starts the
    engine passes the agents' one in; None: the original query only).
    """

    def __init__(
        self,
        settings: Settings,
        account: Account,
        embedder: Embedder,
        expander: Expander | None = None,
    ) -> None:
        self.settings = settings
        self.account = account
        self.embedder = embedder
        self.graph = Graph(
            settings.neo4j_address(),
            settings.neo4j_user,
            read_password(settings),
            store=settings.neo4j_home_path,  # absent when Neo4j runs elsewhere
        )
        # A llama.cpp context is not thread-safe: one worker thread per context of the Embedder,
        # so a single embed (a query, a write) never queues behind a bulk list.
        self._embed_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self._bulk_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed-bulk")
        self.bulk_embeds = BulkEmbeds(embedder.embed_many, self._bulk_thread)
        self.schema_state = "pending"
        self.schema_error: str | None = None
        self.schema_settled = asyncio.Event()
        self.housekeeping = Housekeeping(
            self.graph,
            account.id,
            settings.accounts_dir,
            settings.purge_grace_days,
            settings.graph_audit_interval,
        )
        self.searcher = Searcher(self.graph, self.embed_query, expander)
        self.writer = Writer(self.graph, self.embed_one, embedder.model_name)
        self.account_dir = settings.accounts_dir / account.id
        self.ingester = Ingester(
            self.graph,
            self.embed_bulk,
            embedder.model_name,
            keep=lambda doc_id, text: keep_text(self.account_dir, doc_id, text),
        )
        self.scheduling = Scheduling(
            self.graph, self.embed_one, embedder.model_name, self.owner_zone, utc_now
        )
        self.contacts = Contacts(self.graph, self.writer)
        self.tasks = Tasks(
            self.graph, self.embed_one, embedder.model_name, self.owner_zone, utc_now
        )
        self.projects = Projects(self.tasks)
        self.work_rpc = WorkHandlers(
            self.graph, self.projects, self.tasks, self.scheduling, self.caller
        )
        self._backup_lock = asyncio.Lock()
        self._started = utc_now()

    @property
    def handlers(self) -> dict[str, Handler]:
        """RPC method table: each typed handler behind its method's request/response check."""
        typed: dict[str, Handler] = {
            api.HEALTH.name: api.HEALTH.handler(self.health),
            api.EMBED.name: api.EMBED.handler(self.embed),
            api.SEARCH.name: api.SEARCH.handler(self.search),
            api.WRITE.name: api.WRITE.handler(self.write),
            api.REPORT_WRITE.name: api.REPORT_WRITE.handler(self.report_write),
            api.REPORT_READ_LATEST.name: api.REPORT_READ_LATEST.handler(self.report_read_latest),
            api.REPORT_LIST.name: api.REPORT_LIST.handler(self.report_list),
            api.CONVERSATION_RECORD.name: api.CONVERSATION_RECORD.handler(self.conversation_record),
            api.CONVERSATION_SEARCH.name: api.CONVERSATION_SEARCH.handler(self.conversation_search),
            api.CONVERSATION_MESSAGES.name: api.CONVERSATION_MESSAGES.handler(
                self.conversation_messages
            ),
            api.INGEST.name: api.INGEST.handler(self.ingest),
            api.REINDEX.name: api.REINDEX.handler(self.reindex),
            api.DELETE.name: api.DELETE.handler(self.delete),
            api.RESTORE.name: api.RESTORE.handler(self.restore),
            api.GRAPH_SAMPLE.name: api.GRAPH_SAMPLE.handler(self.graph_sample),
            api.GRAPH_NODE.name: api.GRAPH_NODE.handler(self.graph_node),
            api.AUDIT_RECORD.name: api.AUDIT_RECORD.handler(self.audit_record),
            api.AGENT_KNOWLEDGE.name: api.AGENT_KNOWLEDGE.handler(self.agent_knowledge),
            api.PREVIOUS_CONTEXT.name: api.PREVIOUS_CONTEXT.handler(self.previous_context),
            api.BRIEFING_WRITE.name: api.BRIEFING_WRITE.handler(self.briefing_write),
            # contacts
            api.CONTACT_CREATE.name: api.CONTACT_CREATE.handler(self.contact_create),
            api.CONTACT_LOOKUP.name: api.CONTACT_LOOKUP.handler(self.contact_lookup),
            api.CONTACT_UPDATE.name: api.CONTACT_UPDATE.handler(self.contact_update),
            api.CONTACT_LIST.name: api.CONTACT_LIST.handler(self.contact_list),
            # documents: uploaded files and versions
            api.INGEST_FILE.name: api.INGEST_FILE.handler(self.ingest_file),
            api.DOCUMENT_VERSIONS.name: api.DOCUMENT_VERSIONS.handler(self.document_versions),
            api.DOCUMENT_VERSION.name: api.DOCUMENT_VERSION.handler(self.document_version),
            api.RESTORE_VERSION.name: api.RESTORE_VERSION.handler(self.restore_version),
            # backups
            api.BACKUP_CREATE.name: api.BACKUP_CREATE.handler(self.backup_create),
            api.BACKUP_LIST.name: api.BACKUP_LIST.handler(self.backup_list),
            api.BACKUP_RESTORE.name: api.BACKUP_RESTORE.handler(self.backup_restore),
            **self.work_rpc.handlers,
            # channels
            api.CHANNEL_RECORD.name: api.CHANNEL_RECORD.handler(self.channel_record),
            api.CHANNEL_UPDATE.name: api.CHANNEL_UPDATE.handler(self.channel_update),
            api.CHANNEL_PENDING.name: api.CHANNEL_PENDING.handler(self.channel_pending),
            api.CHANNEL_CHATS.name: api.CHANNEL_CHATS.handler(self.channel_chats),
            api.CHANNEL_ARCHIVE.name: api.CHANNEL_ARCHIVE.handler(self.channel_archive),
        }
        assert set(typed) == set(api.BY_NAME), "every method of the contract has a handler"
        return typed

    async def embed_one(self, text: str) -> list[float]:
        """Embed one text (a write's) on the embedding thread, on every core."""
        loop = asyncio.get_running_loop()
        vector = await loop.run_in_executor(self._embed_thread, self.embedder.embed, text)
        return [float(x) for x in vector]

    async def embed_query(self, text: str) -> list[float]:
        """Embed a search's query on the embedding thread, on half the cores: Neo4j runs the
        search's keyword statement meanwhile (embedder.py, "Threads")."""
        loop = asyncio.get_running_loop()
        embed = functools.partial(self.embedder.embed, shared_cpu=True)
        vector = await loop.run_in_executor(self._embed_thread, embed, text)
        return [float(x) for x in vector]

    async def embed_bulk(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed many texts (an ingest, a reindex) on the bulk thread, together with those of
        other bulk callers (memory/bulk.py): a query's single embed never waits behind them."""
        return [vector.tolist() for vector in await self.bulk_embeds(texts)]

    def caller(self, request: Called) -> Caller:
        """The request's caller; it must belong to this engine's account."""
        try:
            caller = Caller.from_wire(request.caller.model_dump())
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

    def search_request(self, call: api.SearchRequest, caller: Caller) -> SearchRequest:
        """A search call with every knob it leaves unset taken from the settings."""
        s = self.settings

        def given(value: _T | None, default: _T) -> _T:
            return default if value is None else value

        return SearchRequest(
            query=call.query,
            labels=call.labels,
            limit=min(call.limit or s.search_limit, 100),
            mode=call.mode or s.search_mode,  # type: ignore[arg-type]
            vector_weight=given(call.vector_weight, s.search_vector_weight),
            keyword_weight=given(call.keyword_weight, s.search_keyword_weight),
            rrf_k=given(call.rrf_k, s.search_rrf_k),
            threshold=call.threshold,
            boosts=given(call.boosts, s.search_boosts),
            expand_hops=min(call.expand_hops, 1),
            fields=call.fields,
            retrieval_class=call.retrieval_class,
            routing=given(call.routing, s.search_routing),
            expand_queries=given(call.expand_queries, s.search_expansion),
            dedup=given(call.dedup, s.search_dedup),
            per_document=call.per_document,
            subscriptions=caller.subscriptions,
        )

    async def search(self, call: api.SearchRequest) -> api.SearchResponse:
        """Hybrid search for a caller."""
        caller = self.caller(call).narrow(call.scopes)
        result = await self.searcher.search(caller, self.search_request(call, caller))
        return api.SearchResponse(
            results=render_structured(result.results),
            counts=result.counts,
            ms=round(result.ms, 1),
            vector_only=result.vector_only,
            keyword_only=result.keyword_only,
        )

    async def write(self, call: api.WriteRequest) -> dict[str, Any]:
        """Create or merge one node for a caller."""
        caller = self.caller(call)
        edges = [Edge(e.type, e.to_id, e.to_label, e.direction) for e in call.edges]
        request = WriteRequest(
            label=call.label,
            properties=dict(call.properties),
            id=call.id,
            edges=edges,
            produced_by=call.produced_by_task_id,
            scope=call.scope,
            agents=call.agents,
        )
        return await self.writer.write(caller, request)

    async def embed(self, call: api.EmbedRequest) -> api.EmbedResponse:
        """Embed a list of texts; vectors come back as packed float32 bytes."""
        vectors = await self.bulk_embeds(list(call.texts))
        packed = np.stack(vectors).astype("<f4").tobytes() if vectors else b""
        return api.EmbedResponse(
            model=self.embedder.model_name, dimension=self.embedder.dimension, vectors=packed
        )

    async def health(self, call: api.HealthRequest) -> dict[str, Any]:
        """Report Neo4j, the embedder, the schema and the data partition's free space."""
        try:
            ms = await asyncio.wait_for(self.graph.ping(), HEALTH_QUERY_TIMEOUT)
            neo4j: dict[str, Any] = {"ok": True, "ms": round(ms, 1)}
        except TimeoutError:
            neo4j = {"ok": False, "error": f"no answer within {HEALTH_QUERY_TIMEOUT:.0f} s"}
        except (GraphError, DiskFull) as err:
            neo4j = {"ok": False, "error": str(err), "code": err.code}
        embedder = {
            "ok": True,
            "model": self.embedder.model_name,
            "dimension": self.embedder.dimension,
        }
        schema = {"state": self.schema_state, "error": self.schema_error}
        # Informs (a full disk still serves reads); a write refused for it says disk-full.
        disk = {
            "ok": not low_on_space(self.settings.data_dir),
            "freeBytes": free_bytes(self.settings.data_dir),
        }
        ok = neo4j["ok"] and self.schema_state == "applied"
        return {
            "ok": ok,
            "account": self.account.id,
            "neo4j": neo4j,
            "embedder": embedder,
            "schema": schema,
            "disk": disk,
            "audit": self.housekeeping.audit,
        }

    async def ensure_schema(self) -> None:
        """Apply the schema, retrying while Neo4j is unreachable."""
        delay = 0.5
        while True:
            try:
                await apply_schema(self.graph, self.embedder.dimension)
            except SchemaDimensionMismatch as err:
                self.schema_state, self.schema_error = "mismatch", str(err)
                self.schema_settled.set()
                return
            except GraphError as err:
                self.schema_error = str(err)
                log.warning("[schema] op=apply warn=retry in_s=%.1f error=%s", delay, err)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            self.schema_state, self.schema_error = "applied", None
            await self.warm()
            self.schema_settled.set()
            return

    async def warm(self) -> None:
        """Build the owner's <previous-context> once, so Neo4j has planned its queries before
        the first admin spawn asks (planning them takes seconds on a Pi; a spawn waits 3 s)."""
        try:
            await context.previous_context(self.projects, Caller(account_id=self.account.id))
        except EngineError as err:
            log.warning("[engine] op=warm warn=failed error=%s", err)

    async def run(self, notifier: Notifier | None = None) -> None:
        """Serve until SIGTERM or SIGINT; tell systemd (``notifier``) once the socket listens."""
        server = RpcServer(self.handlers, errors=(EngineError, DiskFull))
        listener = await server.serve(self.settings.engine_socket)
        schema_task = asyncio.create_task(self.ensure_schema())
        housekeeping = asyncio.create_task(
            self.housekeeping.run(
                self.schema_settled, extra=[("backup", BACKUP_TICK, self.backup_if_due)]
            )
        )
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
            housekeeping.cancel()
            listener.close()
            await listener.wait_closed()
            await self.graph.close()
            self._embed_thread.shutdown(wait=True)
            self._bulk_thread.shutdown(wait=True)
            self.settings.engine_socket.unlink(missing_ok=True)
            log.info("[engine] op=stop")

    async def report_write(self, call: api.ReportWriteRequest) -> dict[str, Any]:
        """Write (or update within the same minute) a report."""
        return await reports.write_report(
            self.graph,
            self.caller(call),
            self.embed_one,
            self.embedder.model_name,
            title=call.title,
            body=call.body,
            source_workflow=call.source_workflow,
            keywords=call.keywords,
            scope=call.scope,
        )

    async def report_read_latest(self, call: api.ReportReadLatestRequest) -> dict[str, Any]:
        """The newest reports, optionally matching a keyword."""
        return await reports.read_latest_reports(
            self.graph, self.caller(call), keyword=call.keyword, limit=call.limit
        )

    async def report_list(self, call: api.ReportListRequest) -> dict[str, Any]:
        """Report metadata, newest first, paginated."""
        return await reports.list_reports(
            self.graph,
            self.caller(call),
            keyword=call.keyword,
            source_workflow=call.source_workflow,
            page=call.page,
            page_size=call.page_size,
        )

    async def conversation_record(self, call: api.ConversationRecordRequest) -> dict[str, Any]:
        """Store one message of a conversation."""
        return await conversations.record_message(
            self.graph,
            self.caller(call),
            self.embed_one,
            self.embedder.model_name,
            session_id=call.session_id,
            role=call.role,
            text=call.text,
            agent_slug=call.agent_slug,
            scope=call.scope,
            key=call.key,
        )

    async def conversation_search(self, call: api.ConversationSearchRequest) -> dict[str, Any]:
        """Search messages: the caller's session if it has one, else the whole account."""
        return await conversations.conversation_search(
            self.graph,
            self.caller(call),
            self.embed_one,
            query=call.query,
            session_id=call.session_id,
            limit=call.limit,
        )

    async def conversation_messages(self, call: api.ConversationMessagesRequest) -> dict[str, Any]:
        """One session's messages in order (the caller's session if it has one)."""
        return await conversations.session_messages(
            self.graph, self.caller(call), session_id=call.session_id, limit=call.limit
        )

    async def ingest(self, call: api.IngestRequest) -> dict[str, Any]:
        """Ingest a document into KnowledgeDocument → Section → Chunk."""
        request = IngestRequest(
            title=call.title,
            text=call.text,
            attachment_id=call.attachment_id,
            scope=call.scope,
            agents=call.agents,
        )
        return await self.ingester.ingest(self.caller(call), request)

    async def reindex(self, call: api.ReindexRequest) -> dict[str, Any]:
        """Embed what is missing or stale, streaming progress frames."""

        async def progress(done: int, total: int, skipped: int) -> None:
            await report_progress({"done": done, "total": total, "skipped": skipped})

        result = await reindexing.reindex(
            self.graph,
            self.caller(call),
            self.embed_bulk,
            self.embedder.model_name,
            labels=call.labels,
            progress=progress,
            dry_run=call.dry_run,
        )
        self.searcher.forget_indexes()
        if not call.dry_run:
            try:  # so health shows at once what the reindex cleared
                await self.housekeeping.run_audit()
            except GraphError as err:
                log.warning("[graph-audit] op=run warn=failed error=%s", err)
        return result

    async def delete(self, call: api.NodeRef) -> dict[str, Any]:
        """Soft-delete a node (a document with its sections and chunks)."""
        return await lifecycle.soft_delete(self.graph, self.caller(call), call.label, call.id)

    async def restore(self, call: api.NodeRef) -> dict[str, Any]:
        """Undo a soft delete."""
        return await lifecycle.restore(self.graph, self.caller(call), call.label, call.id)

    # --- documents: uploaded files and versions ------------------------------------------

    @property
    def upload_limits(self) -> uploads.Limits:
        """The upload size and type limits of the settings."""
        s = self.settings
        return uploads.Limits(s.upload_max_mb * 1024 * 1024, s.upload_types)

    async def ingest_file(self, call: api.IngestFileRequest) -> dict[str, Any]:
        """Convert a staged upload, keep it as the attachment, ingest it (progress frames)."""
        return await uploads.ingest_file(
            self.graph,
            self.ingester,
            self.settings.accounts_dir,
            self.caller(call),
            self.upload_limits,
            staged=call.staged,
            file_name=call.file_name,
            title=call.title,
            scope=call.scope,
            agents=call.agents,
            progress=_progress_frames,
        )

    async def document_versions(self, call: api.DocumentRef) -> dict[str, Any]:
        """A document's versions, newest first."""
        return await versions.listing(self.graph, self.caller(call), call.id)

    async def document_version(self, call: api.VersionRequest) -> dict[str, Any]:
        """One version's text and its diff from another."""
        return await versions.show(
            self.graph, self.caller(call), call.id, call.number, call.against, call.max_chars
        )

    async def restore_version(self, call: api.RestoreVersionRequest) -> dict[str, Any]:
        """Ingest an earlier version's text again: the document's newest version."""
        caller = self.caller(call)
        old = await versions.text_of(self.graph, caller, call.id, call.number)
        document = old["document"]
        request = IngestRequest(
            title=old["title"] or document["title"] or "",
            text=old["text"],
            attachment_id=document["attachmentId"],
            scope=document["scope"],
            agents=document["agents"],
            source="restore",
            file={k: old[k] for k in versions.FILE_KEYS if old.get(k) is not None} or None,
            restored_from=call.number,
        )
        done = await self.ingester.ingest(caller, request, _progress_frames)
        return {**done, "restoredFrom": call.number}

    # --- contacts ------------------------------------------------------------------------

    async def contact_create(self, call: api.ContactCreateRequest) -> dict[str, Any]:
        """Create a contact, or merge into the one with the same email."""
        return await self.contacts.create(
            self.caller(call), call.fields(), allow_duplicate=call.allow_duplicate
        )

    async def contact_lookup(self, call: api.ContactLookupRequest) -> dict[str, Any]:
        """Contacts matching an email, a telephone number or a name."""
        return await self.contacts.lookup(
            self.caller(call),
            email=call.email,
            telephone=call.telephone,
            name=call.name,
            limit=call.limit,
        )

    async def contact_update(self, call: api.ContactUpdateRequest) -> dict[str, Any]:
        """Change some of a contact's details."""
        return await self.contacts.update(self.caller(call), call.id, call.fields())

    async def contact_list(self, call: api.ContactListRequest) -> dict[str, Any]:
        """Every contact by name, one page at a time."""
        return await self.contacts.listing(
            self.caller(call), page=call.page, page_size=call.page_size
        )

    # --- channels (appliance.memory.channels) -------------------------------------------

    async def channel_record(self, call: api.ChannelRecordRequest) -> dict[str, Any]:
        """Keep one channel message, once per key."""
        return await channels.record(
            self.graph, self.caller(call), self.embed_one, self.embedder.model_name, call
        )

    async def channel_update(self, call: api.ChannelUpdateRequest) -> dict[str, Any]:
        """Move an inbound channel message along its handling."""
        return await channels.update(self.graph, self.caller(call), call)

    async def channel_pending(self, call: api.ChannelPendingRequest) -> dict[str, Any]:
        """Inbound messages whose handling has not ended."""
        return await channels.pending(self.graph, self.caller(call), call.channel, call.limit)

    async def channel_chats(self, call: api.ChannelChatsRequest) -> dict[str, Any]:
        """A channel's chats, newest first."""
        return await channels.chats(self.graph, self.caller(call), call.channel, call.limit)

    async def channel_archive(self, call: api.ChannelArchiveRequest) -> dict[str, Any]:
        """One session of a chat export, kept once."""
        return await archive.keep_session(
            self.graph, self.caller(call), self.embed_one, self.embedder.model_name, call
        )

    async def graph_sample(self, call: api.GraphSampleRequest) -> dict[str, Any]:
        """A guarded sample of the graph for the Graph page; a text narrows it to what search
        finds for that text (the Data page's search: the settings' knobs, no expansion, every
        node ranked on its own)."""
        caller = self.caller(call).narrow(call.scopes)

        async def matches(text: str, labels: list[str] | None, limit: int) -> list[str]:
            asked = api.SearchRequest(
                query=text, labels=labels, limit=limit, expand_hops=0, per_document=False
            )
            found = await self.searcher.search(caller, self.search_request(asked, caller))
            return [hit.node_id for hit in found.results]

        return await explore.sample(
            self.graph,
            caller,
            labels=call.labels,
            q=call.q,
            limit=call.limit or explore.DEFAULT_SAMPLE,
            internal_records=call.internal,
            matches=matches,
        )

    async def graph_node(self, call: api.GraphNodeRequest) -> dict[str, Any]:
        """One node and its guarded one-hop neighbourhood ({node: None} if not visible)."""
        found = await explore.neighbourhood(
            self.graph, self.caller(call).narrow(call.scopes), call.id, call.label
        )
        return found or {"node": None}

    async def audit_record(self, call: api.AuditRecordRequest) -> dict[str, Any]:
        """Keep one MCP tool call in the audit trail (timestamps are ISO-8601 strings)."""
        return await audit.record_tool_call(
            self.graph,
            self.caller(call),
            tool=call.tool,
            tool_input=call.input,
            tool_output=call.output,
            is_error=call.is_error,
            started_at=call.started_at,
            ended_at=call.ended_at,
            ms=call.ms,
            session_id=call.session_id,
            durable=call.durable,
            produced=call.produced,
            embed=self.embed_one,
            model_name=self.embedder.model_name,
        )

    async def previous_context(self, call: api.PreviousContextRequest) -> dict[str, Any]:
        """The ``<previous-context>`` block for an admin session of the caller's account."""
        max_chars = context.MAX_CHARS if call.max_chars is None else call.max_chars
        caller = self.caller(call)
        briefing = await briefings.latest_briefing(self.graph, caller)
        return await context.previous_context(
            self.projects, caller, max_chars=max_chars, briefing=briefing
        )

    async def briefing_write(self, call: api.BriefingWriteRequest) -> dict[str, Any]:
        """Keep the caller's session's compaction briefing."""
        return await briefings.write_briefing(self.graph, self.caller(call), fields(call))

    async def agent_knowledge(self, call: api.AgentKnowledgeRequest) -> dict[str, Any]:
        """A public agent's knowledge: public nodes tagged for it, then its subscriptions' hits."""
        caller = self.caller(call).narrow(["public"])
        if caller.agent is None:
            raise BadParams("agent.knowledge needs a public agent's caller (caller.agent)")
        limit = max(1, min(call.limit or KNOWLEDGE_LIMIT, KNOWLEDGE_LIMIT))
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

    # --- the owner's time zone (events, reminders and tasks are in it) ------------------

    def owner_zone(self) -> ZoneInfo:
        """The owner's time zone, read from account.json at each call."""
        try:
            return owner_zone(self.settings.accounts_dir, self.account.id)
        except AccountError as err:
            raise rejected("scheduling", "owner-zone", str(err)) from err

    # --- backups (appliance.memory.backup) ------------------------------------------------

    async def backup_create(self, call: api.BackupCreateRequest) -> dict[str, Any]:
        """Write a backup archive now (one at a time), streaming its progress."""
        self.caller(call)
        return await self._exclusive(
            backup.create(
                self.graph, self.settings, include_keys=call.include_keys, progress=_progress_frames
            )
        )

    async def backup_list(self, call: api.BackupListRequest) -> dict[str, Any]:
        """The archives kept, newest first."""
        self.caller(call)
        folder = self.settings.backups_path
        return {
            "backups": await asyncio.to_thread(backup.listing, folder),
            "folder": str(folder),
            "keep": self.settings.backup_keep,
            "schedule": self.settings.backup_at,
        }

    async def backup_restore(self, call: api.BackupRestoreRequest) -> dict[str, Any]:
        """Verify an archive whole, then replace its accounts' graph and files."""
        self.caller(call)
        path = backup.resolve(self.settings, call.name)
        return await self._exclusive(
            backup.restore(self.graph, self.settings, path, progress=_progress_frames)
        )

    async def _exclusive(self, work: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
        if self._backup_lock.locked():
            work.close()
            raise BackupError("A backup or restore is already running; try again when it ends.")
        async with self._backup_lock:
            return await work

    async def backup_if_due(self) -> None:
        """Make the nightly backup when its time has come (MAXY_BACKUP_AT)."""
        kept = backup.archives(self.settings.backups_path)
        newest = backup.created_at(kept[0].name) if kept else None
        since = max(newest, self._started) if newest else self._started
        try:
            zone = self.owner_zone()
        except EngineError:
            zone = ZoneInfo("UTC")
        if not backup.due(self.settings.backup_at, zone, utc_now(), since):
            return
        try:
            await self._exclusive(backup.create(self.graph, self.settings))
        except EngineError as err:
            log.error("[backup] op=scheduled warn=failed error=%s", err)
        self._started = utc_now()  # a failed night is not retried every minute
