"""The Gemini adapter passes provmw's adapter conformance suite over the Gemini wire."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import pytest
from provmw_gemini import GeminiAdapter
from provmw_gemini.fake import GeminiWire

from provmw.config import ProviderConfig
from provmw.errors import AuthenticationError, ProviderError, RateLimitError
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider, Fault


class TestGeminiAdapter(AdapterConformance):
    adapter = GeminiAdapter()
    usage_with_cache = ({"promptTokenCount": 2000, "cachedContentTokenCount": 1536, "candidatesTokenCount": 260,
                         "thoughtsTokenCount": 640, "totalTokenCount": 2900},
                        Usage(input_tokens=2000, output_tokens=900, cached_input_tokens=1536, reasoning_tokens=640))
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        **AdapterConformance.coded_errors,
        "api_key_invalid": (Fault(status=400, code="API_KEY_INVALID"), AuthenticationError),
        "resource_exhausted": (Fault(status=429, code="RESOURCE_EXHAUSTED"), RateLimitError),
    }
    owned_extra_body: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        **AdapterConformance.owned_extra_body,
        "generationConfig": {"generationConfig": {"maxOutputTokens": 77_777}},
        "contents": {"contents": [{"role": "user", "parts": [{"text": "not what was priced"}]}]},
    }

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        async with FakeProvider(wires=[GeminiWire()]) as server:
            yield server

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="gemini", provider="gemini", model="gemini-2.5-flash",
                              base_url=f"{fake.url}/v1beta", **fields)
