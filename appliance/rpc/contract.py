"""Typed RPC methods: one request type and one response type per method, declared once.

A :class:`Method` names an RPC method and its two pydantic models. The server validates a
call's params into the request (a failure is :class:`BadParams`, answered ``bad-request``) and
the handler's answer against the response (a mismatch is a bug, answered ``internal``); the
MCP tool schemas and the table of methods in the docs are generated from the same models.
Wire names are camelCase (``vectorWeight``), Python names snake_case (``vector_weight``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel

from appliance.rpc.protocol import BadParams


class Request(BaseModel):
    """Base of request types: camelCase on the wire, unknown keys ignored, immutable."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )


class Response(BaseModel):
    """Base of response types: camelCase on the wire, nothing undeclared may slip through."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


Req = TypeVar("Req", bound=Request)
Resp = TypeVar("Resp", bound=Response)


@dataclass(frozen=True)
class Method(Generic[Req, Resp]):
    """One RPC method: its name, what it takes, what it answers, one line about it."""

    name: str
    request: type[Req]
    response: type[Resp]
    summary: str
    streams: bool = False  # sends progress frames before its answer

    def parse(self, params: dict[str, Any]) -> Req:
        """Validate a call's params; :class:`BadParams` names what does not fit."""
        try:
            return self.request.model_validate(params)
        except ValidationError as err:
            raise BadParams(f"{self.name}: {_problems(err)}") from err

    def answer(self, result: Resp | dict[str, Any]) -> dict[str, Any]:
        """The wire form of a handler's result, checked against the response type."""
        model: Response = (
            result if isinstance(result, self.response) else self.response.model_validate(result)
        )
        return model.model_dump(by_alias=True, exclude_unset=True)

    def schema(self, fields: Sequence[str] | None = None) -> dict[str, Any]:
        """JSON schema of the request (only ``fields``, wire names, when given), titles dropped."""
        raw = self.request.model_json_schema(by_alias=True)
        schema: dict[str, Any] = _agent_form(raw, raw.pop("$defs", {}))
        schema.pop("description", None)  # the tool or method has its own
        if fields is not None:
            properties = schema.get("properties", {})
            schema["properties"] = {name: properties[name] for name in fields}
            schema["required"] = [name for name in schema.get("required", []) if name in fields]
        schema["additionalProperties"] = False
        return schema

    def handler(
        self, func: Callable[[Req], Awaitable[Resp | dict[str, Any]]]
    ) -> Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]:
        """Wrap a typed handler as an RPC server handler (params in, wire answer out)."""

        async def handle(params: dict[str, Any]) -> dict[str, Any]:
            return self.answer(await func(self.parse(params)))

        return handle


def _problems(err: ValidationError) -> str:
    parts = []
    for problem in err.errors(include_url=False):
        where = ".".join(str(p) for p in problem["loc"]) or "params"
        parts.append(f"{where}: {problem['msg']}")
    return "; ".join(parts)


def _agent_form(node: Any, defs: dict[str, Any]) -> Any:
    """A JSON schema as an agent reads it best: references inlined, pydantic's ``title`` keys
    dropped, an optional value shown as its type alone (null is accepted, never needed)."""
    if isinstance(node, list):
        return [_agent_form(v, defs) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        inlined = _agent_form(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
        return {**inlined, "additionalProperties": False} if "properties" in inlined else inlined
    options = node.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and len(options) == 2:
        kept = next(o for o in options if o != {"type": "null"})
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if rest.get("default", 0) is None:
            del rest["default"]
        return _agent_form({**kept, **rest}, defs)
    return {
        k: _agent_form(v, defs)
        for k, v in node.items()
        if not (k == "title" and isinstance(v, str))
    }
