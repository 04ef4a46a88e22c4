"""The account's agents on disk, and the owner's changes to them.

An agent is a folder ``<accounts_dir>/<account>/agents/<slug>/``::

    IDENTITY.md            who the agent is (the owner's words; ``{{productName}}`` allowed)
    SOUL.md                how it speaks
    KNOWLEDGE.md           the snapshot regenerated from the graph (:mod:`.knowledge`)
    KNOWLEDGE-SUMMARY.md   optional, shorter; the staleness guard decides which one is read
    config.json            {"displayName", "description", "keywordSubscriptions": [≤ 5 keywords]}

A slug is 1-40 of ``[a-z0-9-]``, starting and ending with a letter or digit, and never a first
path segment the app itself uses (:data:`RESERVED`). Every path is built from a valid slug and
checked to resolve directly under the agents folder (no symlinked agent folder is followed), so
no slug can reach outside it.

Writes never leave a half-written agent: a new agent is assembled in a hidden staging folder and
renamed into place in one step; every file is written to a temporary file beside it, flushed and
renamed over the old one. Hidden (dot) folders are never agents. The account's default agent is
``defaultAgent`` in ``account.json``, rewritten the same way with its other keys kept.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from appliance.agents.errors import AgentConflict, InvalidAgentInput, NoSuchAgent
from appliance.core.accounts import Account, AccountError, update_account_file
from appliance.core.fsio import fsync_dir, write_atomic

log = logging.getLogger(__name__)

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?$")
# First path segments that belong to the app itself: never an agent's slug.
RESERVED = frozenset({"admin", "api", "static", "sites", "bot", "login", "onboarding", "healthz"})
CONFIG_FILE = "config.json"
FILES = {"identity": "IDENTITY.md", "soul": "SOUL.md"}
MAX_FILE_CHARS = 20_000
MAX_NAME_CHARS = 80
MAX_DESCRIPTION_CHARS = 200
MAX_SUBSCRIPTIONS = 5
MAX_KEYWORD_CHARS = 60
_KEYWORD = re.compile(r"^\w[\w .'&+/-]*$")


def is_slug(text: str) -> bool:
    """True when ``text`` can name an agent."""
    return bool(SLUG.match(text)) and text not in RESERVED


def check_slug(slug: object) -> str:
    """``slug`` if it can name an agent, else :class:`InvalidAgentInput` saying why."""
    if not isinstance(slug, str) or not SLUG.match(slug):
        raise InvalidAgentInput(
            "An agent's name in its address must be 1-40 lower-case letters, digits or hyphens, "
            "starting and ending with a letter or digit (e.g. anna or garden-help)."
        )
    if slug in RESERVED:
        raise InvalidAgentInput(
            f"{slug!r} is taken by the app itself ({', '.join(sorted(RESERVED))}): choose "
            "another name."
        )
    return slug


def folder_of(agents_dir: Path, slug: object, *, must_exist: bool = True) -> Path:
    """The folder of the agent ``slug``: a direct child of ``agents_dir``, never a symlink."""
    name = check_slug(slug)
    folder = agents_dir / name
    if folder.is_symlink() or folder.resolve().parent != agents_dir.resolve():
        raise InvalidAgentInput(f"The agent folder of {name!r} is not a plain folder.")
    if must_exist and not folder.is_dir():
        raise NoSuchAgent(f"There is no agent called {name!r}. Create it first.")
    return folder


def check_subscriptions(value: object) -> list[str]:
    """Validated keyword subscriptions: at most five distinct short keywords."""
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(k, str) for k in value):
        raise InvalidAgentInput("Keyword subscriptions must be a list of words or short phrases.")
    keywords: list[str] = []
    seen: set[str] = set()
    for raw in value:
        keyword = " ".join(unicodedata.normalize("NFC", raw).split())
        if not keyword:
            continue
        if len(keyword) > MAX_KEYWORD_CHARS or not _KEYWORD.match(keyword):
            raise InvalidAgentInput(
                f"{keyword[:MAX_KEYWORD_CHARS]!r} cannot be a keyword subscription: use words "
                f"(letters, digits, spaces, - ' & + / .), at most {MAX_KEYWORD_CHARS} characters."
            )
        if keyword.casefold() in seen:
            raise InvalidAgentInput(f"The keyword {keyword!r} is listed twice.")
        seen.add(keyword.casefold())
        keywords.append(keyword)
    if len(keywords) > MAX_SUBSCRIPTIONS:
        raise InvalidAgentInput(
            f"An agent can subscribe to at most {MAX_SUBSCRIPTIONS} keywords "
            f"({len(keywords)} given): remove some."
        )
    return keywords


def _check_text(value: object, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidAgentInput(f"{what} must be text.")
    if len(value) > limit:
        raise InvalidAgentInput(
            f"{what} is {len(value):,} characters long; the limit is {limit:,}. Shorten it."
        )
    if "\x00" in value:
        raise InvalidAgentInput(f"{what} contains a NUL character.")
    return value


def check_changes(data: Mapping[str, Any]) -> dict[str, Any]:
    """The recognised, validated fields of a create or edit request."""
    known = {"identity", "soul", "displayName", "description", "keywordSubscriptions"}
    unknown = sorted(set(data) - known - {"slug"})
    if unknown:
        raise InvalidAgentInput(
            f"Unknown field(s) {', '.join(unknown)}; an agent has {', '.join(sorted(known))}."
        )
    changes: dict[str, Any] = {}
    for key, what in (("identity", "IDENTITY.md"), ("soul", "SOUL.md")):
        if key in data:
            changes[key] = _check_text(data[key], what, MAX_FILE_CHARS).replace("\r\n", "\n")
    if "displayName" in data:
        name = " ".join(_check_text(data["displayName"], "The display name", 1000).split())
        if len(name) > MAX_NAME_CHARS:
            raise InvalidAgentInput(f"The display name is limited to {MAX_NAME_CHARS} characters.")
        changes["displayName"] = name
    if "description" in data:
        text = " ".join(_check_text(data["description"], "The description", 1000).split())
        if len(text) > MAX_DESCRIPTION_CHARS:
            raise InvalidAgentInput(
                f"The description is limited to {MAX_DESCRIPTION_CHARS} characters."
            )
        changes["description"] = text
    if "keywordSubscriptions" in data:
        changes["keywordSubscriptions"] = check_subscriptions(data["keywordSubscriptions"])
    return changes


def read_config(folder: Path) -> dict[str, Any]:
    """An agent's config.json, or {} when it is missing or unreadable (logged)."""
    path = folder / CONFIG_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("[agents] op=read-config warn=unreadable path=%s error=%s", path, err)
        return {}
    return data if isinstance(data, dict) else {}


