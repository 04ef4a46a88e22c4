"""Fixtures of the OTA core tests: slot images, a release key, a device, a running Maxy."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ota.cards import Signer, SimDevice, SlotImages, make_device, make_signer, slot_images
from tests.support.processes import Neo4jServer, get_health, wait_until
from tests.support.stacks import DOUBLE, Stack, answers, make_env, running_stack


@pytest.fixture(scope="session")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SlotImages]:
    """Slot images of the running release (0.1.0) and of two later ones."""
    folder = tmp_path_factory.mktemp("releases")
    return {version: slot_images(folder, version) for version in ("0.1.0", "1.0.0", "1.1.0")}


@pytest.fixture(scope="session")
def release_key(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    """The key releases are signed with; devices trust it."""
    return make_signer(tmp_path_factory.mktemp("keys"), "release")


@pytest.fixture
def device(tmp_path: Path, releases: dict[str, SlotImages], release_key: Signer) -> SimDevice:
    """A device running 0.1.0 from slot A (slot B empty), trusting the release key."""
    made = make_device(tmp_path / "device", releases["0.1.0"])
    shutil.copy(release_key.public, made.trust / release_key.public.name)
    return made


@pytest.fixture(scope="module")
def maxy_stack(
    neo4j_server: Neo4jServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Real engine, manager and edge processes: what `maxy ota commit` checks on a device."""
    root = tmp_path_factory.mktemp("stack")
    env = make_env(
        neo4j_server,
        root / "data",
        MAXY_CLAUDE_BIN=str(DOUBLE),
        CLAUDE_DOUBLE_PYTHON=sys.executable,
    )
    with running_stack(env, root / "logs", "engine", "manager", "edge") as stack:
        settings = env.settings
        wait_until(lambda: answers(settings.manager_socket), 60, f"the manager\n{stack.output()}")

        def edge_healthy() -> bool:
            answer = get_health(settings.port)
            return answer is not None and answer.status_code == 200

        wait_until(edge_healthy, 120, f"the edge's /healthz 200\n{stack.output()}")
        yield stack


def stack_settings(stack: Stack) -> dict[str, str]:
    """The settings a `maxy ota commit` on that stack's device needs to find it."""
    names = (
        "MAXY_ACCOUNT_ID",
        "MAXY_RUNTIME_DIR",
        "MAXY_HOST",
        "MAXY_PORT",
        "MAXY_NEO4J_URI",
        "MAXY_NEO4J_PASSWORD_FILE",
    )
    return {name: stack.env.vars[name] for name in names}
