"""A fake provider serving the Gemini wire, a client, and a configuration pointing at the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from provmw_gemini.fake import GeminiWire

from provmw.config import ProviderConfig
from provmw.http import HttpClient
from provmw.testing import FakeProvider


@pytest.fixture
async def gemini_fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(wires=[GeminiWire()]) as server:
        yield server


@pytest.fixture
def gemini(gemini_fake: FakeProvider) -> ProviderConfig:
    return ProviderConfig(identifier="gemini", provider="gemini", model="gemini-2.5-flash",
                          base_url=f"{gemini_fake.url}/v1beta")


@pytest.fixture
async def client() -> AsyncIterator[HttpClient]:
    http = HttpClient()
    yield http
    await http.aclose()
