"""Shared fixtures of the provmw-azure tests: a fake provider serving Azure's wire."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from provmw_azure.fake import AzureWire

from provmw.http import HttpClient
from provmw.testing import FakeProvider


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    """A fake provider serving Azure's wire, whose filter withholds answers about "kaboom"."""
    async with FakeProvider(wires=[AzureWire(filtered_words=("kaboom",))]) as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    yield client
    await client.aclose()
