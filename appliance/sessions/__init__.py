"""The PTY session manager (``maxy manager``): Claude Code sessions in PTYs, observable and safe.

The manager spawns the ``claude`` CLI in pseudo-terminals (:mod:`.pty`) with argv and a
pre-seeded ``CLAUDE_CONFIG_DIR`` built by :mod:`.spawn`, keeps a live index of session rows
rebuilt from disk and an inotify watcher (:mod:`.registry`, :mod:`.transcript`), enforces the
caps and reaps idle specialists (:mod:`.caps`), and serves HTTP, an SSE feed of row deltas
(:mod:`.feed`) and a WebSocket terminal bridge (:mod:`.terminal`) on a Unix socket
(:mod:`.server`). :mod:`.manager` ties them together.

Disk is the source of truth: the CLI's PID file ``sessions/<pid>.json``, its transcript
``projects/<slug>/<sessionId>.jsonl`` (or ``projects/<slug>/archive/…``) and the manager's
sidecar ``projects/<slug>/<sessionId>.meta.json``. Only PTY handles live in memory.
"""