def subscriptions_of(folder: Path) -> tuple[str, ...]:
    """The agent's keyword subscriptions as stored (an invalid list counts as none, logged)."""
    try:
        return tuple(check_subscriptions(read_config(folder).get("keywordSubscriptions")))
    except InvalidAgentInput as err:
        log.warning("[agents] op=read-config warn=bad-subscriptions path=%s error=%s", folder, err)
        return ()


@dataclass(frozen=True)
class AgentRecord:
    """What the owner's agents page shows of one agent."""

    slug: str
    display_name: str
    description: str
    identity: str
    soul: str
    subscriptions: tuple[str, ...]
    is_default: bool
    knowledge_updated_at: str | None  # KNOWLEDGE.md's modification time, ISO 8601
    knowledge_chars: int | None
    knowledge_source: str | None  # the file the agent's prompt reads now

    def to_json(self, *, files: bool = True) -> dict[str, Any]:
        """The API form (``files``: with the IDENTITY and SOUL texts)."""
        body: dict[str, Any] = {
            "slug": self.slug,
            "displayName": self.display_name,
            "description": self.description,
            "keywordSubscriptions": list(self.subscriptions),
            "isDefault": self.is_default,
            "knowledge": {
                "updatedAt": self.knowledge_updated_at,
                "chars": self.knowledge_chars,
                "source": self.knowledge_source,
            },
            "url": f"/{self.slug}",
        }
        if files:
            body["identity"] = self.identity
            body["soul"] = self.soul
        return body


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def load(agents_dir: Path, slug: str, default: str) -> AgentRecord:
    """One agent as the owner sees it (NoSuchAgent when there is none)."""
    folder = folder_of(agents_dir, slug)
    config = read_config(folder)
    name = config.get("displayName")
    knowledge = folder / "KNOWLEDGE.md"
    updated = chars = None
    if knowledge.is_file():
        stat = knowledge.stat()
        updated = datetime.fromtimestamp(stat.st_mtime, UTC).isoformat(timespec="seconds")
        chars = len(_read(knowledge))
    # Imported here: the public agent loads the Anthropic SDK, which `maxy agents` never needs.
    from appliance.agents.public_agent import knowledge_file

    source = knowledge_file(folder)
    return AgentRecord(
        slug=slug,
        display_name=str(name).strip() if isinstance(name, str) and name.strip() else slug,
        description=str(config.get("description") or "").strip(),
        identity=_read(folder / FILES["identity"]),
        soul=_read(folder / FILES["soul"]),
        subscriptions=subscriptions_of(folder),
        is_default=slug == default,
        knowledge_updated_at=updated,
        knowledge_chars=chars,
        knowledge_source=source.name if source else None,
    )


