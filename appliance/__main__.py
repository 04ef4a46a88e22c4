"""Run ``python -m appliance`` as the ``maxy`` command."""

from __future__ import annotations

from appliance.cli import main

raise SystemExit(main())
