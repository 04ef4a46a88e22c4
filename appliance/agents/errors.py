"""The agents' exceptions, one tree::

AgentError
├── AnthropicError            the model could not answer (the caller degrades)
│   ├── NoApiKey              no key file, or an empty one
│   ├── AnthropicTimeout      no answer in time
│   ├── AnthropicStatus       4xx/5xx (``status``)
│   ├── AnthropicUnreachable  connection refused, reset, DNS
│   ├── MalformedReply        a body that is not the Messages API's, or not the JSON asked for
│   └── SessionFailed         the public Claude Code session (no API key) gave no reply
├── AgentConfigError          an agent or the brand is set up wrongly (the owner must fix it)
└── AgentStoreError           the owner's change to an agent cannot be made (``status``, ``code``)
    ├── InvalidAgentInput     a bad slug, file text or keyword subscription (400)
    ├── NoSuchAgent           no agent of that slug (404)
    └── AgentConflict         the slug is taken, or the agent is the default one (409)
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


class SessionFailed(AnthropicError):
    """A visitor's public Claude Code session could not answer; ``reason`` says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AgentConfigError(AgentError):
    """An agent's files or the account's brand cannot make a prompt."""


class AgentStoreError(AgentError):
    """A change to an agent's folder cannot be made; ``status`` and ``code`` are for HTTP."""

    status = 500
    code = "agent-store"


class InvalidAgentInput(AgentStoreError):
    """A slug, a file's text or a keyword subscription is not acceptable."""

    status = 400
    code = "invalid-agent"


class NoSuchAgent(AgentStoreError):
    """There is no agent of that slug."""

    status = 404
    code = "no-such-agent"


class AgentConflict(AgentStoreError):
    """The change conflicts with what is there: a taken slug, or deleting the default agent."""

    status = 409
    code = "agent-conflict"
