"""The memory CLI: ``maxy memory search|ingest|delete|restore``, ``maxy reindex`` and ``maxy
backup create|list|restore``, through the engine's RPC.

These run as the owner (every scope) of ``MAXY_ACCOUNT_ID``: the same calls the admin agent's
MCP tools make, for a person at a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from appliance.core.config import Settings
from appliance.core.fsio import DiskFull
from appliance.core.identity import Caller
from appliance.memory import uploads
from appliance.memory.backup import NAME as backup_names
from appliance.memory.convert import TEXT_KINDS, ConversionRefused, kind_of
from appliance.memory.text import search_text
from appliance.rpc.client import RpcClient
from appliance.rpc.protocol import RemoteError

LONG_CALL_TIMEOUT = 120.0
BACKUP_TIMEOUT = 3600.0  # between two progress frames: packing a large folder sends none


def _caller(settings: Settings) -> dict[str, Any]:
    return Caller(account_id=settings.require_account_id()).to_wire()


def _call(
    settings: Settings,
    method: str,
    params: dict[str, Any],
    timeout: float = LONG_CALL_TIMEOUT,
    **kw: Any,
) -> Any:
    client = RpcClient(settings.engine_socket, timeout=timeout)
    return asyncio.run(client.call(method, {**params, "caller": _caller(settings)}, **kw))


def _explain(result: dict[str, Any]) -> str:
    lines = []
    for rank, item in enumerate(result["results"], 1):
        trace = item.get("trace") or {}
        name = item["props"].get("name") or item["props"].get("title") or item["id"]
        boosts = ", ".join(f"{k} x{v:.3f}" for k, v in (trace.get("boosts") or {}).items())
        lines.append(
            f"{rank:>2}. {name}  score={item['score']:.4f}  vector={_num(trace.get('vector'))} "
            f"keyword={_num(trace.get('keyword'))} (bm25 {_num(trace.get('keywordRaw'))}) "
            f"fused={_num(trace.get('fused'))}" + (f"  boosts: {boosts}" if boosts else "")
        )
        lines.extend(f"      {decision}" for decision in trace.get("decisions") or [])
    counts = " ".join(f"{k}={v}" for k, v in result.get("counts", {}).items())
    lines.append(f"\n{counts} ms={result.get('ms')}")
    return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def search(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy memory search``."""
    params: dict[str, Any] = {"query": args.query, "limit": args.limit}
    if args.mode:
        params["mode"] = args.mode
    if args.labels:
        params["labels"] = args.labels.split(",")
    result = _call(settings, "search", params)
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    elif args.explain:
        print(search_text(result))
        print("\n--- score trace ---")
        print(_explain(result))
    else:
        print(search_text(result))
    return 0


