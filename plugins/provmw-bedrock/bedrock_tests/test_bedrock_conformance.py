"""The Bedrock adapter passes provmw's adapter conformance suite over the fake Bedrock wire."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar

import pytest
from provmw_bedrock import BedrockAdapter
from provmw_bedrock.fake import BedrockWire

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.providers import ProviderAdapter
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider, Fault

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


class TestBedrockConformance(AdapterConformance):
    adapter: ClassVar[ProviderAdapter] = BedrockAdapter()
    usage_with_cache = ({"inputTokens": 10, "outputTokens": 4, "totalTokens": 1514, "cacheReadInputTokens": 1000,
                         "cacheWriteInputTokens": 500, "cacheDetails": [{"ttl": "1h", "inputTokens": 200}]},
                        Usage(input_tokens=1510, output_tokens=4, cached_input_tokens=1000, cache_write_5m_tokens=300,
                              cache_write_1h_tokens=200))
    status_errors: ClassVar[Mapping[int, type[ProviderError]]] = {
        **AdapterConformance.status_errors, 424: ProviderUnavailableError}
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        **AdapterConformance.coded_errors,
        "context_length": (Fault(status=400, message="Input is too long for requested model."),
                           ContextLengthExceededError),
        "model_not_ready": (Fault(status=429, code="ModelNotReadyException"), ProviderUnavailableError),
        "throttling": (Fault(status=429, code="ThrottlingException"), RateLimitError),
        "model_timeout": (Fault(status=408, code="ModelTimeoutException"), ProviderTimeoutError),
        "access_denied": (Fault(status=403, code="AccessDeniedException"), AuthenticationError),
        "validation": (Fault(status=400, code="ValidationException"), InvalidRequestError),
        "header_type": (Fault(status=400, headers={"x-amzn-errortype": "ThrottlingException:http://internal/"}),
                        RateLimitError),
    }

    quota_faults: ClassVar[Mapping[str, tuple[Fault, bool]]] = {
        **AdapterConformance.quota_faults,
        "throttling": (Fault(status=429, code="ThrottlingException"), False),
        "service_quota": (Fault(status=429, code="ServiceQuotaExceededException"), True),
    }
    stream_error: ClassVar[tuple[Fault, type[ProviderError]]] = (
        Fault(stream_error_after=0, code="throttlingException"), RateLimitError)
    owned_extra_body: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        **AdapterConformance.owned_extra_body,
        "inferenceConfig": {"inferenceConfig": {"maxTokens": 77_777}},
    }
    # Bedrock takes images as bytes or S3 locations, never a web URL (refused before sending).
    image_url = "s3://bucket/a.png"
    # Rerank is Agent Runtime's /rerank (the fake's bedrock_rerank route); its answer carries no id.
    operation_routes: ClassVar[Mapping[str, str]] = {**AdapterConformance.operation_routes, "rerank": "bedrock_rerank"}
    operation_models: ClassVar[Mapping[str, str]] = {**AdapterConformance.operation_models,
                                                     "rerank": "cohere.rerank-v3-5:0"}
    operation_ids: ClassVar[Mapping[str, str]] = {
        op: prefix for op, prefix in AdapterConformance.operation_ids.items() if op != "rerank"}

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        async with FakeProvider(wires=[BedrockWire()]) as server:
            yield server

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="bedrock", provider="bedrock", model=MODEL, base_url=fake.url, **fields)
