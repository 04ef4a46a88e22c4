"""The memory plugin's ``memory-ingest-file``: a file on this device into memory.

The file (a path the session names; relative paths are from the session's folder) is copied
into the account's staging folder and handed to the engine's ``document.ingest-file``, which
converts it (Markdown, text, HTML, PDF, Word), keeps it as the document's attachment and ingests
it, all or nothing (:mod:`appliance.memory.uploads`). Files under the data directory are
refused unless they are the account's own: never the keys, the Neo4j store or another account.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from appliance.core.fsio import DiskFull
from appliance.mcp.tool import Tool, ToolContext, ToolError
from appliance.rpc import engine as api

_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "The file: absolute, or relative to this session's folder.",
        },
        "title": {"type": "string", "description": "Default: the document's own title."},
        "scope": {"type": "string", "enum": ["public", "shared", "admin"]},
        "agents": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def readable(context: ToolContext, raw: Any) -> Path:
    """The file the call names, refused when it is missing or inside what is not the account's."""
    if not isinstance(raw, str) or not raw.strip():
        raise ToolError("memory-ingest-file needs a path")
    path = Path(raw.strip()).expanduser()
    real = path.resolve()
    data = context.settings.data_dir.resolve()
    own = (context.settings.accounts_dir / context.caller.account_id).resolve()
    if real.is_relative_to(data) and not real.is_relative_to(own):
        raise ToolError(
            f"{raw} is among the device's own files (keys, database, other accounts); "
            "only the owner's documents can be ingested.",
            code="not-allowed",
        )
    if not real.is_file():
        raise ToolError(f"There is no file at {raw}.", code="not-found")
    return real


async def ingest_file(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Stage the named file and have the engine convert, keep and ingest it."""
    source = readable(context, arguments.get("path"))
    # Here, not at the top: the converters (pypdf, the Word reader) load in the process that
    # runs this tool, not in every session's MCP server of the plugin.
    from appliance.memory import uploads
    from appliance.memory.convert import ConversionRefused

    settings = context.settings
    limits = uploads.Limits(settings.upload_max_mb * 1024 * 1024, settings.upload_types)
    try:
        limits.check_name(source.name)
        staged = await asyncio.to_thread(
            uploads.new_staged, settings.accounts_dir, context.caller.account_id
        )
        await asyncio.to_thread(uploads.stage_copy, source, staged, limits, source.name)
    except ConversionRefused as err:
        raise ToolError(str(err), code=err.reason) from err
    except DiskFull as err:
        raise ToolError(str(err), code=err.code) from err
    params: dict[str, Any] = {
        "staged": staged.name,
        "fileName": source.name,
        "caller": context.caller.to_wire(),
    }
    for key in ("title", "scope", "agents"):
        if arguments.get(key) is not None:
            params[key] = arguments[key]
    try:
        result: dict[str, Any] = await context.engine.call(api.INGEST_FILE.name, params)
    finally:
        await asyncio.to_thread(staged.unlink, True)
    return result


TOOLS: tuple[Tool, ...] = (
    Tool(
        name="memory-ingest-file",
        handler=ingest_file,
        input_schema=_SCHEMA,
        description=(
            "Ingest a file on this device into memory: Markdown, text, HTML, PDF or Word "
            "(.docx), converted to text with its headings, the file kept as the document's "
            "attachment. The same file name again is a new version of the same document. A "
            "damaged, password-protected or too large file is refused with the reason, and "
            "nothing is written."
        ),
        produces="documentId",
        produces_label="KnowledgeDocument",
    ),
)
