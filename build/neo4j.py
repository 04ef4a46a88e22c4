"""Fetch the Neo4j Community server jars from Maven Central into the cache, once.

    python build/neo4j.py --cache-dir ~/.cache/maxy --version 2026.08.1

Maven resolves ``org.neo4j:neo4j`` with strict checksum checking (``-C``); the jars are copied to
``<cache>/neo4j/<version>/lib`` and listed with their sha256 and size in ``SHA256SUMS``, which
``maxy`` checks before every start. A second run with a complete cache does nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from appliance.core.fsio import sha256_file

HERE = Path(__file__).resolve().parent


def fetch(cache_dir: Path, version: str) -> Path:
    """Make sure the jars of ``version`` are in the cache; return the distribution folder."""
    dist = cache_dir / "neo4j" / version
    if (dist / "SHA256SUMS").is_file():
        return dist
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit(
            "Maven (`mvn`) is needed once to fetch Neo4j. Install it with "
            "`apt-get install maven` and run again."
        )
    staging = dist.with_name(version + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "lib").mkdir(parents=True)
    print(f"[bootstrap] op=fetch-neo4j version={version}", file=sys.stderr)
    subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-C",
            "-f",
            str(HERE / "neo4j" / "pom.xml"),
            f"-Dneo4j.version={version}",
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging / 'lib'}",
        ],
        check=True,
    )
    lines = []
    for jar in sorted((staging / "lib").glob("*.jar")):
        digest = sha256_file(jar)
        lines.append(f"{digest} {jar.stat().st_size} {jar.name}")
    if not any(" neo4j-" + version in line for line in lines):
        sys.exit(f"Maven did not deliver neo4j {version}; check the version exists.")
    (staging / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    shutil.rmtree(dist, ignore_errors=True)
    staging.rename(dist)
    return dist


def main() -> None:
    """Parse arguments and fetch."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--version", required=True)
    args = parser.parse_args()
    print(fetch(args.cache_dir.expanduser(), args.version))


if __name__ == "__main__":
    main()
