"""The provider adapter conformance suite: pytest tests an adapter inherits.

Subclass ``AdapterConformance`` in a test module (its name must start with ``Test``), set
``adapter`` and implement ``config(fake, **fields)`` to point at the ``FakeProvider`` wire
the adapter speaks; pytest-asyncio (``asyncio_mode = "auto"``) runs the tests::

    class TestAcmeAdapter(AdapterConformance):
        adapter = AcmeAdapter()
        supports_embeddings = False
        status_errors = {**AdapterConformance.status_errors, 529: ProviderUnavailableError}

        def config(self, fake, **fields):
            return ProviderConfig(identifier="acme", provider="acme", model="m",
                                  base_url=fake.openai_base_url, **fields)

The error expectations (``status_errors``, ``coded_errors``) are data: extend them with the
statuses and body codes the provider documents. Import it as ``provmw.testing.AdapterConformance``.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar

import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    ContentPolicyError,
    ContextLengthExceededError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart, ToolSpec
from provmw.providers import ProviderAdapter
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.testing import FakeProvider, Fault

__all__ = ["SENTINEL_KEY", "AdapterConformance"]

SENTINEL_KEY = "sk-CONFORMANCE-9d41-never-in-an-error"

_WEATHER = ToolSpec(name="weather", description="Weather by city",
                    parameters={"type": "object", "properties": {"city": {"type": "string"}}})
_HELLO = ChatRequest((Message.user("hello world"),))
_LEAKY_FAULTS = {"401": Fault(status=401), "500": Fault(status=500), "malformed": Fault(malformed_json=True),
                 "dropped": Fault(drop_connection=True)}


class AdapterConformance:
    """Subclass in your adapter's tests, set ``adapter`` and implement ``config(fake)``."""

    adapter: ClassVar[ProviderAdapter]
    supports_completion: ClassVar[bool] = True
    supports_embeddings: ClassVar[bool] = True
    status_errors: ClassVar[Mapping[int, type[ProviderError]]] = {
        401: AuthenticationError, 403: AuthenticationError, 404: InvalidRequestError,
        408: ProviderTimeoutError, 413: InvalidRequestError, 429: RateLimitError,
        500: ProviderUnavailableError, 503: ProviderUnavailableError,
    }
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        "context_length": (Fault(status=400, code="context_length_exceeded"), ContextLengthExceededError),
        "content_policy": (Fault(status=400, code="content_policy_violation"), ContentPolicyError),
    }

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        """A configuration for ``adapter`` pointing at ``fake``, with ``fields`` applied."""
        raise NotImplementedError("a conformance subclass points its adapter at the fake provider")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize the error tests from this class's own (possibly extended) tables."""
        if "status" in metafunc.fixturenames:
            statuses = sorted(self.status_errors.items())
            metafunc.parametrize(("status", "error"), statuses, ids=[str(s) for s, _ in statuses])
        if "coded" in metafunc.fixturenames:
            metafunc.parametrize("coded", list(self.coded_errors.values()), ids=list(self.coded_errors))

    @pytest.fixture
    async def fake(self) -> AsyncIterator[FakeProvider]:
        """A fresh fake provider on loopback for each test."""
        async with FakeProvider() as server:
            yield server

    @pytest.fixture
    async def http(self) -> AsyncIterator[HttpClient]:
        """A fresh HTTP client for each test, closed after it."""
        client = HttpClient()
        yield client
        await client.aclose()

    async def test_chat_answers_text_and_usage(self, fake: FakeProvider, http: HttpClient) -> None:
        config = self.config(fake)
        response = await self.adapter.chat(http, config, _HELLO)
        assert (response.text, response.finish_reason) == ("echo: hello world", "stop")
        assert (response.provider, response.served_by) == (self.adapter.name, config.identifier)
        assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 3)

    async def test_completion_answers_a_bare_prompt(self, fake: FakeProvider, http: HttpClient) -> None:
        if not self.supports_completion:
            pytest.skip("the adapter declares no completion")
        response = await self.adapter.complete(http, self.config(fake), CompletionRequest("once upon"))
        assert response.text == "echo: once upon"

    async def test_tool_request_answers_with_tool_calls(self, fake: FakeProvider, http: HttpClient) -> None:
        request = ChatRequest((Message.user("Paris"),), tools=(_WEATHER,))
        response = await self.adapter.chat(http, self.config(fake), request)
        assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [("weather", {"query": "Paris"})]
        assert response.tool_calls[0].id
        assert response.finish_reason == "tool_calls"

    async def test_tool_result_goes_back_for_an_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        config = self.config(fake)
        first = await self.adapter.chat(http, config, ChatRequest((Message.user("Paris"),), tools=(_WEATHER,)))
        call = first.tool_calls[0]
        history = (Message.user("Paris"), Message.assistant(tool_calls=[call]), Message.tool(call.id, "sunny"))
        response = await self.adapter.chat(http, config, ChatRequest(history, tools=(_WEATHER,)))
        assert (response.tool_calls, response.finish_reason) == ((), "stop")
        assert response.text.startswith("echo:")

    async def test_image_parts_reach_the_wire(self, fake: FakeProvider, http: HttpClient) -> None:
        parts = (TextPart("what?"), ImagePart(url="https://x.test/a.png"), ImagePart(data=b"abc"))
        response = await self.adapter.chat(http, self.config(fake), ChatRequest((Message.user(parts),)))
        assert response.text == "I see 2 images. echo: what?"

    async def test_stream_gives_text_then_a_last_chunk_with_finish_and_usage(
            self, fake: FakeProvider, http: HttpClient) -> None:
        chunks = [c async for c in self.adapter.stream_chat(http, self.config(fake), _HELLO)]
        assert "".join(c.text for c in chunks).strip() == "echo: hello world"
        assert chunks[-1].finish_reason == "stop"
        assert chunks[-1].usage is not None
        assert (chunks[-1].usage.input_tokens, chunks[-1].usage.output_tokens) == (2, 3)

    async def test_a_cut_stream_raises_instead_of_a_short_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(cut_stream_after=3))
        with pytest.raises((ProviderConnectionError, MalformedResponseError)):
            async for _ in self.adapter.stream_chat(http, self.config(fake), _HELLO):
                pass

    async def test_a_stream_error_status_raises_before_any_chunk(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(status=429, headers={"retry-after": "3"}))
        chunks = self.adapter.stream_chat(http, self.config(fake), _HELLO)
        with pytest.raises(RateLimitError) as caught:
            await anext(chunks)
        assert caught.value.retry_after_s == 3.0

    async def test_embeddings_come_in_input_order(self, fake: FakeProvider, http: HttpClient) -> None:
        if not self.supports_embeddings:
            pytest.skip("the adapter declares no embeddings")
        config = self.config(fake)
        batch = await self.adapter.embed(http, config, EmbeddingRequest(("a", "b", "c")))
        alone = await self.adapter.embed(http, config, EmbeddingRequest(("b",)))
        assert len(set(batch.vectors)) == 3
        assert batch.vectors[1] == alone.vectors[0]

    @pytest.mark.parametrize("operation", ["completion", "embedding"])
    async def test_an_unsupported_operation_raises_before_any_request(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        supported = {"completion": self.supports_completion, "embedding": self.supports_embeddings}
        if supported[operation]:
            pytest.skip(f"the adapter declares {operation}")
        config = self.config(fake)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "completion": lambda: self.adapter.complete(http, config, CompletionRequest("x")),
            "embedding": lambda: self.adapter.embed(http, config, EmbeddingRequest(("x",)))}
        with pytest.raises(UnsupportedOperationError, match=operation):
            await calls[operation]()
        assert fake.count() == 0

    async def test_an_error_status_maps_onto_the_tree(
            self, fake: FakeProvider, http: HttpClient, status: int, error: type[ProviderError]) -> None:
        fake.script(Fault(status=status, message=f"boom {status}"))
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert type(caught.value) is error
        assert (caught.value.status, caught.value.provider) == (status, self.adapter.name)
        assert f"boom {status}" in str(caught.value)

    async def test_an_error_code_in_the_body_refines_the_status(
            self, fake: FakeProvider, http: HttpClient, coded: tuple[Fault, type[ProviderError]]) -> None:
        fault, error = coded
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert type(caught.value) is error

    async def test_retry_after_arrives_as_retry_after_s(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(status=429, headers={"retry-after": "4"}))
        with pytest.raises(RateLimitError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert caught.value.retry_after_s == 4.0

    async def test_a_malformed_2xx_body_is_a_malformed_response(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(malformed_json=True))
        with pytest.raises(MalformedResponseError):
            await self.adapter.chat(http, self.config(fake), _HELLO)

    async def test_a_dropped_connection_is_a_connection_error(self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(drop_connection=True))
        with pytest.raises(ProviderConnectionError):
            await self.adapter.chat(http, self.config(fake), _HELLO)

    @pytest.mark.parametrize("fault", list(_LEAKY_FAULTS.values()), ids=list(_LEAKY_FAULTS))
    async def test_no_error_or_log_line_holds_the_api_key(
            self, fake: FakeProvider, http: HttpClient, caplog: pytest.LogCaptureFixture, fault: Fault) -> None:
        caplog.set_level(logging.DEBUG)
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake, api_key=SENTINEL_KEY), _HELLO)
        assert SENTINEL_KEY in str(dict(fake.received[-1].headers)), "the adapter did not send the key"
        error = caught.value
        assert SENTINEL_KEY not in "".join(traceback.format_exception(error)) + repr(error) + str(vars(error))
        assert SENTINEL_KEY not in caplog.text
