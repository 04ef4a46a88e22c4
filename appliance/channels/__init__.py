"""Channels: Telegram (and, through the same adapter boundary, WhatsApp) reach the assistant.

One inbound lifeline (:mod:`.lifeline`) serves every channel; a channel plugs in as an adapter
(:mod:`.adapter`) that turns its deliveries into :class:`~.adapter.Inbound` messages and sends
what the lifeline lets out (:mod:`.outbound`). ``maxy channels`` (:mod:`.role`) runs them.
"""
