"""The Responses API on Azure: the v1 route, the deployment in the body, Azure's key, no api-version."""

from __future__ import annotations

import pytest
from provmw_azure import AzureOpenAIAdapter

from azure_tests.azure_helpers import DEPLOYMENT, azure_config
from provmw.errors import ProviderUnavailableError
from provmw.http import HttpClient
from provmw.operations.responses_api import ResponsesRequest
from provmw.testing import FakeProvider, Fault

ADAPTER = AzureOpenAIAdapter()


async def test_a_response_goes_to_the_v1_route_naming_the_deployment(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.respond(http, azure_config(fake), ResponsesRequest("hello world"))
    sent = fake.received[-1]
    assert (response.text, sent.route, sent.body["model"]) == ("echo: hello world", "azure_responses", DEPLOYMENT)
    assert sent.headers["api-key"] == "azure-test-key" and "Authorization" not in sent.headers


async def test_a_deployment_named_in_the_base_url_is_the_model_sent(fake: FakeProvider, http: HttpClient) -> None:
    config = azure_config(fake, base_url=f"{fake.url}/openai/deployments/{DEPLOYMENT}", model="gpt-4o")
    await ADAPTER.respond(http, config, ResponsesRequest("hello"))
    assert fake.received[-1].body["model"] == DEPLOYMENT


async def test_a_streamed_response_reads_as_openai_s(fake: FakeProvider, http: HttpClient) -> None:
    chunks = [c async for c in ADAPTER.stream_respond(http, azure_config(fake), ResponsesRequest("hello world"))]
    assert "".join(c.text for c in chunks) == "echo: hello world"
    assert chunks[-1].finish_reason == "stop" and chunks[-1].usage is not None


async def test_an_error_event_in_the_stream_is_raised(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(stream_error_after=3), route="azure_responses")
    with pytest.raises(ProviderUnavailableError, match="error event in the stream"):
        _ = [c async for c in ADAPTER.stream_respond(http, azure_config(fake), ResponsesRequest("hello"))]
