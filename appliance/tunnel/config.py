"""cloudflared's ``config.yml`` and Maxy's ``roles.json``: read, check, change, write atomically.

The YAML is read and written round-trip (ruamel.yaml), so comments and keys the owner added
survive every change Maxy makes. A document is checked by :func:`validate` before it is written
(and by ``cloudflared tunnel ingress validate`` too when the program is installed); a refused
document raises :class:`ConfigError` naming the problem and the file on disk is not touched.

The rules Maxy holds a config to:

- ``ingress`` is a list of rules; the last one is the catch-all ``- service: http_status:404``
  (no hostname, no path) and no earlier rule matches every request;
- every ``hostname`` is a valid DNS name (no wildcard) and appears once;
- every ``service`` is ``http_status:NNN``, ``hello_world``, or a URL of a scheme cloudflared
  proxies to, with a host (or a socket path for ``unix:``) and no path.

Each host name's role lives in ``roles.json`` beside it (``{"host": "admin" | "public"}``),
because cloudflared warns about keys it does not know; a host name without a role is public.
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from appliance.core.fsio import SECRET_MODE, ensure_private_dir, staged, write_secret
from appliance.core.proc import ToolError, run
from appliance.tunnel import CloudflaredError, ConfigError

log = logging.getLogger(__name__)

Role = Literal["admin", "public"]
ROLES: tuple[Role, ...] = ("admin", "public")
CATCH_ALL = "http_status:404"
URL_SCHEMES = frozenset({"http", "https", "unix", "unix+tls", "tcp", "ssh", "rdp", "smb"})
SPECIAL_SERVICES = frozenset({"hello_world", "bastion", "socks5"})
VALIDATE_TIMEOUT = 30.0
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_STATUS = re.compile(r"^http_status:([1-5][0-9][0-9])$")


@dataclass(frozen=True)
class Rule:
    """One ingress rule as cloudflared reads it (host names lower-case)."""

    hostname: str | None
    path: str | None
    service: str


def _yaml() -> YAML:
    yaml = YAML()  # round-trip: comments, key order and unknown keys are kept
    yaml.indent(mapping=2, sequence=4, offset=2)  # the layout of cloudflared's own examples
    yaml.preserve_quotes = True
    return yaml


def parse(text: str, origin: str = "config.yml") -> CommentedMap:
    """Parse a config document; an empty one is an empty mapping."""
    try:
        doc = _yaml().load(text)
    except YAMLError as err:
        raise ConfigError(f"{origin} is not valid YAML ({err}). Fix the file by hand.") from err
    if doc is None:
        return CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise ConfigError(f"{origin} must be a mapping of keys (tunnel, ingress, ...).")
    return doc


def load(path: Path) -> CommentedMap:
    """Read config.yml; a missing file is an empty document."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return CommentedMap()
    return parse(text, str(path))


def dumps(doc: CommentedMap) -> str:
    """Render a document, comments and all."""
    out = io.StringIO()
    _yaml().dump(doc, out)
    return out.getvalue()


def valid_hostname(name: str) -> bool:
    """Whether ``name`` is a lower-case DNS name of two or more labels (no wildcard)."""
    labels = name.split(".")
    return (
        len(name) <= 253
        and len(labels) >= 2
        and all(_LABEL.match(label) for label in labels)
        and not labels[-1].isdigit()
    )


def check_hostname(name: str) -> str:
    """Return ``name`` lower-case, or raise ConfigError saying why it is not a host name."""
    host = name.strip().lower().rstrip(".")
    if not valid_hostname(host):
        raise ConfigError(
            f"{name!r} is not a valid host name: use a DNS name such as maxy.example.com "
            "(letters, digits and hyphens; no wildcard, no scheme, no port)."
        )
    return host


def _service_problem(service: str) -> str | None:
    """Why cloudflared could not proxy to ``service``; None if it can."""
    if service in SPECIAL_SERVICES or _STATUS.match(service):
        return None
    if service.startswith("http_status:"):
        return "an http_status service needs a status code between 100 and 599"
    parts = urllib.parse.urlsplit(service)
    if parts.scheme not in URL_SCHEMES:
        return f"the scheme must be one of {', '.join(sorted(URL_SCHEMES))}"
    if parts.scheme.startswith("unix"):
        return None if parts.path else "a unix service needs a socket path"
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return "the port must be a number between 1 and 65535"
    if not parts.hostname:
        return "the URL needs a host, such as http://localhost:19200"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "cloudflared cannot proxy to a path, query or fragment of the origin"
    return None


