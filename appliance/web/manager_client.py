"""A small JSON client of the session manager's HTTP API on its Unix socket.

The manager's routes are :mod:`appliance.sessions.server`'s; this client is for the roles that
ask it something and read the answer (the admin plugin's tools, the update health check, the
channels' owner turns). The
browser's session API is relayed byte for byte by :mod:`appliance.web.upstream` instead.

Errors::

    ManagerError
    ├── ManagerUnavailable   nothing answers on the socket (or not in time)
    └── ManagerRefused       the manager answered ``{code, message, …}`` with a 4xx or 5xx
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

CONNECT_TIMEOUT = 5.0
BASE_URL = "http://manager"


class ManagerError(Exception):
    """The session manager could not do what was asked."""


class ManagerUnavailable(ManagerError):
    """Nothing answers on the manager's socket."""


class ManagerRefused(ManagerError):
    """The manager answered with an error body."""

    def __init__(self, status: int, code: str, message: str, body: dict[str, Any]) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = body


class ManagerClient:
    """Requests to ``maxy manager`` on ``socket``; one connection per call."""

    def __init__(self, socket: Path, timeout: float = 30.0) -> None:
        self.socket = socket
        self.timeout = timeout

    def http(self, timeout: float | None = None) -> httpx.AsyncClient:
        """An httpx client bound to the manager's socket (for streaming callers)."""
        return httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket)),
            base_url=BASE_URL,
            timeout=httpx.Timeout(timeout or self.timeout, connect=CONNECT_TIMEOUT),
        )

    async def _send(self, method: str, path: str, body: Any = None) -> httpx.Response:
        try:
            async with self.http() as client:
                response = await client.request(method, path, json=body)
                await response.aread()
        except httpx.HTTPError as err:
            raise ManagerUnavailable(
                f"The session manager does not answer on {self.socket} ({type(err).__name__}). "
                "Start it with `just run` (or systemctl start maxy-manager)."
            ) from err
        if response.status_code >= 400:
            answer = _json(response)
            answer = answer if isinstance(answer, dict) else {}
            code = str(answer.get("code") or f"http-{response.status_code}")
            message = str(answer.get("message") or f"The manager answered {response.status_code}.")
            raise ManagerRefused(response.status_code, code, message, answer)
        return response

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; the decoded JSON answer, or :class:`ManagerError`."""
        data = _json(await self._send(method, path, body))
        if data is None:
            raise ManagerError(f"The manager's answer to {method} {path} is not JSON.")
        return data

    async def healthz(self) -> dict[str, Any]:
        """``GET /healthz``: ``{"ok": true, "pid": …}``."""
        answer: dict[str, Any] = await self.request("GET", "/healthz")
        return answer

    async def status(self) -> dict[str, Any]:
        """``GET /status``: caps in use, row counts, the master audit."""
        answer: dict[str, Any] = await self.request("GET", "/status")
        return answer

    async def sessions(self) -> list[dict[str, Any]]:
        """``GET /sessions``: every row."""
        answer = await self.request("GET", "/sessions")
        rows: list[dict[str, Any]] = answer.get("rows", []) if isinstance(answer, dict) else []
        return rows

    async def row(self, token: str) -> dict[str, Any]:
        """``GET /<token>``: one session's row."""
        answer = await self.request("GET", f"/{token}")
        row: dict[str, Any] = answer["row"]
        return row

    async def spawn(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /rc-spawn``: start an admin session; its row."""
        answer = await self.request("POST", "/rc-spawn", body)
        row: dict[str, Any] = answer["row"]
        return row

    async def input(self, token: str, text: str) -> dict[str, Any]:
        """``POST /<token>/input``: type ``text`` into a live session and submit it."""
        answer: dict[str, Any] = await self.request(
            "POST", f"/{token}/input", {"text": text, "submit": True}
        )
        return answer

    async def stop(self, token: str) -> dict[str, Any]:
        """``POST /<token>/stop``: ``{id, stopped, signal, row}``."""
        answer: dict[str, Any] = await self.request("POST", f"/{token}/stop")
        return answer

    async def transcript(self, token: str) -> str:
        """``GET /<token>/log``: the transcript's complete lines (NDJSON); "" before the first."""
        response = await self._send("GET", f"/{token}/log")
        return "" if response.status_code == 202 else response.text


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None
