"""The app beside a real `maxy manager` that runs the `claude` test double.

No Neo4j and no engine: nothing on the session routes asks them, so these stacks start in seconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from appliance.core.accounts import create_account
from tests.app.stack import Stack, running_stack
from tests.sessions.conftest import answers, manager_env
from tests.support.processes import Env, Process, free_port, runtime_dir, wait_until


def sessions_env(root: Path) -> Env:
    """Settings shared by the app, the edge and the manager (which runs the double)."""
    runtime = runtime_dir("maxy-run-")
    account = create_account(root / "data" / "accounts", "Test Owner")
    extra = {"MAXY_HOST": "127.0.0.1", "MAXY_PORT": str(free_port())}
    return Env(manager_env(root / "data", runtime, account.id, extra, {}), account.id)


def start_manager(stack: Stack) -> Process:
    """Start `maxy manager` and wait until it answers on its socket."""
    process = stack.start("manager")
    sock = stack.env.settings.manager_socket

    def healthy() -> bool:
        assert process.proc.poll() is None, f"maxy manager exited:\n{process.output()}"
        return answers(sock)

    wait_until(healthy, 60, f"the manager on {sock}", 0.05)
    return process


@contextmanager
def sessions_stack(root: Path, *roles: str, **variables: str) -> Iterator[Stack]:
    """``roles`` (app, edge) and a manager running the double, for one fresh account."""
    from tests.app.test_browser import _edge_serves

    env = sessions_env(root)
    env.vars.update(variables)
    try:
        with running_stack(env, root / "logs", *roles) as running:
            if "edge" in roles:
                port = env.settings.port
                wait_until(lambda: _edge_serves(port), 60, f"the edge\n{running.output()}")
            start_manager(running)
            yield running
    finally:
        shutil.rmtree(env.settings.runtime_dir, ignore_errors=True)
