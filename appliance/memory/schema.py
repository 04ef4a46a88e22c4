"""Apply ``schema/schema.cypher`` idempotently; keep vector indexes in step with the model and
full-text indexes in step with their declaration (analyzer, labels, properties)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.resources import resource_path
from appliance.memory.errors import SchemaDimensionMismatch
from appliance.memory.graph import Graph

log = logging.getLogger(__name__)

REBUILD_COMMAND = "maxy engine --rebuild-vector-indexes"
_VECTOR_INDEX = re.compile(r"CREATE\s+VECTOR\s+INDEX\s+(\w+)", re.IGNORECASE)
_FULLTEXT_INDEX = re.compile(
    r"CREATE\s+FULLTEXT\s+INDEX\s+(\w+).*?FOR\s*\(\s*\w+\s*:\s*([\w|]+)\s*\)"
    r".*?ON\s+EACH\s*\[([^\]]*)\]",
    re.IGNORECASE | re.DOTALL,
)
_ANALYZER = re.compile(r"`fulltext\.analyzer`\s*:\s*'([\w-]+)'")
DEFAULT_ANALYZER = "standard-no-stop-words"  # Neo4j's, when an index names none


def schema_file() -> Path:
    """The shipped schema file."""
    return resource_path("schema/schema.cypher")


def read_statements(path: Path | None = None) -> list[str]:
    """Split the schema file into statements, dropping ``//`` comment lines."""
    text = (path or schema_file()).read_text()
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    return [stmt.strip() for stmt in "\n".join(lines).split(";") if stmt.strip()]


def declared_vector_indexes(statements: list[str]) -> list[str]:
    """Names of the vector indexes the schema declares."""
    return [m.group(1) for s in statements if (m := _VECTOR_INDEX.match(s))]


@dataclass(frozen=True)
class FulltextShape:
    """What a full-text index covers and how it analyses text."""

    labels: frozenset[str]
    properties: frozenset[str]
    analyzer: str


def declared_fulltext_indexes(statements: list[str]) -> dict[str, FulltextShape]:
    """The full-text indexes the schema declares, by name, with their shape."""
    out: dict[str, FulltextShape] = {}
    for statement in statements:
        if match := _FULLTEXT_INDEX.match(statement):
            name, labels, props = match.groups()
            analyzer = _ANALYZER.search(statement)
            out[name] = FulltextShape(
                frozenset(labels.split("|")),
                frozenset(p.strip().split(".", 1)[-1] for p in props.split(",") if p.strip()),
                analyzer.group(1) if analyzer else DEFAULT_ANALYZER,
            )
    return out


async def fulltext_indexes(graph: Graph) -> dict[str, FulltextShape]:
    """The full-text indexes the store has, by name, with their shape."""
    rows, _ = await graph.run(
        "SHOW FULLTEXT INDEXES YIELD name, labelsOrTypes, properties, options "
        "RETURN name, labelsOrTypes, properties, options"
    )
    return {
        row["name"]: FulltextShape(
            frozenset(row["labelsOrTypes"] or []),
            frozenset(row["properties"] or []),
            str(
                ((row["options"] or {}).get("indexConfig") or {}).get(
                    "fulltext.analyzer", DEFAULT_ANALYZER
                )
            ),
        )
        for row in rows
    }


async def drop_changed_fulltext_indexes(graph: Graph, statements: list[str]) -> list[str]:
    """Drop each declared full-text index the store has in another shape; return their names.

    ``CREATE … IF NOT EXISTS`` would keep an index of another analyzer or other properties
    forever; dropped here, the schema's statement creates it anew and Neo4j repopulates it.
    """
    existing = await fulltext_indexes(graph)
    dropped = []
    for name, want in declared_fulltext_indexes(statements).items():
        have = existing.get(name)
        if have is not None and have != want:
            await graph.run(f"DROP INDEX `{name}` IF EXISTS")
            log.info(
                "[schema] op=rebuild-fulltext-index name=%s analyzer=%s->%s "
                "labels_changed=%s properties_changed=%s",
                name,
                have.analyzer,
                want.analyzer,
                have.labels != want.labels,
                have.properties != want.properties,
            )
            dropped.append(name)
    return dropped


