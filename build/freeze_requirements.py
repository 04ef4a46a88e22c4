"""Print build/freeze.lock without llama-cpp-python (which the build makes: build/llama-wheel.sh).

    python build/freeze_requirements.py build/freeze.lock > requirements.txt
    python build/freeze_requirements.py --python-full-version 3.11.2 build/freeze.lock

Used by build/build.sh (the build virtualenv) and build/build-arm64.sh (the arm64 wheels it
downloads on the host). The lock is universal: some packages appear twice under opposite
``python_full_version`` markers. ``pip download --python-version`` filters wheels by the target's
version but evaluates those markers against the interpreter running pip, so a download for
another Python must drop the other side's lines first and the markers of the lines it keeps:
``--python-full-version`` does that (on
Linux, with ``packaging``, which any virtualenv's pip carries). Without it: standard library only,
since build.sh runs it before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path


def without_llama(lock: str) -> list[str]:
    """The lock's requirements, one a line (hashes kept), minus llama-cpp-python."""
    text = lock.replace("\\\n", " ")
    return [line for line in text.splitlines() if not re.match(r"llama-cpp-python==", line)]


def for_python(lines: list[str], full_version: str) -> list[str]:
    """The lines whose markers hold for CPython ``full_version`` on Linux."""
    from packaging.markers import Marker

    environment = {
        "python_full_version": full_version,
        "python_version": ".".join(full_version.split(".")[:2]),
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
    }
    kept = []
    for line in lines:
        requirement, _, hashes = line.partition(" --hash")
        if ";" not in requirement:
            kept.append(line)
            continue
        name, marker = requirement.split(";", 1)
        if Marker(marker).evaluate(environment):
            # Without its marker: pip would evaluate it again, against its own interpreter.
            kept.append(name.rstrip() + "      --hash" + hashes if hashes else name.rstrip())
    return kept


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock", type=Path)
    parser.add_argument("--python-full-version", help="keep only the lines for this CPython")
    args = parser.parse_args()
    lines = without_llama(args.lock.read_text())
    if args.python_full_version:
        lines = for_python(lines, args.python_full_version)
    print("\n".join(lines))
