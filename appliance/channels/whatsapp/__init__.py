"""The WhatsApp channel: the owner's number as a linked device (neonize, the whatsmeow binding).

:mod:`.events` turns the library's message events into the lifeline's :class:`Inbound`;
:mod:`.device` is the adapter (send, edit, typing) on the library's client; :mod:`.channel` runs
the connection, the pairing (QR code on the Settings page) and the owner's outbox;
:mod:`.export` reads a chat's ``_chat.txt`` export into sessions for the archive.
"""
