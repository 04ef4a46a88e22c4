"""Call the engine over its Unix socket."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.rpc.protocol import (
    RemoteError,
    RpcUnavailable,
    encode_frame,
    read_frame,
)

_ids = itertools.count(1)


class RpcClient:
    """One short-lived connection per call: cheap on a Unix socket, and nothing to go stale."""

    def __init__(self, path: Path, timeout: float = 5.0) -> None:
        self.path = path
        self.timeout = timeout

    async def call(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """Call ``method`` and return its result, or raise an :class:`RpcError`.

        The timeout applies to each frame: a long call that keeps sending progress frames
        (passed to ``on_progress``) does not time out.
        """
        request_id = next(_ids)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(self.path)), self.timeout
            )
        except (FileNotFoundError, ConnectionRefusedError) as err:
            raise RpcUnavailable(
                f"the engine is not running (nothing listens on {self.path})"
            ) from err
        except TimeoutError as err:
            raise RpcUnavailable(f"the engine did not accept a connection for {method}") from err
        try:
            writer.write(encode_frame({"id": request_id, "method": method, "params": params or {}}))
            await writer.drain()
            while True:
                reply = await asyncio.wait_for(read_frame(reader), self.timeout)
                if reply is not None and "progress" in reply and on_progress is not None:
                    on_progress(reply["progress"])
                    continue
                if reply is None or "progress" not in reply:
                    break
        except TimeoutError as err:
            raise RpcUnavailable(
                f"the engine did not answer {method} within {self.timeout:g} s"
            ) from err
        except ConnectionError as err:
            raise RpcUnavailable(f"the engine closed the connection during {method}") from err
        finally:
            writer.close()
        if reply is None:
            # The engine went away mid-call (a crash, a restart): unavailable, not a bad answer,
            # so the caller says "try again" (503) rather than "broken" (502).
            raise RpcUnavailable(
                f"the engine closed the connection during {method} without answering"
            )
        if "error" in reply:
            error = reply["error"] or {}
            raise RemoteError(str(error.get("code")), str(error.get("message")))
        return reply.get("result")
