"""The arm64 `maxy` (dist/arm64/maxy-onedir, built on x86-64) runs under qemu-user and embeds as
x86-64 does.

The binary comes from build/build-arm64.sh (cached: a few minutes when only the sources changed)
and runs through binfmt_misc and qemu-user-static, as the card's programs would run on a Pi.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import pytest

from appliance.memory.embedder import Embedder
from tests.support.frozen import arm64_binary
from tests.support.processes import REPO, base_environ

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]  # a cold arm64 build: ~45 min

FIXTURE = REPO / "tests" / "fixtures" / "minilm-reference.json"
CACHE = Path(os.environ.get("MAXY_CACHE_DIR", "~/.cache/maxy")).expanduser()
ARM64_ROOT = CACHE / "arm64" / "root"  # made by build/build-arm64.sh


@pytest.fixture(scope="module")
def binary(request: pytest.FixtureRequest) -> Path:
    """dist/arm64/maxy-onedir/maxy, built (or reused from the cache) by build/build-arm64.sh."""
    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip(f"the arm64 build runs on x86_64 or aarch64, not {platform.machine()}")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    return arm64_binary(reporter)


def run_arm64(
    binary: Path, *args: str, env: dict[str, str] | None = None, core: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the arm64 binary (through binfmt_misc on x86-64); it must succeed.

    On x86-64 qemu-user finds the arm64 loader and libraries in the build root, the card's own
    Debian userland (QEMU_LD_PREFIX), and emulates ``core`` (qemu's name) when one is given.
    """
    env = dict(env or base_environ())
    if platform.machine() != "aarch64":
        env["QEMU_LD_PREFIX"] = str(ARM64_ROOT)
        if core is not None:
            env["QEMU_CPU"] = core
    done = subprocess.run(
        [str(binary), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_it_is_an_aarch64_executable(binary: Path) -> None:
    header = binary.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == 0xB7  # EM_AARCH64


def test_version_runs_under_emulation(binary: Path) -> None:
    info = json.loads(run_arm64(binary, "version", "--json").stdout)
    assert info["frozen"] is True
    assert info["version"]
    assert info["gitRevision"]


# A Pi 4's core and a Pi 5's: whether it has the dot product, which picks llama.cpp's CPU variant
# (armv8.0_1 or armv8.2_2, build/llama-wheel.sh).
PI_CORES = {"cortex-a72": False, "cortex-a76": True}


@pytest.mark.parametrize("core", sorted(PI_CORES))
def test_embedding_matches_the_x86_64_reference(
    binary: Path, embedder: Embedder, model_path: Path, core: str
) -> None:
    fixture = json.loads(FIXTURE.read_text())
    text = fixture["texts"][0]
    env = dict(base_environ(), MAXY_EMBED_MODEL=str(model_path))
    done = run_arm64(binary, "embed", text, env=env, core=core)
    out = json.loads(done.stdout)
    (load,) = [line for line in done.stderr.splitlines() if "[embed] op=load" in line]
    if platform.machine() != "aarch64":  # emulated: the core is the one asked for
        assert ("DOTPROD" in load) is PI_CORES[core], load
    arm64 = np.asarray(out["vector"], dtype=np.float32)
    x86_64 = embedder.embed(text)  # this process: the x86-64 llama.cpp wheel
    reference = np.asarray(fixture["embeddings"][0], dtype=np.float32)
    assert arm64.shape == (384,)
    assert cosine(arm64, x86_64) >= 0.999
    assert cosine(arm64, reference) >= 0.999


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))
