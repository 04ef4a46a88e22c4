"""The fake Messages API on loopback, and settings that point the agents at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from appliance.agents.anthropic_client import AnthropicClient
from appliance.core.config import Settings, load_settings
from tests.fakes.anthropic_api import FakeAnthropic

API_KEY = "sk-ant-test-0123456789abcdef"


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as api:
        yield api


def agent_settings(fake: FakeAnthropic, data: Path, *, key: bool = True, **env: str) -> Settings:
    """Settings whose Anthropic API is ``fake``; the key file exists unless ``key`` is False."""
    if key:
        (data / "keys").mkdir(parents=True, exist_ok=True)
        (data / "keys" / "anthropic-api-key").write_text(API_KEY + "\n")
    return load_settings(
        {"MAXY_DATA_DIR": str(data), "MAXY_ANTHROPIC_BASE_URL": fake.url, **env},
        config_file=Path("/dev/null"),
    )


@pytest.fixture
def settings(fake: FakeAnthropic, tmp_path: Path) -> Settings:
    return agent_settings(fake, tmp_path / "data", MAXY_GATEWAY_TIMEOUT="1.0")


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[AnthropicClient]:
    anthropic = AnthropicClient(settings)
    yield anthropic
    await anthropic.aclose()
