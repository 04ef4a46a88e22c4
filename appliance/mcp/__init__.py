"""``maxy mcp``: the memory tools of a Claude Code session, as a stdio MCP server.

Each ``claude`` session spawns its own ``maxy mcp``; it never loads the model or opens Neo4j
itself — every tool is one RPC call to the engine. Who is calling comes from this process's
environment (ACCOUNT_ID, ALLOWED_SCOPES, AGENT_SLUG, SESSION_ID), set by the PTY manager when it
spawns the session; tool arguments can narrow that, never widen it.
"""
