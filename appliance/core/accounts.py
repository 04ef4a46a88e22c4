"""Accounts on disk: ``<data_dir>/accounts/<uuid>/account.json``.

The account a process serves comes from ``MAXY_ACCOUNT_ID`` and is checked against the accounts
on disk at start. There is no fallback: a missing id, no account on disk or an id that matches
none is fatal, reported as one line ``[graph-health] account-id-env FATAL reason=…``.

Errors::

    AccountError
    ├── AccountIdError        (reason: missing | no-on-disk-account | mismatch)
    ├── BrandMissing          the account has no brand.productName
    └── AccountTimeZoneError  account.json's timeZone is not an IANA zone

The owner's time zone is account.json's ``timeZone`` (an IANA name; UTC while unset): the
scheduling tools show and read every time in it (:func:`owner_zone`, :func:`set_time_zone`).

account.json is changed by several processes (the app's pages, a session's admin tools, the
manager's plugin resolver): every change goes through :func:`update_account_file`, which reads,
changes and writes it under the account's lock file, so two changes at once both land.

The brand's product name fills ``{{productName}}`` wherever shipped or owner-written text is read
(plugins, skills, roles, agent prompts, pages): :meth:`Account.product_name` and
:func:`fill_brand`. There is no default name: a missing one is the owner's to fix.
"""

from __future__ import annotations

import fcntl
import json
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from appliance.core.clock import TimeZoneError, load_zone
from appliance.core.fsio import write_atomic

log = logging.getLogger(__name__)

ACCOUNT_FILE = "account.json"
ACCOUNT_LOCK = ".account.lock"
T = TypeVar("T")
BRAND_PLACEHOLDER = "{{productName}}"
DEFAULT_AGENT = "maxy"
TIME_ZONE_KEY = "timeZone"
DEFAULT_TIME_ZONE = "UTC"
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class AccountError(Exception):
    """An account cannot be created, read or used."""


class AccountIdError(AccountError):
    """The process's account id does not name an account on disk."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason

    @property
    def line(self) -> str:
        """The single fatal log line for this failure."""
        return f"[graph-health] account-id-env FATAL reason={self.reason}"


class BrandMissing(AccountError):
    """The account's brand names no product."""


class AccountTimeZoneError(AccountError):
    """The account's time zone is not an IANA zone."""


def fill_brand(text: str, product_name: str) -> str:
    """``text`` with every ``{{productName}}`` replaced by the brand's product name."""
    return text.replace(BRAND_PLACEHOLDER, product_name)


@dataclass(frozen=True)
class Account:
    """One account as stored in account.json."""

    id: str
    owner: str
    created_at: str
    default_agent: str
    brand: dict[str, Any]
    time_zone: str | None = None  # IANA name; None: UTC

    def product_name(self) -> str:
        """The brand's product name, or :class:`BrandMissing` saying how to set it."""
        name = self.brand.get("productName")
        if not isinstance(name, str) or not name.strip():
            raise BrandMissing(
                f"The account {self.id} has no brand.productName in its account.json; "
                '{{productName}} needs it. Add it, e.g. "brand": {"productName": "Maxy"}.'
            )
        return name.strip()

    def to_json(self) -> dict[str, Any]:
        """Return the on-disk form."""
        data: dict[str, Any] = {
            "id": self.id,
            "owner": self.owner,
            "createdAt": self.created_at,
            "defaultAgent": self.default_agent,
            "brand": self.brand,
        }
        if self.time_zone:
            data[TIME_ZONE_KEY] = self.time_zone
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Account:
        """Build an account from its on-disk form."""
        return cls(
            id=str(data["id"]),
            owner=str(data.get("owner", "")),
            created_at=str(data.get("createdAt", "")),
            default_agent=str(data.get("defaultAgent", DEFAULT_AGENT)),
            brand=dict(data.get("brand") or {}),
            time_zone=str(data[TIME_ZONE_KEY]) if data.get(TIME_ZONE_KEY) else None,
        )


