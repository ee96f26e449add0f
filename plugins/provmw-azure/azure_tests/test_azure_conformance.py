"""The Azure adapter passes the conformance suite every adapter passes, on Azure's wire."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import pytest
from provmw_azure import AzureOpenAIAdapter
from provmw_azure.fake import AzureWire

from azure_tests.azure_helpers import azure_config
from provmw.config import ProviderConfig
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider


class TestAzureAdapter(AdapterConformance):
    adapter = AzureOpenAIAdapter()
    usage_with_cache = ({"prompt_tokens": 2000, "completion_tokens": 900,
                         "prompt_tokens_details": {"cached_tokens": 1536},
                         "completion_tokens_details": {"reasoning_tokens": 640}},
                        Usage(input_tokens=2000, output_tokens=900, cached_input_tokens=1536, reasoning_tokens=640))
    # AzureWire's routes: the v1 Responses route and the deployment's media routes (no moderation).
    operation_routes: ClassVar[Mapping[str, str]] = {
        **AdapterConformance.operation_routes, "responses": "azure_responses", "images": "azure_images",
        "image_edits": "azure_image_edits", "transcription": "azure_transcriptions", "speech": "azure_speech"}

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        async with FakeProvider(wires=[AzureWire()]) as server:
            yield server

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return azure_config(fake, **fields)
