"""The bootstrap's one list of Debian packages: read by it alone, installed or named exactly."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.processes import REPO

LIST = REPO / "build" / "system-packages.txt"
AS_NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")


def rows() -> list[list[str]]:
    lines = LIST.read_text().splitlines()
    return [line.split()[:3] for line in lines if line.strip() and not line.startswith("#")]


def test_every_row_names_a_package_a_group_and_a_check() -> None:
    found = rows()
    assert len(found) >= 10
    for package, group, check in found:
        assert group in {"run", "test"}, package
        kind = check.removeprefix("x86_64:").split(":", 1)[0]
        assert kind in {"cmd", "sbin", "file", "py"}, (package, check)


def test_ci_has_no_second_list_and_runs_lint_and_test() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get" not in ci
    assert "just lint" in ci and "just test" in ci


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the bootstrap as another user")
def test_without_root_a_missing_package_is_one_sudo_line_and_a_failure() -> None:
    top = Path(tempfile.mkdtemp(prefix="maxy-bootstrap-"))  # readable by the other user
    build = top / "build"
    build.mkdir()
    for name in ("bootstrap.sh", "python.sh"):
        shutil.copy2(REPO / "build" / name, build / name)
    (build / "system-packages.txt").write_text(
        "# package for check why\n"
        "git                 run    cmd:git                  present\n"
        "maxy-no-such-pkg    run    cmd:maxy-no-such-cmd     absent\n"
        "maxy-test-only      test   file:/maxy/no/such/file  absent, test group\n"
    )
    top.chmod(0o755)
    build.chmod(0o755)
    try:
        _run_as_nobody(build, top)
    finally:
        shutil.rmtree(top)


def _run_as_nobody(build: Path, home: Path) -> None:
    for group, wanted in (("run", "maxy-no-such-pkg"), ("test", "maxy-no-such-pkg maxy-test-only")):
        done = subprocess.run(
            [*AS_NOBODY, str(build / "bootstrap.sh"), "--for", group],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
            check=False,
        )
        assert done.returncode != 0
        assert f"run: sudo apt-get install -y {wanted}\n" in done.stderr, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
