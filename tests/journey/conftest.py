"""The owner journey's steps, printed at the end of every run that included it."""

from __future__ import annotations

from typing import Any

#: (step, outcome) in the order they ran; the journey test appends to it.
STEPS: list[tuple[str, str]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not STEPS:
        return
    terminalreporter.section("owner journey")
    for number, (name, outcome) in enumerate(STEPS, 1):
        terminalreporter.write_line(f"step {number}: {name} ... {outcome}")
