"""The session manager's fixture (a real `maxy manager` running the `claude` double), shared with
tests/sessions, for the admin tools that ask it."""

from __future__ import annotations

from tests.sessions.conftest import start_manager

__all__ = ["start_manager"]