def rules(doc: CommentedMap) -> list[Rule]:
    """Check a config document; return its ingress rules or raise ConfigError naming a problem."""
    for key in ("tunnel", "credentials-file"):
        if key in doc and not isinstance(doc[key], str):
            raise ConfigError(f"config.yml: {key!r} must be a string.")
    ingress = doc.get("ingress")
    if not ingress:
        raise ConfigError(
            "config.yml has no ingress rules: it needs at least the catch-all rule "
            f"`- service: {CATCH_ALL}` as the last rule."
        )
    if not isinstance(ingress, list):
        raise ConfigError("config.yml: 'ingress' must be a list of rules.")
    out: list[Rule] = []
    seen: set[str] = set()
    for number, raw in enumerate(ingress, 1):
        if not isinstance(raw, dict):
            raise ConfigError(f"config.yml: ingress rule {number} must be a mapping.")
        service = raw.get("service")
        if not isinstance(service, str) or not service:
            raise ConfigError(f"config.yml: ingress rule {number} has no service.")
        problem = _service_problem(service)
        if problem:
            raise ConfigError(
                f"config.yml: ingress rule {number} has a bad service URL {service!r}: {problem}."
            )
        hostname = raw.get("hostname")
        path = raw.get("path")
        if hostname is not None:
            if not isinstance(hostname, str) or not valid_hostname(hostname.lower()):
                raise ConfigError(
                    f"config.yml: ingress rule {number} has an invalid hostname {hostname!r} "
                    "(use a DNS name such as maxy.example.com; no wildcard)."
                )
            hostname = hostname.lower()
            if hostname in seen:
                raise ConfigError(
                    f"config.yml: duplicate hostname {hostname!r} (ingress rule {number}); "
                    "each host name may appear in one rule only."
                )
            seen.add(hostname)
        if path is not None and not isinstance(path, str):
            raise ConfigError(f"config.yml: ingress rule {number} has a path that is not text.")
        out.append(Rule(hostname, path, service))
    last = out[-1]
    if last.hostname is not None or last.path is not None or last.service != CATCH_ALL:
        raise ConfigError(
            "config.yml has no catch-all rule: the last ingress rule must be "
            f"`- service: {CATCH_ALL}` (no hostname, no path)."
        )
    for number, rule in enumerate(out[:-1], 1):
        if rule.hostname is None and rule.path is None:
            raise ConfigError(
                f"config.yml: ingress rule {number} matches every request, so the rules after it "
                "never apply; give it a hostname or move it last."
            )
    return out


def ingress_hostnames(doc: CommentedMap) -> list[str]:
    """Host names of a valid document's ingress rules, in file order."""
    return [rule.hostname for rule in rules(doc) if rule.hostname is not None]


def ensure_catch_all(doc: CommentedMap) -> CommentedSeq:
    """Give ``doc`` an ingress list ending in the catch-all rule; return the list."""
    ingress = doc.get("ingress")
    if not isinstance(ingress, CommentedSeq):
        ingress = CommentedSeq()
        doc["ingress"] = ingress
    last = ingress[-1] if ingress else None
    if not (isinstance(last, dict) and "hostname" not in last and "path" not in last):
        ingress.append(CommentedMap([("service", CATCH_ALL)]))
    return ingress


def set_route(doc: CommentedMap, hostname: str, service: str) -> None:
    """Route ``hostname`` to ``service``: update its rule, or add one before the catch-all."""
    ingress = ensure_catch_all(doc)
    for raw in ingress:
        if isinstance(raw, dict) and str(raw.get("hostname", "")).lower() == hostname:
            raw["service"] = service
            return
    ingress.insert(len(ingress) - 1, CommentedMap([("hostname", hostname), ("service", service)]))


def remove_route(doc: CommentedMap, hostname: str) -> bool:
    """Drop ``hostname``'s rule; whether there was one."""
    ingress = doc.get("ingress") or []
    for index, raw in enumerate(ingress):
        if isinstance(raw, dict) and str(raw.get("hostname", "")).lower() == hostname:
            del ingress[index]
            return True
    return False


def cloudflared_path(binary: str) -> str | None:
    """The cloudflared executable (a name on PATH or a path), or None when not installed."""
    return shutil.which(binary)


def cloudflared_validate(binary: str, config: Path) -> None:
    """Run ``cloudflared tunnel ingress validate`` on ``config``; raise ConfigError if refused."""
    try:
        done = run(
            [binary, "tunnel", "--config", config, "ingress", "validate"], timeout=VALIDATE_TIMEOUT
        )
    except ToolError as err:
        raise CloudflaredError(f"could not run {binary} ({err}).") from err
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ConfigError(
            "cloudflared refused the config: " + (said[-1] if said else f"exit {done.returncode}")
        )


def save(path: Path, doc: CommentedMap, cloudflared: str | None = None) -> list[Rule]:
    """Check ``doc`` and write it to ``path`` atomically; on any refusal ``path`` is unchanged."""
    checked = rules(doc)
    text = dumps(doc)
    parse(text)  # what we write must read back (a round-trip bug must not reach the disk)
    ensure_private_dir(path.parent)
    with staged(path, text, mode=SECRET_MODE) as temp:
        if cloudflared is not None:
            cloudflared_validate(cloudflared, temp.path)
        temp.commit()
    log.info("[tunnel] op=config-write path=%s rules=%d", path, len(checked))
    return checked


def load_roles(path: Path) -> dict[str, Role]:
    """Read roles.json (host name -> admin|public); a missing file is no roles."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not valid JSON ({err}). Fix or remove the file.") from err
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and v in ROLES for k, v in raw.items()
    ):
        raise ConfigError(f'{path} must map host names to "admin" or "public".')
    return {k.lower(): cast(Role, v) for k, v in raw.items()}


def save_roles(path: Path, roles: dict[str, Role]) -> None:
    """Write roles.json atomically."""
    text = json.dumps(dict(sorted(roles.items())), indent=2) + "\n"
    write_secret(path, text)


def hostname_roles(config: Path, roles_file: Path) -> dict[str, Role]:
    """Each ingress host name of ``config`` with its role (public unless roles.json says admin)."""
    roles = load_roles(roles_file)
    return {host: roles.get(host, "public") for host in ingress_hostnames(load(config))}


def describe(doc: CommentedMap) -> dict[str, Any]:
    """The facts of a document worth showing: tunnel id, credentials path, host names."""
    return {
        "tunnel": doc.get("tunnel"),
        "credentialsFile": doc.get("credentials-file"),
        "metrics": doc.get("metrics"),
        "hostnames": [
            str(r["hostname"]).lower()
            for r in doc.get("ingress") or []
            if isinstance(r, dict) and r.get("hostname")
        ],
    }
