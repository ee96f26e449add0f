"""What Azure says differently from OpenAI, over real HTTP: routes, api-version, key, filters, hints."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from provmw_azure import DEFAULT_API_VERSION, AzureOpenAIAdapter
from provmw_azure.fake import AzureWire

from azure_tests.azure_helpers import DEPLOYMENT, azure_config
from provmw.errors import (
    ConfigurationError,
    ContentPolicyError,
    InvalidRequestError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import HttpClient
from provmw.messages import Message, ToolSpec
from provmw.requests import ChatRequest, CompletionRequest
from provmw.testing import FakeProvider, Fault
from provmw.testing.wires import openai_chat

ADAPTER = AzureOpenAIAdapter()
HELLO = ChatRequest((Message.user("hello world"),))
FILTERED = ChatRequest((Message.user("tell me about kaboom"),))
WEATHER = ToolSpec(name="weather", description="Weather by city", parameters={"type": "object"})


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[str, list[str]]]:
    """A loopback server answering chat on any deployment, recording each request's path and query."""
    seen: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.path_qs)
        return web.json_response(openai_chat(await request.json()))

    app = web.Application()
    app.router.add_post("/openai/deployments/{name}/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    await runner.cleanup()


async def test_each_request_carries_the_default_api_version(
        recorder: tuple[str, list[str]], http: HttpClient) -> None:
    url, seen = recorder
    config = azure_config(FakeProvider(), base_url=url)
    await ADAPTER.chat(http, config, HELLO)
    assert seen == [f"/openai/deployments/{DEPLOYMENT}/chat/completions?api-version={DEFAULT_API_VERSION}"]


async def test_the_base_url_query_chooses_the_api_version(recorder: tuple[str, list[str]], http: HttpClient) -> None:
    url, seen = recorder
    config = azure_config(FakeProvider(), base_url=f"{url}?api-version=2025-01-01-preview")
    await ADAPTER.chat(http, config, HELLO)
    assert seen[0].endswith("/chat/completions?api-version=2025-01-01-preview")


async def test_a_deployment_in_the_base_url_leaves_model_to_name_the_model(
        fake: FakeProvider, http: HttpClient) -> None:
    config = azure_config(fake, model="gpt-4o", base_url=f"{fake.url}/openai/deployments/team-a")
    answer = await ADAPTER.chat(http, config, HELLO)
    assert answer.text == "echo: hello world"
    assert fake.count(route="azure_chat", model="team-a") == 1


async def test_the_key_goes_in_the_api_key_header_and_nowhere_else(fake: FakeProvider, http: HttpClient) -> None:
    await ADAPTER.chat(http, azure_config(fake, api_key="k-123456"), HELLO)
    headers = fake.received[-1].headers
    assert headers["api-key"] == "k-123456"
    assert "Authorization" not in headers


async def test_no_key_and_no_token_provider_is_refused_before_any_request(
        fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(ConfigurationError, match="api_key_env"):
        await ADAPTER.chat(http, azure_config(fake, api_key=None), HELLO)
    assert fake.count() == 0


async def test_a_configuration_without_base_url_is_refused(http: HttpClient) -> None:
    with pytest.raises(ConfigurationError, match="needs base_url"):
        await ADAPTER.chat(http, azure_config(FakeProvider(), base_url=None), HELLO)


async def test_an_answer_the_filter_withheld_is_a_content_policy_error(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(ContentPolicyError, match=r"violence \(high\)") as caught:
        await ADAPTER.chat(http, azure_config(fake), FILTERED)
    assert (caught.value.provider, caught.value.code) == ("azure", "content_filter")


async def test_a_completion_the_filter_withheld_is_a_content_policy_error(
        fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(ContentPolicyError):
        await ADAPTER.complete(http, azure_config(fake), CompletionRequest("kaboom"))


async def test_a_stream_the_filter_ended_raises_a_content_policy_error(fake: FakeProvider, http: HttpClient) -> None:
    with pytest.raises(ContentPolicyError, match="violence"):
        async for _ in ADAPTER.stream_chat(http, azure_config(fake), FILTERED):
            pass


async def test_a_refused_prompt_names_the_filtered_categories(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=400, code="content_filter", message="The response was filtered"))
    with pytest.raises(ContentPolicyError, match=r"The response was filtered \(filtered: hate \(high\)\)") as caught:
        await ADAPTER.chat(http, azure_config(fake), HELLO)
    assert caught.value.status == 400


async def test_retry_after_ms_is_preferred_to_retry_after(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=429, headers={"retry-after": "2", "retry-after-ms": "1500"}))
    with pytest.raises(RateLimitError) as caught:
        await ADAPTER.chat(http, azure_config(fake), HELLO)
    assert caught.value.retry_after_s == 1.5


async def test_a_stream_honours_retry_after_ms(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=429, headers={"retry-after-ms": "250"}))
    with pytest.raises(RateLimitError) as caught:
        await anext(ADAPTER.stream_chat(http, azure_config(fake), HELLO))
    assert caught.value.retry_after_s == 0.25


async def test_a_404_names_the_deployment_and_api_version(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(status=404, code="DeploymentNotFound", message="The API deployment does not exist"))
    with pytest.raises(InvalidRequestError) as caught:
        await ADAPTER.chat(http, azure_config(fake), HELLO)
    assert f"is {DEPLOYMENT!r} a deployment of 127.0.0.1" in str(caught.value)
    assert DEFAULT_API_VERSION in str(caught.value) and "/v1" not in str(caught.value)


async def test_the_prompt_verdicts_event_of_a_stream_yields_nothing(fake: FakeProvider, http: HttpClient) -> None:
    chunks = [c async for c in ADAPTER.stream_chat(http, azure_config(fake), HELLO)]
    assert chunks[0].text == "echo: "
    assert fake.received[-1].body["stream_options"] == {"include_usage": True}


def test_the_wire_serves_deployment_routes_beside_the_builtin_ones() -> None:
    routes = FakeProvider(wires=[AzureWire()]).routes
    assert {"azure_chat", "azure_completion", "azure_embedding", "chat"} <= set(routes)


async def test_streamed_tool_calls_of_one_name_come_whole_each(fake: FakeProvider, http: HttpClient) -> None:
    request = ChatRequest((Message.user("Paris\nRome\nOslo"),), tools=(WEATHER,))
    chunks = [c async for c in ADAPTER.stream_chat(http, azure_config(fake), request)]
    calls = [call for chunk in chunks for call in chunk.tool_calls]
    assert [(c.name, c.arguments) for c in calls] == [("weather", f'{{"query": "{city}"}}')
                                                      for city in ("Paris", "Rome", "Oslo")]
    assert chunks[-1].finish_reason == "tool_calls"


async def test_an_error_event_inside_a_stream_is_mapped(fake: FakeProvider, http: HttpClient) -> None:
    fake.script(Fault(stream_error_after=2, message="the deployment is overloaded"))
    with pytest.raises(ProviderUnavailableError, match="the deployment is overloaded"):
        async for _ in ADAPTER.stream_chat(http, azure_config(fake), HELLO):
            pass