def ingest(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy memory ingest FILE``: Markdown and text as they are; HTML, PDF and Word files
    converted and kept as an upload (``document.ingest-file``)."""
    path = Path(args.file)
    kind = kind_of(path.name)
    if kind is not None and kind not in TEXT_KINDS.values():
        return _ingest_file(settings, args, path)
    text = path.read_text(encoding="utf-8", errors="replace")
    params: dict[str, Any] = {
        "title": args.title or path.stem,
        "text": text,
        # The same file ingested again replaces its earlier version.
        "attachmentId": args.attachment_id or f"file:{path.resolve()}",
    }
    if args.scope:
        params["scope"] = args.scope
    result = _call(settings, "ingest", params)
    print(json.dumps(result, indent=2))
    return 0


def _ingest_file(settings: Settings, args: argparse.Namespace, path: Path) -> int:
    account = settings.require_account_id()
    limits = uploads.Limits(settings.upload_max_mb * 1024 * 1024, settings.upload_types)
    staged = uploads.new_staged(settings.accounts_dir, account)
    try:
        limits.check_name(path.name)
        uploads.stage_copy(path, staged, limits, path.name)
        params: dict[str, Any] = {"staged": staged.name, "fileName": path.name}
        if args.title:
            params["title"] = args.title
        if args.scope:
            params["scope"] = args.scope
        result = _call(settings, "document.ingest-file", params, on_progress=_bar)
    except (ConversionRefused, RemoteError, DiskFull) as err:
        sys.stderr.write(f"\n{path.name} was not ingested: {err}\n")
        return 2
    finally:
        staged.unlink(missing_ok=True)
    sys.stderr.write("\n")
    print(json.dumps(result, indent=2))
    return 0


def _bar(event: dict[str, Any]) -> None:
    done, total = int(event.get("done", 0)), int(event.get("total", 0)) or 1
    filled = int(30 * done / total)
    sys.stderr.write(f"\r{event.get('stage', ''):<10} [{'#' * filled}{'.' * (30 - filled)}]")
    sys.stderr.flush()


def forget(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy memory delete|restore ID``: soft-delete a node (restorable for the grace period),
    or bring it back."""
    method = "delete" if args.memory_command == "delete" else "restore"
    try:
        result = _call(settings, method, {"label": args.label, "id": args.id})
    except RemoteError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    print(json.dumps(result, indent=2, default=str))
    if method == "delete" and result.get("changed"):
        sys.stderr.write(
            f"Deleted; `maxy memory restore {args.id} --label {args.label}` brings it back "
            f"within {settings.purge_grace_days} days (MAXY_PURGE_GRACE_DAYS).\n"
        )
    return 0


def reindex(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy reindex``: embed what is missing or stale, with a progress bar."""
    params: dict[str, Any] = {"dryRun": args.dry_run}
    if args.labels:
        params["labels"] = args.labels.split(",")

    def bar(event: dict[str, Any]) -> None:
        done, total = int(event.get("done", 0)), int(event.get("total", 0)) or 1
        filled = int(30 * done / total)
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} "
            f"skipped={event.get('skipped', 0)}"
        )
        sys.stderr.flush()

    result = _call(settings, "reindex", params, on_progress=bar)
    sys.stderr.write("\n")
    print(json.dumps(result, indent=2))
    return 0 if not result.get("skipped") else 3


def _size(count: int) -> str:
    return f"{count / 1024**2:,.1f} MB"


def backup(settings: Settings, args: argparse.Namespace) -> int:
    """``maxy backup create|list|restore``: archives of the graph, the accounts' files and (if
    chosen) keys, kept in MAXY_BACKUP_DIR."""
    try:
        if args.backup_command == "list":
            result = _call(settings, "backup.list", {})
            if args.json:
                print(json.dumps(result, indent=2))
                return 0
            for item in result["backups"]:
                what = item.get("error") or (
                    f"{item.get('nodes')} nodes, {item.get('relationships')} relationships"
                    + (", keys" if item.get("keys") else "")
                )
                print(f"{item['name']}  {_size(item['bytes']):>10}  {what}")
            if not result["backups"]:
                print(f"No backups yet in {result['folder']}.")
            return 0
        if args.backup_command == "create":
            params = {"includeKeys": True} if args.keys else {}
            result = _call(
                settings, "backup.create", params, timeout=BACKUP_TIMEOUT, on_progress=_bar
            )
        else:
            if not args.yes:
                sys.stderr.write(
                    f"Restoring {args.archive} replaces the memory graph and the files of every "
                    "account it holds with the backup's. Run again with --yes to do it.\n"
                )
                return 2
            name = args.archive
            if not backup_names.match(name):
                name = str(Path(name).resolve())
            result = _call(
                settings,
                "backup.restore",
                {"name": name},
                timeout=BACKUP_TIMEOUT,
                on_progress=_bar,
            )
    except RemoteError as err:
        sys.stderr.write(f"\n{err}\n")
        return 2
    sys.stderr.write("\n")
    print(json.dumps(result, indent=2))
    return 0


def add_parsers(sub: Any) -> None:
    """Register ``memory``, ``reindex`` and ``backup`` on the ``maxy`` parser."""
    memory = sub.add_parser("memory", help="search, ingest, delete or restore in the memory graph")
    memory_sub = memory.add_subparsers(dest="memory_command", required=True)
    find = memory_sub.add_parser("search", help="hybrid search, as the admin agent sees it")
    find.add_argument("query")
    find.add_argument("--limit", type=int, default=10)
    find.add_argument("--mode", choices=["weighted", "rrf", "convex"])
    find.add_argument("--labels", help="comma-separated labels")
    find.add_argument("--explain", action="store_true", help="print each result's score trace")
    find.add_argument("--json", action="store_true")
    find.set_defaults(func=search)
    load = memory_sub.add_parser(
        "ingest", help="ingest a Markdown, text, HTML, PDF or Word (.docx) file"
    )
    load.add_argument("file")
    load.add_argument("--title")
    load.add_argument("--attachment-id", help="default: file:<absolute path>")
    load.add_argument("--scope", choices=["public", "shared", "admin"])
    load.set_defaults(func=ingest)
    for name, what in (
        ("delete", "forget a node (a document whole): soft, restorable for the grace period"),
        ("restore", "bring back a deleted node within the grace period"),
    ):
        one = memory_sub.add_parser(name, help=what)
        one.add_argument("id")
        one.add_argument(
            "--label", default="KnowledgeDocument", help="its label (default: %(default)s)"
        )
        one.set_defaults(func=forget)
    again = sub.add_parser("reindex", help="embed nodes whose embedding is missing or stale")
    again.add_argument("--dry-run", action="store_true", help="only count what would change")
    again.add_argument("--labels", help="comma-separated labels")
    again.set_defaults(func=reindex)
    keep = sub.add_parser("backup", help="back up, list or restore the graph and accounts' files")
    keep_sub = keep.add_subparsers(dest="backup_command", required=True)
    make = keep_sub.add_parser("create", help="back up now (the engine keeps answering)")
    make.add_argument("--keys", action="store_true", help="include the keys (default: setting)")
    make.set_defaults(func=backup)
    show = keep_sub.add_parser("list", help="the backups kept, newest first")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=backup)
    back = keep_sub.add_parser("restore", help="verify a backup whole, then restore it")
    back.add_argument("archive", help="a name from `maxy backup list`, or an archive's path")
    back.add_argument("--yes", action="store_true", help="replace the graph and files")
    back.set_defaults(func=backup)
