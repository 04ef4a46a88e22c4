"""Errors of ``maxy ota``; every message says what happened and what to do.

Errors::

    OtaError                      anything an update refuses or fails at
    ├── BundleError               the .maxyupdate file is unreadable or not what it claims
    │   ├── SignatureError        unsigned, badly signed, or signed by a key nobody trusts
    │   ├── ManifestError         the signed manifest is malformed
    │   └── PayloadError          a slot image does not match its signed hash or size
    ├── CompatibilityError        a valid bundle this device must not install (board,
    │                             downgrade, bootloader too old for tryboot)
    ├── SlotWriteError            writing or reading back the inactive slot failed
    ├── BackupError               the Neo4j dump before the slot write failed
    ├── HealthCheckFailed         the trial boot did not prove healthy within the window
    ├── StateError                the card, the firmware state or state.json forbid the step
    └── PhaseTimeout              a phase overran its time limit (a MAXY_OTA_*_TIMEOUT setting)
"""

from __future__ import annotations


class OtaError(Exception):
    """An update step Maxy refused or could not finish."""


class BundleError(OtaError):
    """The update bundle cannot be read or is not what it claims to be."""


class SignatureError(BundleError):
    """The manifest's signature is missing, invalid, or by a key this device does not trust."""


class ManifestError(BundleError):
    """The signed manifest is malformed or incomplete."""


class PayloadError(BundleError):
    """A slot image does not match the size or hash its manifest signs."""


class CompatibilityError(OtaError):
    """The bundle is genuine but not for this device (board, version, bootloader)."""


class SlotWriteError(OtaError):
    """The inactive slot could not be written, or does not read back as written."""


class BackupError(OtaError):
    """The Neo4j database could not be dumped before the update."""


class HealthCheckFailed(OtaError):
    """The trial boot stayed unhealthy for the whole commit window."""


class StateError(OtaError):
    """The card, the firmware state or the OTA state file do not allow this step now."""


class PhaseTimeout(OtaError):
    """A phase of an update ran longer than its time limit."""
