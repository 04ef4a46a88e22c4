"""The frozen binary: size, edge cold start (one-file vs one-directory) and RSS of every role.

Run with ``just bench-binary`` (builds dist/maxy and dist/maxy-onedir first). Starts one
``maxy run`` from the one-directory build (its own Neo4j, temporary data), then measures

- size: dist/maxy, and the unpacked dist/maxy-onedir tree;
- cold start: a fresh ``maxy edge`` process, from exec to its first ``/healthz`` 200 (the
  engine of the running stack answers its health check), RUNS times per form, median and
  spread; the one-file form unpacks itself into a new temporary directory on every start;
- ``maxy version`` from exec to exit, per form (the floor of any start);
- RSS (VmRSS) of each role's process tree at idle (a Granian role is a server process plus its
  worker), and of the engine with the model loaded, before and after embedding searches.

The page cache is warm (nothing is dropped: other work shares the machine). Prints a table and
ends with one line of JSON holding every figure. Targets: binary <= 150 MB, edge cold start
<= 1.5 s, engine RSS <= 300 MB. Nothing asserts on times.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # `tests` as a package

from tests.support.processes import REPO, base_environ, held_port, process_table, rss_mb

ONEFILE = Path(os.environ.get("MAXY_BINARY", REPO / "dist" / "maxy"))
ONEDIR = REPO / "dist" / "maxy-onedir" / "maxy"
RUNS = 7
SEARCHES = 50
ROLES = ("run", "engine", "manager", "app", "edge")
TARGETS = {"binary_mb": 150.0, "edge_cold_start_s": 1.5, "engine_rss_mb": 300.0}


def healthz(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code
    except httpx.TransportError:
        return None


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.01) -> float:
    """Poll until true; return the seconds it took, or exit saying what did not happen."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(interval)
    raise SystemExit(f"[bench-binary] timed out after {timeout:.0f} s waiting for {what}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def role_rss(root_pid: int, binary: Path) -> dict[str, float]:
    """RSS in MB of each role's process tree under the supervisor ``root_pid``."""
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)

    def tree(pid: int) -> list[int]:
        found = [pid]
        for child in children.get(pid, []):
            argv = table[child][1]
            # Count our own processes only: not Neo4j's JVM, not a session's CLI.
            if argv and Path(argv[0]).name == binary.name:
                found += tree(child)
        return found

    result: dict[str, float] = {}
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        argv = table.get(pid, (0, []))[1]
        role = argv[1] if len(argv) > 1 and argv[1] in ROLES else None
        if role and role not in result:
            members = [pid] if role == "run" else tree(pid)
            result[role] = round(sum(rss_mb(p) for p in members), 1)
        stack += children.get(pid, [])
    return result


