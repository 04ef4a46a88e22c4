"""The Telegram channel: a bot (a token from @BotFather) polled for updates (no inbound port).

:mod:`.bot` speaks the Bot API; :mod:`.channel` runs the long poll and feeds the lifeline.
"""
