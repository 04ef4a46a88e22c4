"""The engine's typed contract: requests are checked, answers are held to their declaration."""

from __future__ import annotations

import pydantic
import pytest

from appliance.mcp.tools import all_tools
from appliance.rpc import engine as api
from appliance.rpc.contract import Method, Request, Response
from appliance.rpc.protocol import BadParams


def test_every_method_is_declared_once() -> None:
    assert len(api.BY_NAME) == len(api.METHODS) == 60


@pytest.mark.parametrize(
    ("method", "params", "needle"),
    [
        (api.SEARCH, {}, "query: Field required"),
        (
            api.SEARCH,
            {"query": "x", "mode": "best"},
            "mode: Input should be 'weighted', 'rrf' or 'convex'",
        ),
        (api.EMBED, {"texts": "not a list"}, "texts"),
        (api.EMBED, {"texts": ["x"] * 257}, "at most 256"),
        (api.AUDIT_RECORD, {"tool": "t", "startedAt": "yesterday"}, "startedAt"),
    ],
)
def test_params_that_do_not_fit_are_bad_params_naming_the_field(
    method: Method[Request, Response], params: dict[str, object], needle: str
) -> None:
    with pytest.raises(BadParams, match=method.name) as caught:
        method.parse(params)
    assert needle in str(caught.value)


def test_wire_names_are_camel_case_and_unknown_keys_are_ignored() -> None:
    call = api.SEARCH.parse({"query": "x", "vectorWeight": 0.5, "surprise": 1})
    assert call.vector_weight == 0.5 and not hasattr(call, "surprise")


def test_an_answer_with_an_undeclared_key_is_refused() -> None:
    answer = {"id": "n1", "created": True, "embedded": False, "warnings": []}
    assert api.WRITE.answer(answer) == answer
    with pytest.raises(pydantic.ValidationError):
        api.WRITE.answer({**answer, "password": "leak"})


def test_tool_schemas_expose_their_arguments_never_the_caller() -> None:
    for tool in all_tools():
        if tool.method is not None:  # engine-backed: exactly the arguments forwarded to the engine
            assert set(tool.schema["properties"]) == set(tool.forwarded), tool.name
        assert "caller" not in tool.schema["properties"] and "$defs" not in tool.schema, tool.name
