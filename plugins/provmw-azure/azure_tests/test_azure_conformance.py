"""The Azure adapter passes the conformance suite every adapter passes, on Azure's wire."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from provmw_azure import AzureOpenAIAdapter
from provmw_azure.fake import AzureWire

from azure_tests.azure_helpers import azure_config
from provmw.config import ProviderConfig
from provmw.testing import AdapterConformance, FakeProvider


class TestAzureAdapter(AdapterConformance):
    adapter = AzureOpenAIAdapter()

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        async with FakeProvider(wires=[AzureWire()]) as server:
            yield server

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return azure_config(fake, **fields)
