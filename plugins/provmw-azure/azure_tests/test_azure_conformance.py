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
    expected_failures: ClassVar[Mapping[str, str]] = dict.fromkeys(
        [f"test_extra_body_cannot_replace_what_the_call_was_priced_on[{case}]" for case in (
            "model-chat", "model-stream", "max_tokens-chat", "max_tokens-stream", "messages-chat", "messages-stream",
            "stream-chat")],
        "the OpenAI adapter's body, which Azure sends, merges extra_body over the fields it writes (the model, "
        "max_tokens, messages; the manager refuses those keys, the adapter does not)")

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        async with FakeProvider(wires=[AzureWire()]) as server:
            yield server

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return azure_config(fake, **fields)