@dataclass
class SchemaReport:
    """What one application of the schema did."""

    statements: int = 0
    indexes_added: int = 0
    constraints_added: int = 0
    vector_indexes: list[str] = field(default_factory=list)
    fulltext_rebuilt: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True if anything was created."""
        return bool(self.indexes_added or self.constraints_added)


async def vector_index_dimensions(graph: Graph) -> dict[str, int]:
    """Map each existing vector index to its dimension."""
    rows, _ = await graph.run("SHOW VECTOR INDEXES YIELD name, options RETURN name, options")
    dims: dict[str, int] = {}
    for row in rows:
        config: dict[str, Any] = (row["options"] or {}).get("indexConfig", {})
        if "vector.dimensions" in config:
            dims[row["name"]] = int(config["vector.dimensions"])
    return dims


async def mismatched_vector_indexes(
    graph: Graph, dimension: int, statements: list[str]
) -> dict[str, int]:
    """Declared vector indexes that exist with another dimension, and that dimension."""
    existing = await vector_index_dimensions(graph)
    return {
        name: existing[name]
        for name in declared_vector_indexes(statements)
        if name in existing and existing[name] != dimension
    }


async def apply_schema(graph: Graph, dimension: int, path: Path | None = None) -> SchemaReport:
    """Create every constraint and index not there yet; refuse on a dimension mismatch."""
    statements = read_statements(path)
    mismatched = await mismatched_vector_indexes(graph, dimension, statements)
    if mismatched:
        have = ", ".join(f"{name}={dim}" for name, dim in sorted(mismatched.items()))
        log.error(
            "[schema] op=apply error=dimension-mismatch want=%s have=%s fix=%r",
            dimension,
            have,
            REBUILD_COMMAND,
        )
        raise SchemaDimensionMismatch(
            f"Vector indexes were built for another embedding model ({have}); the loaded model "
            f"has {dimension} dimensions. Run `{REBUILD_COMMAND}` to rebuild them (existing "
            "embeddings of the old size are cleared), or set MAXY_EMBED_MODEL back."
        )
    report = SchemaReport(
        vector_indexes=declared_vector_indexes(statements),
        fulltext_rebuilt=await drop_changed_fulltext_indexes(graph, statements),
    )
    for statement in statements:
        _, summary = await graph.run("CYPHER 25 " + statement, {"dimension": dimension})
        counters = summary.counters
        report.statements += 1
        report.indexes_added += counters.indexes_added
        report.constraints_added += counters.constraints_added
    log.info(
        "[schema] op=apply statements=%s indexes_added=%s constraints_added=%s dimension=%s",
        report.statements,
        report.indexes_added,
        report.constraints_added,
        dimension,
    )
    return report


async def rebuild_vector_indexes(graph: Graph, dimension: int) -> dict[str, int]:
    """Drop vector indexes of the wrong size, clear wrong-size embeddings, apply the schema.

    Returns how many embeddings were cleared per index.
    """
    statements = read_statements()
    mismatched = await mismatched_vector_indexes(graph, dimension, statements)
    cleared: dict[str, int] = {}
    for name in mismatched:
        label_rows, _ = await graph.run(
            "SHOW VECTOR INDEXES YIELD name, labelsOrTypes WHERE name = $name "
            "RETURN labelsOrTypes[0] AS label",
            {"name": name},
        )
        await graph.run(f"DROP INDEX `{name}` IF EXISTS")
        label = label_rows[0]["label"] if label_rows else None
        count = 0
        if label:
            rows, _ = await graph.run(
                f"MATCH (n:`{label}`) WHERE n.embedding IS NOT NULL AND size(n.embedding) <> $dim "
                "REMOVE n.embedding, n.embeddingModel RETURN count(n) AS cleared",
                {"dim": dimension},
            )
            count = int(rows[0]["cleared"])
        cleared[name] = count
        log.info(
            "[schema] op=rebuild-vector-index name=%s from=%s to=%s cleared=%s",
            name,
            mismatched[name],
            dimension,
            count,
        )
    await apply_schema(graph, dimension)
    return cleared
