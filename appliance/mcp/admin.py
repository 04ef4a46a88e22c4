"""The ``admin`` plugin's tools: look after the device, its sessions, plugins and skills.

``maxy mcp --plugin admin`` serves them; each checks its caller first (:mod:`.owner`):

==================  =====================================================================
system-status       every part's health, versions, disk, session counts (:mod:`.status`)
logs-read           the roles' recent log lines, filtered, secrets removed (:mod:`.logs`)
session-list        the manager's sessions, or one with its last reply (:mod:`.sessions`)
session-stop        stop one session (never the caller's own)
specialist-start    a role as a capped specialist session
session-compact     this session's compaction briefing, for the next session (engine)
capabilities-here   the live install set (:mod:`.plugins`)
plugin-read         a plugin's instructions or reference, brand filled in
skill-load          a skill's instructions
store-skill         save a skill into an owner's plugin
plugin-enable       turn a plugin on
plugin-disable      turn a plugin off (core plugins refuse)
==================  =====================================================================
"""

from __future__ import annotations

from appliance.mcp import logs, plugins, sessions, status
from appliance.mcp.tool import Tool

TOOLS: tuple[Tool, ...] = status.TOOLS + logs.TOOLS + sessions.TOOLS + plugins.TOOLS
