"""The frozen `maxy` under test: MAXY_BINARY, else dist/maxy, built once when missing or stale.

These tests run the FROZEN executable, never the source tree (tests/support/frozen.py builds it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.frozen import build


@pytest.fixture(scope="session")
def binary(request: pytest.FixtureRequest) -> Iterator[Path]:
    """The frozen executable: $MAXY_BINARY, else dist/maxy (built when missing or stale)."""
    given = os.environ.get("MAXY_BINARY")
    if given:
        path = Path(given).resolve()
        if not os.access(path, os.X_OK):
            pytest.fail(f"MAXY_BINARY={given} is not an executable file")
        yield path
        return
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    yield build(reporter)
