"""The one fatal-error path of the `maxy` command."""

from __future__ import annotations

import importlib

import pytest

from appliance import cli
from appliance.ota.errors import SignatureError
from appliance.tunnel import ConfigError


@pytest.mark.parametrize("name", sorted(cli.FATAL_AREAS))
def test_every_fatal_area_names_an_exception_class(name: str) -> None:
    module, _, qualname = name.rpartition(".")
    kind = getattr(importlib.import_module(module), qualname)
    assert isinstance(kind, type) and issubclass(kind, Exception)


def test_a_subsystems_error_ends_in_its_area_and_a_bug_in_none() -> None:
    assert cli.fatal_area(SignatureError("bad signature")) == "ota"
    assert cli.fatal_area(ConfigError("bad ingress")) == "tunnel"
    assert cli.fatal_area(KeyError("bug")) is None


def test_the_fatal_line_names_area_kind_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.fatal("ota", SignatureError("The bundle is not signed.")) == 1
    assert capsys.readouterr().err == "[ota] FATAL SignatureError: The bundle is not signed.\n"
