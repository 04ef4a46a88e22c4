"""The Anthropic Messages API through the async `anthropic` SDK, behind three calls.

:meth:`AnthropicClient.complete` returns one whole text reply; :meth:`AnthropicClient.stream_text`
yields the text deltas of a streamed one; :func:`check_key` asks whether a key works with the
cheapest call there is (list one model) before Settings stores it. None of them takes tools:
nothing built on this client can hand a model a tool. Base URL, models and timeouts come from
settings; the key is read from ``settings.anthropic_api_key_path`` at each call (so a key dropped
in later takes effect without a restart) and never logged. The SDK does not retry: the gateway
has a 3-second budget, and a visitor would rather see a prompt error than wait.

SDK exceptions become :mod:`appliance.agents.errors` here, and only here.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable

import anthropic
from anthropic.types import MessageParam, RawContentBlockDeltaEvent, TextBlock, TextDelta

from appliance.agents.errors import (
    AnthropicError,
    AnthropicStatus,
    AnthropicTimeout,
    AnthropicUnreachable,
    MalformedReply,
    NoApiKey,
)
from appliance.core.config import Settings
from appliance.core.fsio import read_secret

log = logging.getLogger(__name__)

#: Seconds a streamed reply may stay silent (connect, or between two chunks).
STREAM_TIMEOUT = 60.0
#: Seconds the key check may take.
CHECK_TIMEOUT = 10.0


def read_api_key(settings: Settings) -> str | None:
    """The Anthropic API key from its file, or None when there is none."""
    return read_secret(settings.anthropic_api_key_path)


def _translate(err: Exception) -> AnthropicError:
    """The one place SDK (and decoding) exceptions become ours."""
    if isinstance(err, anthropic.APITimeoutError):
        return AnthropicTimeout("The Anthropic API did not answer in time.")
    if isinstance(err, anthropic.APIStatusError):
        return AnthropicStatus(err.status_code, f"The Anthropic API answered {err.status_code}.")
    if isinstance(err, anthropic.APIConnectionError):
        return AnthropicUnreachable(f"The Anthropic API is not reachable ({err}).")
    return MalformedReply(f"The Anthropic API's answer could not be read ({err}).")


# What the SDK raises for a failed call, and the decoding error of a body that is not JSON.
# Nothing else is translated: a KeyError or TypeError here is a bug, logged with its traceback.
_SDK_ERRORS = (anthropic.AnthropicError, json.JSONDecodeError)


async def check_key(settings: Settings, key: str) -> None:
    """Return if the API accepts ``key`` (``GET /v1/models``); else raise AnthropicError."""
    client = anthropic.AsyncAnthropic(
        api_key=key, base_url=settings.anthropic_base_url, max_retries=0, timeout=CHECK_TIMEOUT
    )
    try:
        await asyncio.wait_for(client.models.list(limit=1), CHECK_TIMEOUT)
    except TimeoutError as err:
        raise AnthropicTimeout("The Anthropic API did not answer in time.") from err
    except _SDK_ERRORS as err:
        raise _translate(err) from err
    finally:
        await client.close()


class AnthropicClient:
    """One SDK client per key, created on first use."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._client: anthropic.AsyncAnthropic | None = None
        self._key: str | None = None

    def _sdk(self) -> anthropic.AsyncAnthropic:
        key = read_api_key(self.settings)
        if key is None:
            raise NoApiKey(
                f"No Anthropic API key: put one in {self.settings.anthropic_api_key_path} "
                "(or set MAXY_ANTHROPIC_API_KEY_FILE)."
            )
        if self._client is None or key != self._key:
            self._client = anthropic.AsyncAnthropic(
                api_key=key,
                base_url=self.settings.anthropic_base_url,
                max_retries=0,
                timeout=STREAM_TIMEOUT,
            )
            self._key = key
        return self._client

    async def complete(
        self,
        *,
        model: str,
        system: str,
        messages: Iterable[MessageParam],
        max_tokens: int,
        timeout: float,
    ) -> str:
        """Return the text of one reply; ``timeout`` is a hard deadline for the whole call."""
        client = self._sdk()
        try:
            # The SDK's own timeout covers each network phase, not the call as a whole.
            reply = await asyncio.wait_for(
                client.messages.create(
                    model=model,
                    system=system,
                    messages=list(messages),
                    max_tokens=max_tokens,
                    timeout=timeout,
                ),
                timeout,
            )
            return "".join(block.text for block in reply.content if isinstance(block, TextBlock))
        except TimeoutError as err:
            raise AnthropicTimeout("The Anthropic API did not answer in time.") from err
        except _SDK_ERRORS as err:
            raise _translate(err) from err
        except Exception:
            log.exception("[anthropic] op=complete error=internal model=%s", model)
            raise

    async def stream_text(
        self,
        *,
        model: str,
        system: str,
        messages: Iterable[MessageParam],
        max_tokens: int,
    ) -> AsyncIterator[str]:
        """Yield the text deltas of one streamed reply."""
        client = self._sdk()
        try:
            stream = await client.messages.create(
                model=model,
                system=system,
                messages=list(messages),
                max_tokens=max_tokens,
                stream=True,
            )
            async with stream:
                async for event in stream:
                    if isinstance(event, RawContentBlockDeltaEvent) and isinstance(
                        event.delta, TextDelta
                    ):
                        yield event.delta.text
        except _SDK_ERRORS as err:
            raise _translate(err) from err
        except Exception:
            log.exception("[anthropic] op=stream error=internal model=%s", model)
            raise

    async def aclose(self) -> None:
        """Close the SDK's connection pool."""
        if self._client is not None:
            await self._client.close()
            self._client = None
