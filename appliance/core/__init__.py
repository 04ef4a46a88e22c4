"""The foundation every role stands on; it imports nothing above it.

Settings (:mod:`.config`), logging (:mod:`.logs`), accounts on disk (:mod:`.accounts`), the
caller's identity (:mod:`.identity`), durable files (:mod:`.fsio`), subprocesses (:mod:`.proc`),
systemd notification (:mod:`.systemd`), ports, shipped resources and the build's version.
"""
