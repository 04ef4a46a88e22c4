"""Print build/freeze.lock without llama-cpp-python (which the build makes: build/llama-wheel.sh).

    python build/freeze_requirements.py build/freeze.lock > requirements.txt

Used by build/build.sh (the build virtualenv) and build/build-arm64.sh (the arm64 wheels it
downloads on the host). Standard library only: it runs before any virtualenv exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def without_llama(lock: str) -> str:
    """The lock's requirements, one a line (hashes kept), minus llama-cpp-python."""
    text = lock.replace("\\\n", " ")
    kept = [line for line in text.splitlines() if not re.match(r"llama-cpp-python==", line)]
    return "\n".join(kept)


if __name__ == "__main__":
    print(without_llama(Path(sys.argv[1]).read_text()))
