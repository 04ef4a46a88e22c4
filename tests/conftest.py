"""Shared fixtures: a real Neo4j server, the real GGUF model, real `maxy` processes.

The test session starts its own Neo4j (from the cached jars, on a free port, in a temporary
home) once, and stops it at the end. Nothing here fakes our own code.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from appliance.core.accounts import create_account
from appliance.core.config import load_settings
from appliance.graphdb.instance import Neo4jInstance, running
from appliance.memory.embedder import Embedder
from tests.support.frozen import start_arm64_build, stop_arm64_build
from tests.support.processes import (
    Env,
    Neo4jServer,
    Process,
    base_environ,
    dev_model,
    maxy,
    private_neo4j,
    release_ports,
    remove_runtime_dirs,
    runtime_dir,
)
from tests.support.stacks import account_env, neo4j_vars

# Hypothesis's per-example deadline is a wall-clock assertion: on a loaded two-core machine an
# example that touches the disk takes 350 ms now and then, and the test fails as "flaky". Tests
# here never assert time, so no deadline; hangs are caught by pytest-timeout.
hypothesis_settings.register_profile("maxy", deadline=None)
hypothesis_settings.load_profile("maxy")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Fixtures that start whole processes: a Neo4j server, `maxy` roles, the session manager, the
# edge's stack, a frozen binary or a card image. A test that uses one, directly or through
# another fixture, is `slow`, so `-m 'not slow'` leaves out every test that starts one.
PROCESS_FIXTURES = frozenset(
    {
        "neo4j_server",
        "start_maxy",
        "start_manager",
        "shared_manager",
        "maxy_stack",
        "stack",
        "edge",
        "binary",
        "card",
        "x86_card",
        "arm64_card",
        "device",
        "releases",
        "channels",
        "small_disk",
    }
)
# A test module that starts processes in its own code (a browser, a `maxy` command).
PROCESS_CALLS = ("chromium(", "Process(", "subprocess.run(", "subprocess.Popen(", "maxy(")


@pytest.fixture(autouse=True)
def _no_process_outside_slow_tests(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Keep the marker true: a test not marked slow that starts a process fails, naming it."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    started: list[str] = []
    real_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        started.append(str(args))
        real_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", init)
    yield
    assert not started, f"this test starts processes {started}: add it to tests/conftest.py's slow"


def needs_arm64(item: pytest.Item) -> bool:
    """Whether a test uses the arm64 binary (directly, or in the arm64 card)."""
    return (
        "arm64_card" in getattr(item, "fixturenames", ())
        or "[arm64" in item.nodeid
        or Path(str(item.fspath)).name == "test_arm64.py"
    )


_ARM64_BUILD: list[subprocess.Popen[bytes]] = []


@pytest.hookimpl(trylast=True)  # after -k/-m deselection and pytest's own fixture ordering
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that starts a whole process as slow (see PROCESS_FIXTURES); start the
    arm64 binary's build in the background and run the tests that need it last."""
    arm64 = [item for item in items if needs_arm64(item)]
    if arm64:
        items[:] = [item for item in items if not needs_arm64(item)] + arm64
        build = None if config.option.collectonly else start_arm64_build()
        if build is not None:
            _ARM64_BUILD.append(build)
    starts: dict[Path, bool] = {}
    for item in items:
        path = Path(str(item.fspath))
        if path not in starts:
            source = path.read_text(encoding="utf-8") if path.is_file() else ""
            starts[path] = any(call in source for call in PROCESS_CALLS)
        if starts[path] or PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_sessionfinish() -> None:
    """Stop a background arm64 build that no test waited for (an interrupted session)."""
    for build in _ARM64_BUILD:
        stop_arm64_build(build)


@pytest.fixture(scope="session")
def neo4j_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Neo4jServer]:
    """Start a real Neo4j for the whole session."""
    data = tmp_path_factory.mktemp("neo4j-data")
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(data),
        **private_neo4j(),
    )
    settings = load_settings(env)
    instance = Neo4jInstance.from_settings(settings, env)
    with running(instance) as proc:
        yield Neo4jServer(instance.uri(), settings.neo4j_password_path, instance, proc)


@pytest.fixture(scope="session")
def model_path() -> Path:
    """The development GGUF the engine loads, built by `just bootstrap`: its f16 file, or its
    bf16 form on a CPU that multiplies bf16 natively (embedder.fastest_form)."""
    path = dev_model()
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `just bootstrap` (the test command does it).")
    return path


@pytest.fixture(scope="session")
def embedder(model_path: Path) -> Iterator[Embedder]:
    """The real model loaded in this process."""
    model = Embedder(model_path, max_chars=8000)
    yield model
    model.close()


@pytest.fixture
def maxy_env(neo4j_server: Neo4jServer, tmp_path: Path) -> Env:
    """Settings for a `maxy` process using the session Neo4j, with one account on disk."""
    data = tmp_path / "data"
    # Unix socket paths are short (107 bytes): keep the runtime dir near the root.
    account = create_account(data / "accounts", "Test Owner")
    env = account_env(data, runtime_dir(), account.id, **neo4j_vars(neo4j_server))
    return Env(env, account.id)


@pytest.fixture
def start_maxy(tmp_path: Path) -> Iterator[object]:
    """Start `maxy` subcommands; every one is stopped when the test ends."""
    started: list[Process] = []

    def start(env: Env | dict[str, str], *args: str) -> Process:
        variables = env.vars if isinstance(env, Env) else env
        process = Process(maxy(*args), variables, tmp_path / f"{args[0]}-{len(started)}.log")
        started.append(process)
        return process

    yield start
    for process in reversed(started):
        process.stop()


@pytest.fixture(scope="module", autouse=True)
def _runtime_dirs_removed_after_each_module() -> Iterator[None]:
    """No /tmp/maxy-* or port hold left behind a module: first in, so torn down after its
    stacks stop."""
    yield
    remove_runtime_dirs()
    release_ports()