def create_account(
    accounts_dir: Path,
    owner: str,
    product_name: str = "Maxy",
    *,
    brand: dict[str, Any] | None = None,
    default_agent: str = DEFAULT_AGENT,
    account_id: str | None = None,
    time_zone: str | None = None,
) -> Account:
    """Create a new account directory and its account.json (``brand`` replaces product_name)."""
    if not owner.strip():
        raise AccountError("An account needs an owner name: `maxy account create --owner NAME`.")
    if account_id is not None and not _UUID.match(account_id):
        raise AccountError(f"{account_id!r} is not a lower-case UUID; an account id must be one.")
    if time_zone is not None:
        time_zone = _zone(time_zone).key
    account = Account(
        id=account_id or str(uuid.uuid4()),
        owner=owner.strip(),
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        default_agent=default_agent,
        brand=dict(brand) if brand is not None else {"productName": product_name},
        time_zone=time_zone,
    )
    folder = accounts_dir / account.id
    # An empty folder is what an interrupted creation leaves; an account.json is an account.
    folder.mkdir(parents=True, exist_ok=account_id is not None)
    if (folder / ACCOUNT_FILE).exists():
        raise AccountError(f"The account {account.id} already exists in {folder}.")
    write_atomic(folder / ACCOUNT_FILE, json.dumps(account.to_json(), indent=2) + "\n")
    log.info("[accounts] op=create account=%s", account.id)
    return account


def read_account_file(accounts_dir: Path, account_id: str) -> dict[str, Any]:
    """The account's account.json as stored (every key kept); AccountError if unusable."""
    path = accounts_dir / account_id / ACCOUNT_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise AccountError(f"The account file {path} cannot be read ({err}).") from err
    if not isinstance(data, dict) or data.get("id") != account_id:
        raise AccountError(f"The account file {path} is not the account {account_id}'s.")
    return data


def update_account_file(
    accounts_dir: Path, account_id: str, change: Callable[[dict[str, Any]], T]
) -> tuple[dict[str, Any], T]:
    """Read account.json, let ``change`` edit it in place, write it back, all under the
    account's lock; return the stored data and what ``change`` returned."""
    folder = accounts_dir / account_id
    with (folder / ACCOUNT_LOCK).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_account_file(accounts_dir, account_id)
        result = change(data)
        if data.get("id") != account_id:
            raise AccountError(f"A change of {folder / ACCOUNT_FILE} may not change its id.")
        write_atomic(folder / ACCOUNT_FILE, json.dumps(data, indent=2) + "\n")
    return data, result


def list_accounts(accounts_dir: Path) -> list[Account]:
    """Return every valid account on disk, oldest first."""
    found: list[Account] = []
    if not accounts_dir.is_dir():
        return found
    for path in sorted(accounts_dir.glob(f"*/{ACCOUNT_FILE}")):
        try:
            data = json.loads(path.read_text())
            account = Account.from_json(data)
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("[accounts] op=read warn=unreadable path=%s error=%s", path, err)
            continue
        if account.id != path.parent.name or not _UUID.match(account.id):
            log.warning("[accounts] op=read warn=id-does-not-match-folder path=%s", path)
            continue
        found.append(account)
    found.sort(key=lambda a: a.created_at)
    return found


def validate_account_id(accounts_dir: Path, account_id: str) -> Account:
    """Return the account named by ``account_id`` or raise :class:`AccountIdError`."""
    if not account_id:
        raise AccountIdError(
            "missing",
            "MAXY_ACCOUNT_ID is not set. Set it to an id from `maxy account list` "
            "(`maxy account create --owner NAME` makes one).",
        )
    accounts = list_accounts(accounts_dir)
    if not accounts:
        raise AccountIdError(
            "no-on-disk-account",
            f"There is no account under {accounts_dir}. Create one with `maxy account create`.",
        )
    for account in accounts:
        if account.id == account_id:
            return account
    raise AccountIdError(
        "mismatch",
        f"MAXY_ACCOUNT_ID={account_id} matches no account under {accounts_dir}. "
        "`maxy account list` shows the ids on disk.",
    )


def _zone(name: object) -> ZoneInfo:
    try:
        return load_zone(name)
    except TimeZoneError as err:
        raise AccountTimeZoneError(str(err)) from err


def owner_zone(accounts_dir: Path, account_id: str) -> ZoneInfo:
    """The owner's time zone: account.json's ``timeZone``, UTC while it is unset."""
    path = accounts_dir / account_id / ACCOUNT_FILE
    name = read_account_file(accounts_dir, account_id).get(TIME_ZONE_KEY) or DEFAULT_TIME_ZONE
    try:
        return load_zone(name)
    except TimeZoneError as err:
        raise AccountTimeZoneError(
            f"{path} has timeZone {name!r}, which is not a time zone. Set a valid one (the "
            "time-zone-set tool, or an IANA name such as Europe/Paris in the file)."
        ) from err


def set_time_zone(accounts_dir: Path, account_id: str, name: object) -> ZoneInfo:
    """Store the owner's time zone in account.json (every other key kept); return it."""
    zone = _zone(name)
    update_account_file(
        accounts_dir, account_id, lambda data: data.update({TIME_ZONE_KEY: zone.key})
    )
    log.info("[accounts] op=set-time-zone account=%s zone=%s", account_id, zone.key)
    return zone