def stack_env(binary: Path, base: Path) -> dict[str, str]:
    env = base_environ()
    env.update(
        MAXY_DATA_DIR=str(base / "data"),
        MAXY_RUNTIME_DIR=tempfile.mkdtemp(prefix="maxy-bench-", dir="/tmp"),
        MAXY_HOST="127.0.0.1",
        MAXY_PORT=str(held_port()),
        MAXY_NEO4J_URI="bolt://127.0.0.1:0",  # it binds a free port
        MAXY_NEO4J_HEAP="384m",
        MAXY_NEO4J_PAGECACHE="64m",
        MAXY_LOG_LEVEL="WARNING",
    )
    (base / "data").mkdir(parents=True)
    created = subprocess.run(
        [str(binary), "account", "create", "--owner", "Bench"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    env["MAXY_ACCOUNT_ID"] = created.stdout.strip()
    return env


def edge_cold_start(binary: Path, env: dict[str, str]) -> float:
    """Seconds from exec of ``maxy edge`` to its first /healthz 200."""
    port = held_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(binary), "edge"],
        env={**env, "MAXY_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for(lambda: healthz(port) == 200, 60, f"{binary} edge on :{port}", 0.005)
        return time.monotonic() - started
    finally:
        stop(proc)


def version_time(binary: Path) -> float:
    started = time.monotonic()
    subprocess.run([str(binary), "version"], capture_output=True, check=True)
    return time.monotonic() - started


def figures(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "n": len(values),
    }


def main() -> None:
    for binary in (ONEFILE, ONEDIR):
        if not os.access(binary, os.X_OK):
            raise SystemExit(f"[bench-binary] {binary} is missing: run `just build` first")
    wall = time.monotonic()
    result: dict[str, Any] = {
        "onefile_mb": round(ONEFILE.stat().st_size / 1e6, 1),
        "onedir_mb": round(
            sum(p.lstat().st_size for p in ONEDIR.parent.rglob("*") if not p.is_dir()) / 1e6, 1
        ),
    }
    base = Path(tempfile.mkdtemp(prefix="maxy-bench-binary-"))
    env = stack_env(ONEDIR, base)
    log = (base / "run.log").open("wb")
    run = subprocess.Popen(
        [str(ONEDIR), "run"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        port = int(env["MAXY_PORT"])
        stack_s = wait_for(lambda: healthz(port) == 200, 240, "maxy run to be healthy", 0.2)
        result["run_healthy_s"] = round(stack_s, 1)
        time.sleep(5)  # let start-up work (schema, purge) settle before reading idle RSS
        result["rss_idle_mb"] = role_rss(run.pid, ONEDIR)

        note = base / "note.md"
        note.write_text("# Garden\n\nThe tomatoes are watered every second morning.\n")
        subprocess.run(
            [str(ONEDIR), "memory", "ingest", str(note)], env=env, check=True, capture_output=True
        )
        for i in range(SEARCHES):
            subprocess.run(
                [str(ONEDIR), "memory", "search", f"when are tomatoes watered {i}"],
                env=env,
                check=True,
                capture_output=True,
            )
        result["engine_rss_after_searches_mb"] = role_rss(run.pid, ONEDIR).get("engine")

        for name, binary in (("onefile", ONEFILE), ("onedir", ONEDIR)):
            edge_cold_start(binary, env)  # warm the page cache once, untimed
            result[f"edge_cold_start_{name}_s"] = figures(
                [edge_cold_start(binary, env) for _ in range(RUNS)]
            )
            result[f"version_{name}_s"] = figures([version_time(binary) for _ in range(RUNS)])
    finally:
        stop(run)
        log.close()
        shutil.rmtree(env["MAXY_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
    result["loadavg"] = round(os.getloadavg()[0], 2)
    result["wall_s"] = round(time.monotonic() - wall, 1)
    report(result)


def report(result: dict[str, Any]) -> None:
    idle = result["rss_idle_mb"]
    onefile_start = result["edge_cold_start_onefile_s"]["median"]
    onedir_start = result["edge_cold_start_onedir_s"]["median"]
    engine = max(idle.get("engine", 0.0), result["engine_rss_after_searches_mb"] or 0.0)
    checks = {
        "binary_mb": result["onefile_mb"],
        "edge_cold_start_s": onefile_start,
        "engine_rss_mb": engine,
    }
    result["targets_met"] = {k: checks[k] <= TARGETS[k] for k in TARGETS}
    print(f"{'measure':<44}{'value':>12}{'target':>10}")
    print(f"{'size, one-file dist/maxy (MB)':<44}{result['onefile_mb']:>12}{'<= 150':>10}")
    print(f"{'size, one-dir dist/maxy-onedir (MB)':<44}{result['onedir_mb']:>12}{'':>10}")
    for name in ("onefile", "onedir"):
        start = result[f"edge_cold_start_{name}_s"]
        spread = f"{start['median']} ({start['min']}-{start['max']})"
        print(f"{f'edge exec -> /healthz 200, {name} (s)':<44}{spread:>12}{'<= 1.5':>10}")
    for name in ("onefile", "onedir"):
        version = result[f"version_{name}_s"]["median"]
        print(f"{f'maxy version, {name} (s)':<44}{version:>12}{'':>10}")
    for role in ROLES:
        label = f"RSS idle, {role} (MB)" + (" [model loaded]" if role == "engine" else "")
        target = "<= 300" if role == "engine" else ""
        print(f"{label:<44}{idle.get(role, '-'):>12}{target:>10}")
    after = result["engine_rss_after_searches_mb"]
    print(f"{f'RSS engine after {SEARCHES} searches (MB)':<44}{after:>12}{'<= 300':>10}")
    print(
        f"\none-dir starts {onefile_start / onedir_start:.1f}x faster than one-file (medians, "
        f"n={RUNS}, warm page cache); maxy run healthy after {result['run_healthy_s']} s"
    )
    met = ", ".join(f"{k} {'met' if v else 'NOT met'}" for k, v in result["targets_met"].items())
    print(f"targets: {met}")
    print(f"load average {result['loadavg']} on {os.cpu_count()} cores; wall {result['wall_s']} s")
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