def list_all(agents_dir: Path, default: str) -> list[AgentRecord]:
    """Every agent, the default first, then by display name."""
    found = []
    if agents_dir.is_dir():
        for child in sorted(agents_dir.iterdir()):
            if child.is_dir() and not child.is_symlink() and is_slug(child.name):
                found.append(load(agents_dir, child.name, default))
    return sorted(found, key=lambda a: (not a.is_default, a.display_name.casefold(), a.slug))


def _config_text(config: Mapping[str, Any]) -> str:
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


def _merged_config(folder: Path, changes: Mapping[str, Any]) -> dict[str, Any] | None:
    keys = ("displayName", "description", "keywordSubscriptions")
    if not any(key in changes for key in keys):
        return None
    config = read_config(folder)  # keys this page does not know are kept
    config.update({key: changes[key] for key in keys if key in changes})
    return config


def create(agents_dir: Path, slug: object, data: Mapping[str, Any]) -> str:
    """Create the agent ``slug`` with its files in one step (AgentConflict if it exists)."""
    folder = folder_of(agents_dir, slug, must_exist=False)
    changes = check_changes(data)
    if folder.exists() or folder.is_symlink():
        raise AgentConflict(f"There is already an agent called {folder.name!r}.")
    agents_dir.mkdir(parents=True, exist_ok=True)
    staging = agents_dir / f".{folder.name}.new-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        for key, filename in FILES.items():
            write_atomic(staging / filename, changes.get(key, ""))
        config = {
            "displayName": changes.get("displayName") or folder.name,
            "description": changes.get("description", ""),
            "keywordSubscriptions": changes.get("keywordSubscriptions", []),
        }
        write_atomic(staging / CONFIG_FILE, _config_text(config))
        try:
            # rename(2) would replace an empty folder that appeared meanwhile: refuse that too.
            if folder.exists():
                raise AgentConflict(f"There is already an agent called {folder.name!r}.")
            os.rename(staging, folder)
        except OSError as err:
            raise AgentConflict(f"There is already an agent called {folder.name!r}.") from err
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fsync_dir(agents_dir)
    log.info("[agents] op=create agent=%s", folder.name)
    return folder.name


def update(agents_dir: Path, slug: object, data: Mapping[str, Any]) -> list[str]:
    """Apply an edit (files and config); each file is replaced whole. Returns what changed."""
    folder = folder_of(agents_dir, slug)
    changes = check_changes(data)
    if "slug" in data and data["slug"] != folder.name:
        raise InvalidAgentInput("An agent's address cannot change: create a new agent instead.")
    writes: list[tuple[Path, str]] = [
        (folder / filename, changes[key]) for key, filename in FILES.items() if key in changes
    ]
    config = _merged_config(folder, changes)
    if config is not None:
        writes.append((folder / CONFIG_FILE, _config_text(config)))
    for path, text in writes:
        write_atomic(path, text)
    changed = sorted(changes)
    log.info("[agents] op=update agent=%s fields=%s", folder.name, ",".join(changed) or "-")
    return changed


def delete(agents_dir: Path, slug: object, default: str) -> None:
    """Delete an agent's folder (never the default agent's): moved aside, then removed."""
    folder = folder_of(agents_dir, slug)
    if folder.name == default:
        raise AgentConflict(
            f"{folder.name!r} is the default agent: make another agent the default first."
        )
    retired = agents_dir / f".{folder.name}.deleted-{secrets.token_hex(4)}"
    os.rename(folder, retired)
    shutil.rmtree(retired, ignore_errors=True)
    log.info("[agents] op=delete agent=%s", folder.name)


def set_default(accounts_dir: Path, account: Account, agents_dir: Path, slug: object) -> Account:
    """Make ``slug`` the account's default agent in account.json; return the updated account."""
    folder = folder_of(agents_dir, slug)

    def edit(data: dict[str, Any]) -> None:
        data["defaultAgent"] = folder.name

    try:
        data, _ = update_account_file(accounts_dir, account.id, edit)
    except AccountError as err:
        raise InvalidAgentInput(str(err)) from err
    log.info("[agents] op=set-default agent=%s", folder.name)
    return Account.from_json(data)


def agents_dir_of(accounts_dir: Path, account_id: str) -> Path:
    """The account's agents folder."""
    return accounts_dir / account_id / "agents"
