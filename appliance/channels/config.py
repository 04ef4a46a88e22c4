"""A channel's settings, kept by the owner on the Settings page: who the owner is, and the rest.

``<accounts_dir>/<account>/channels/<channel>.json``::

    {"ownerIds": ["123456789"],   the allow-list: the ONLY source of who reaches the admin agent
     "strangers": "public",      anyone else in a private chat: "public" (the public agent) or
                                 "silent" (kept, never answered — the default on a personal
                                 number, where an auto-reply would speak for the owner)
     "agent": "front-desk",      the public agent that answers (default: the account's own)
     "groups": {"-1001": "all"}, per group: "mention" (answer only when the bot is mentioned or
                                 replied to; the default), "all", or "off"
    }

It is read at every message, so a change applies to the next one without a restart. Nothing
else widens the allow-list: not a session that exists for a sender, not what a message claims,
not a row in the graph. A file that cannot be read or parsed counts as an empty allow-list
(nobody is the owner) and is logged once per change: fail closed.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from appliance.core.fsio import write_atomic

log = logging.getLogger(__name__)

Strangers = Literal["public", "silent"]
GroupMode = Literal["mention", "all", "off"]
STRANGERS: tuple[Strangers, ...] = ("public", "silent")
GROUP_MODES: tuple[GroupMode, ...] = ("mention", "all", "off")
MAX_OWNERS = 10
MAX_GROUPS = 200
_IDENTITY = re.compile(r"^[0-9A-Za-z@._:+-]{1,64}$")
_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_warned: dict[Path, str] = {}


class ConfigError(ValueError):
    """A channel setting the owner gave cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class ChannelConfig:
    """One channel's settings."""

    owner_ids: tuple[str, ...] = ()
    strangers: Strangers = "public"
    agent: str | None = None
    groups: dict[str, GroupMode] = field(default_factory=dict)

    def is_owner(self, sender_id: str) -> bool:
        """True when ``sender_id`` is on the allow-list."""
        return sender_id in self.owner_ids

    def group_mode(self, chat_id: str) -> GroupMode:
        """How the bot answers in one group."""
        return self.groups.get(chat_id, "mention")

    def to_json(self) -> dict[str, Any]:
        """The file's form."""
        return {
            "ownerIds": list(self.owner_ids),
            "strangers": self.strangers,
            "agent": self.agent,
            "groups": dict(self.groups),
        }


def parse(data: Any, default_strangers: Strangers = "public") -> ChannelConfig:
    """Validate a config's JSON form; :class:`ConfigError` names what is wrong."""
    if not isinstance(data, dict):
        raise ConfigError("The channel settings must be a JSON object.")
    owners = data.get("ownerIds", [])
    if not isinstance(owners, list) or len(owners) > MAX_OWNERS:
        raise ConfigError(f"ownerIds must be a list of at most {MAX_OWNERS} ids.")
    cleaned = []
    for owner in owners:
        text = str(owner).strip() if isinstance(owner, str | int) else ""
        if not _IDENTITY.match(text):
            raise ConfigError(
                f"{owner!r} is not a user id: a Telegram user id is a number such as 123456789 "
                "(the Settings page lists who wrote to the bot, with their ids)."
            )
        cleaned.append(text)
    strangers = data.get("strangers") or default_strangers
    if strangers not in STRANGERS:
        raise ConfigError(f"strangers must be one of {', '.join(STRANGERS)}.")
    agent = data.get("agent") or None
    if agent is not None and not (isinstance(agent, str) and _SLUG.match(agent)):
        raise ConfigError("agent must be an agent's slug (lower-case letters, digits, -).")
    groups = data.get("groups") or {}
    if not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
        raise ConfigError(f"groups must map at most {MAX_GROUPS} group ids to a mode.")
    modes: dict[str, GroupMode] = {}
    for chat, mode in groups.items():
        if not _IDENTITY.match(str(chat)) or mode not in GROUP_MODES:
            raise ConfigError(f"Group {chat!r}: the mode must be one of {', '.join(GROUP_MODES)}.")
        modes[str(chat)] = mode
    return ChannelConfig(tuple(dict.fromkeys(cleaned)), strangers, agent, modes)


def path_of(channels_dir: Path, channel: str) -> Path:
    """Where one channel's settings are kept."""
    return channels_dir / f"{channel}.json"


def load(
    channels_dir: Path, channel: str, default_strangers: Strangers = "public"
) -> ChannelConfig:
    """The channel's settings now; an unreadable file is an empty allow-list (logged)."""
    path = path_of(channels_dir, channel)
    try:
        config = parse(json.loads(path.read_text()), default_strangers)
    except FileNotFoundError:
        return ChannelConfig(strangers=default_strangers)
    except (OSError, ValueError) as err:  # ConfigError and JSON errors are ValueErrors
        problem = str(err)
        if _warned.get(path) != problem:
            _warned[path] = problem
            log.warning(
                "[channels] op=config warn=unusable channel=%s path=%s error=%s "
                "owners=none (fix it on the Settings page)",
                channel,
                path,
                problem,
            )
        return ChannelConfig(strangers=default_strangers)
    _warned.pop(path, None)
    return config


def save(channels_dir: Path, channel: str, config: ChannelConfig) -> None:
    """Keep the channel's settings (durably)."""
    channels_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(path_of(channels_dir, channel), json.dumps(config.to_json(), indent=2) + "\n")
    log.info(
        "[channels] op=config-saved channel=%s owners=%d strangers=%s groups=%d",
        channel,
        len(config.owner_ids),
        config.strangers,
        len(config.groups),
    )


def changed(config: ChannelConfig, **changes: Any) -> ChannelConfig:
    """A copy with some fields changed, validated as a whole."""
    return parse({**config.to_json(), **changes}, config.strangers)
