"""The provider adapter conformance suite: pytest tests an adapter inherits.

Subclass ``AdapterConformance`` in a test module (its name must start with ``Test``), set
``adapter`` and ``usage_with_cache``, and implement ``config(fake, **fields)`` to point at
the ``FakeProvider`` wire the adapter speaks; pytest-asyncio (``asyncio_mode = "auto"``)
runs the tests::

    class TestAcmeAdapter(AdapterConformance):
        adapter = AcmeAdapter()
        usage_with_cache = ({"in": 10, "cached": 4, "out": 2},
                            Usage(input_tokens=10, cached_input_tokens=4, output_tokens=2))
        status_errors = {**AdapterConformance.status_errors, 529: ProviderUnavailableError}

        def config(self, fake, **fields):
            return ProviderConfig(identifier="acme", provider="acme", model="m",
                                  base_url=fake.openai_base_url, **fields)

What runs follows the adapter's ``capabilities``: an operation it does not offer must
raise ``UnsupportedOperationError`` before any request; one it offers must work. The
expectations are data a subclass extends with what its provider documents:
``status_errors`` and ``coded_errors`` (the error table onto the tree), ``quota_faults``
(a 429 with and without an exhausted quota), ``stream_error`` (an in-band error event),
``retry_hints`` (the Retry-After header and the wire's own hints) and ``usage_with_cache``
(a raw usage body of the wire, cache counts included, and the ``Usage`` it means).
``expected_failures`` maps a test's name to the reason it is known to fail: each one is
marked ``xfail(strict=True)``, so it must fail until the reason goes. Import it as
``provmw.testing.AdapterConformance``.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, ClassVar

import attrs
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
from provmw.providers import Capabilities, ProviderAdapter, capabilities_of
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.responses import ChatChunk, Usage
from provmw.testing import FakeProvider, Fault

__all__ = ["SENTINEL_KEY", "AdapterConformance"]

SENTINEL_KEY = "sk-CONFORMANCE-9d41-never-in-an-error"

_WEATHER = ToolSpec(name="weather", description="Weather by city",
                    parameters={"type": "object", "properties": {"city": {"type": "string"}}})
_HELLO = ChatRequest((Message.user("hello world"),))
_TWO_CITIES = ChatRequest((Message.user("Paris\nLondon"),), tools=(_WEATHER,))
_FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
             "required": ["city", "days"], "additionalProperties": False}
_LEAKY_FAULTS = {"401": Fault(status=401), "500": Fault(status=500), "malformed": Fault(malformed_json=True),
                 "dropped": Fault(drop_connection=True)}
_PARAMETERS = {"status": "status_errors", "coded": "coded_errors", "quota": "quota_faults", "hint": "retry_hints"}


class AdapterConformance:
    """Subclass in your adapter's tests, set ``adapter`` and ``usage_with_cache``, implement ``config(fake)``."""

    adapter: ClassVar[ProviderAdapter]
    usage_with_cache: ClassVar[tuple[Mapping[str, Any], Usage] | None] = None
    status_errors: ClassVar[Mapping[int, type[ProviderError]]] = {
        401: AuthenticationError, 403: AuthenticationError, 404: InvalidRequestError,
        408: ProviderTimeoutError, 413: InvalidRequestError, 429: RateLimitError,
        500: ProviderUnavailableError, 502: ProviderUnavailableError, 503: ProviderUnavailableError,
    }
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        "context_length": (Fault(status=400, code="context_length_exceeded"), ContextLengthExceededError),
        "content_policy": (Fault(status=400, code="content_policy_violation"), ContentPolicyError),
        "overloaded": (Fault(status=503, code="overloaded"), ProviderUnavailableError),
    }
    quota_faults: ClassVar[Mapping[str, tuple[Fault, bool]]] = {
        "throttled": (Fault(status=429), False),
        "quota": (Fault(status=429, code="insufficient_quota"), True),
    }
    stream_error: ClassVar[tuple[Fault, type[ProviderError]]] = (Fault(stream_error_after=0),
                                                                 ProviderUnavailableError)
    retry_hints: ClassVar[Mapping[str, tuple[Fault, float]]] = {
        "retry-after": (Fault(status=429, headers={"retry-after": "4"}), 4.0),
    }
    expected_failures: ClassVar[Mapping[str, str]] = {}

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        """A configuration for ``adapter`` pointing at ``fake``, with ``fields`` applied."""
        raise NotImplementedError("a conformance subclass points its adapter at the fake provider")

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize the table-driven tests from this class's own (possibly extended) tables."""
        for argument, table in _PARAMETERS.items():
            if argument in metafunc.fixturenames:
                rows: Mapping[Any, Any] = getattr(self, table)
                metafunc.parametrize(argument, list(rows.items()), ids=[str(key) for key in rows])

    @pytest.fixture(autouse=True)
    def _known_failures(self, request: pytest.FixtureRequest) -> None:
        reason = self.expected_failures.get(request.function.__name__)
        if reason is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

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

    @property
    def offers(self) -> Capabilities:
        return capabilities_of(self.adapter)

    def needs(self, capability: str) -> None:
        """Skip the test when the adapter does not offer ``capability``."""
        if not getattr(self.offers, capability):
            pytest.skip(f"{self.adapter.name} does not offer {capability}: nothing to test")

    async def stream(self, fake: FakeProvider, http: HttpClient, request: ChatRequest = _HELLO) -> list[ChatChunk]:
        return [chunk async for chunk in self.adapter.stream_chat(http, self.config(fake), request)]

    def test_the_adapter_declares_its_capabilities(self) -> None:
        declared = getattr(self.adapter, "capabilities", None)
        assert isinstance(declared, Capabilities), f"capabilities must be a Capabilities, not {declared!r}"
        flags = attrs.asdict(declared)
        assert [name for name, value in flags.items() if type(value) is not bool] == []  # yes or no, never 1 or None
        assert declared.chat

    async def test_chat_answers_text_and_usage(self, fake: FakeProvider, http: HttpClient) -> None:
        config = self.config(fake)
        response = await self.adapter.chat(http, config, _HELLO)
        assert (response.text, response.finish_reason) == ("echo: hello world", "stop")
        assert (response.provider, response.served_by) == (self.adapter.name, config.identifier)
        assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 3)

    async def test_completion_answers_a_bare_prompt(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("completion")
        response = await self.adapter.complete(http, self.config(fake), CompletionRequest("once upon"))
        assert response.text == "echo: once upon"

    async def test_several_calls_of_one_tool_come_in_one_turn(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("tools")
        response = await self.adapter.chat(http, self.config(fake), _TWO_CITIES)
        # the argument's name is the fake's choice (the declared "city", or a plugin fake's "query")
        assert [(c.name, list(json.loads(c.arguments).values())) for c in response.tool_calls] == [
            ("weather", ["Paris"]), ("weather", ["London"])]
        assert len({c.id for c in response.tool_calls}) == 2
        assert response.finish_reason == "tool_calls"

    async def test_tool_result_goes_back_for_an_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("tools")
        config = self.config(fake)
        first = await self.adapter.chat(http, config, ChatRequest((Message.user("Paris"),), tools=(_WEATHER,)))
        call = first.tool_calls[0]
        history = (Message.user("Paris"), Message.assistant(tool_calls=[call]), Message.tool(call.id, "sunny"))
        response = await self.adapter.chat(http, config, ChatRequest(history, tools=(_WEATHER,)))
        assert (response.tool_calls, response.finish_reason) == ((), "stop")
        assert response.text.startswith("echo:")

    async def test_image_parts_reach_the_wire(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("vision")
        parts = (TextPart("what?"), ImagePart(url="https://x.test/a.png"), ImagePart(data=b"abc"))
        response = await self.adapter.chat(http, self.config(fake), ChatRequest((Message.user(parts),)))
        assert response.text == "I see 2 images. echo: what?"

    async def test_a_response_schema_gets_a_json_answer_that_follows_it(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("schema")
        request = ChatRequest((Message.user("Paris"),), response_schema=_FORECAST)
        response = await self.adapter.chat(http, self.config(fake), request)
        answer = json.loads(response.text)
        assert (set(answer), type(answer["city"]), type(answer["days"])) == ({"city", "days"}, str, int)
        assert (response.tool_calls, response.finish_reason) == ((), "stop")

    async def test_usage_counts_the_cache(self, fake: FakeProvider, http: HttpClient) -> None:
        raw, expected = self._usage_case()
        fake.script(Fault(usage=raw))
        assert (await self.adapter.chat(http, self.config(fake), _HELLO)).usage == expected

    async def test_stream_gives_text_then_a_last_chunk_with_finish_and_usage(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        chunks = await self.stream(fake, http)
        assert "".join(c.text for c in chunks).strip() == "echo: hello world"
        assert chunks[-1].finish_reason == "stop"
        assert chunks[-1].usage is not None
        assert (chunks[-1].usage.input_tokens, chunks[-1].usage.output_tokens) == (2, 3)

    async def test_a_stream_counts_the_cache_on_its_last_chunk(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        raw, expected = self._usage_case()
        fake.script(Fault(usage=raw))
        assert (await self.stream(fake, http))[-1].usage == expected

    async def test_a_stream_gives_each_tool_call_whole(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        self.needs("tools")
        chunks = await self.stream(fake, http, _TWO_CITIES)
        calls = [call for chunk in chunks for call in chunk.tool_calls]
        assert [(c.name, list(json.loads(c.arguments).values())) for c in calls] == [
            ("weather", ["Paris"]), ("weather", ["London"])]
        assert len({c.id for c in calls}) == 2
        assert chunks[-1].finish_reason == "tool_calls"

    async def test_an_error_event_before_any_content_raises_its_mapped_error(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fault, error = self.stream_error
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await anext(self.adapter.stream_chat(http, self.config(fake), _HELLO))
        assert type(caught.value) is error

    async def test_a_malformed_event_is_a_malformed_response(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(malformed_after=1))
        with pytest.raises(MalformedResponseError):
            await self.stream(fake, http)

    async def test_a_cut_stream_raises_instead_of_a_short_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(cut_stream_after=3))
        with pytest.raises((ProviderConnectionError, MalformedResponseError)):
            await self.stream(fake, http)

    async def test_a_stream_error_status_raises_before_any_chunk(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("streaming")
        fake.script(Fault(status=429, headers={"retry-after": "3"}))
        with pytest.raises(RateLimitError) as caught:
            await anext(self.adapter.stream_chat(http, self.config(fake), _HELLO))
        assert caught.value.retry_after_s == 3.0

    async def test_embeddings_come_in_input_order(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("embeddings")
        config = self.config(fake)
        batch = await self.adapter.embed(http, config, EmbeddingRequest(("a", "b", "c")))
        alone = await self.adapter.embed(http, config, EmbeddingRequest(("b",)))
        assert len(set(batch.vectors)) == 3
        assert batch.vectors[1] == alone.vectors[0]

    @pytest.mark.parametrize("operation", ["completion", "embeddings", "streaming"])
    async def test_an_operation_it_does_not_offer_raises_before_any_request(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        if getattr(self.offers, operation):
            pytest.skip(f"{self.adapter.name} offers {operation}: there is nothing to refuse")
        config = self.config(fake)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "completion": lambda: self.adapter.complete(http, config, CompletionRequest("x")),
            "embeddings": lambda: self.adapter.embed(http, config, EmbeddingRequest(("x",))),
            "streaming": lambda: anext(self.adapter.stream_chat(http, config, _HELLO))}
        with pytest.raises(UnsupportedOperationError, match=operation.removesuffix("s")):
            await calls[operation]()
        assert fake.count() == 0

    async def test_an_error_status_maps_onto_the_tree(
            self, fake: FakeProvider, http: HttpClient, status: tuple[int, type[ProviderError]]) -> None:
        code, error = status
        fake.script(Fault(status=code, message=f"boom {code}"))
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert type(caught.value) is error
        assert (caught.value.status, caught.value.provider) == (code, self.adapter.name)
        assert f"boom {code}" in str(caught.value)

    async def test_an_error_code_in_the_body_refines_the_status(
            self, fake: FakeProvider, http: HttpClient, coded: tuple[str, tuple[Fault, type[ProviderError]]]) -> None:
        _, (fault, error) = coded
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert type(caught.value) is error

    async def test_a_429_says_whether_the_quota_is_gone(
            self, fake: FakeProvider, http: HttpClient, quota: tuple[str, tuple[Fault, bool]]) -> None:
        _, (fault, exhausted) = quota
        fake.script(fault)
        with pytest.raises(RateLimitError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert caught.value.quota_exhausted is exhausted

    async def test_a_retry_hint_arrives_as_retry_after_s(
            self, fake: FakeProvider, http: HttpClient, hint: tuple[str, tuple[Fault, float]]) -> None:
        _, (fault, seconds) = hint
        fake.script(fault)
        with pytest.raises(ProviderError) as caught:
            await self.adapter.chat(http, self.config(fake), _HELLO)
        assert caught.value.retry_after_s == seconds

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

    def _usage_case(self) -> tuple[Mapping[str, Any], Usage]:
        if self.usage_with_cache is None:
            pytest.fail(f"{type(self).__name__}: set usage_with_cache to a raw usage body of the wire, "
                        "cache counts included, and the Usage it means")
        return self.usage_with_cache
