"""The agents' exceptions, one tree::

AgentError
├── AnthropicError            the model could not answer (the caller degrades)
│   ├── NoApiKey              no key file, or an empty one
│   ├── AnthropicTimeout      no answer in time
│   ├── AnthropicStatus       4xx/5xx (``status``)
│   ├── AnthropicUnreachable  connection refused, reset, DNS
│   └── MalformedReply        a body that is not the Messages API's, or not the JSON asked for
└── AgentConfigError          an agent or the brand is set up wrongly (the owner must fix it)
"""

from __future__ import annotations


class AgentError(Exception):
    """Something in a conversation with a model went wrong."""


class AnthropicError(AgentError):
    """The Anthropic API did not give a usable answer."""

    reason = "error"


class NoApiKey(AnthropicError):
    """No Anthropic API key is configured."""

    reason = "no-key"


class AnthropicTimeout(AnthropicError):
    """The Anthropic API did not answer in time."""

    reason = "timeout"


class AnthropicStatus(AnthropicError):
    """The Anthropic API answered with an error status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    @property
    def reason(self) -> str:  # type: ignore[override]
        """``http-429``, ``http-500``…"""
        return f"http-{self.status}"


class AnthropicUnreachable(AnthropicError):
    """The Anthropic API could not be reached."""

    reason = "unreachable"


class MalformedReply(AnthropicError):
    """The answer was not what was asked for."""

    reason = "malformed"


class AgentConfigError(AgentError):
    """An agent's files or the account's brand cannot make a prompt."""
