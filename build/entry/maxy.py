"""Entry point of the frozen ``maxy`` executable (PyInstaller runs this file as ``__main__``)."""

from __future__ import annotations

import multiprocessing
import sys

from appliance.cli import main

if __name__ == "__main__":
    # Granian starts its worker through multiprocessing ("spawn"): in a frozen program that
    # re-runs this executable, and freeze_support() turns such a run into the worker.
    multiprocessing.freeze_support()
    sys.exit(main())
