"""What every part of the conformance suite shares: the expectation tables a subclass extends,
the fixtures (a fresh ``FakeProvider`` and ``HttpClient`` per test), and the helpers that call
the adapter and read what reached the wire."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, ClassVar

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    ContentPolicyError,
    ContextLengthExceededError,
    InvalidRequestError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import HttpClient
from provmw.messages import Message, ToolSpec
from provmw.providers import Capabilities, ProviderAdapter, capabilities_of
from provmw.requests import ChatRequest
from provmw.responses import ChatChunk, Usage
from provmw.testing import FakeProvider, Fault

__all__ = ["HELLO", "TWO_CITIES", "WEATHER", "Answer", "ConformanceBase", "leaves"]

WEATHER = ToolSpec(name="weather", description="Weather by city",
                   parameters={"type": "object", "properties": {"city": {"type": "string"}}})
HELLO = ChatRequest((Message.user("hello world"),))
TWO_CITIES = ChatRequest((Message.user("Paris\nLondon"),), tools=(WEATHER,))
_PARAMETERS = {"status": "status_errors", "coded": "coded_errors", "quota": "quota_faults", "hint": "retry_hints",
               "owned": "owned_extra_body", "op_owned": "owned_operation_body"}
# What an adapter without chat (rerank only, say) still passes of the chat modules' cases; the
# rest call chat, and the operations module tests that it refuses chat before any request.
_CHATLESS_CASES = frozenset({"test_an_operation_it_does_not_offer_raises_before_any_request[completion]",
                             "test_an_operation_it_does_not_offer_raises_before_any_request[embeddings]"})
_OPERATIONS_MODULE = "provmw.conformance.operations"


@attrs.frozen
class Answer:
    """What a chat or a whole stream answered, to compare one call with another."""

    text: str
    finish_reason: str | None
    usage: Usage | None


def leaves(value: Any) -> Iterator[Any]:
    """Every scalar of a decoded JSON body, at any depth."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from leaves(item)
    else:
        yield value


class ConformanceBase:
    """The tables, fixtures and helpers of ``AdapterConformance`` (see its docstring)."""

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
    # An extra_body each, naming a body field the call was priced, budgeted and cached on.
    owned_extra_body: ClassVar[Mapping[str, Mapping[str, Any]]] = {
        "model": {"model": "not-the-priced-model"},
        "max_tokens": {"max_tokens": 77_777},
        "messages": {"messages": [{"role": "user", "content": "not what was priced"}]},
        "stream": {"stream": True},
        "no_stream": {"stream": False},
        "stream_options": {"stream_options": {"include_usage": False}},
    }
    image_url: ClassVar[str] = "https://x.test/a.png"
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
        # A test's own name ("test_x[model-chat]") marks one case; the function's name, all of them.
        reason = self.expected_failures.get(request.node.name, self.expected_failures.get(request.function.__name__))
        if reason is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

    @pytest.fixture(autouse=True)
    def _chat_cases(self, request: pytest.FixtureRequest) -> None:
        if self.offers.chat or request.function.__module__ == _OPERATIONS_MODULE \
                or request.node.name in _CHATLESS_CASES:
            return
        pytest.skip(f"{self.adapter.name} offers no chat: its chat cases stand aside (chat is refused, "
                    "tested by test_chat_it_does_not_offer_is_refused_before_any_request)")

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

    def takes_images(self, kind: str) -> bool:
        """Whether the adapter takes images by ``url`` or as inline ``bytes`` (``vision`` is either)."""
        return self.offers.vision and bool(getattr(self.offers, f"vision_{kind}"))

    def needs(self, capability: str) -> None:
        """Skip the test when the adapter does not offer ``capability``."""
        if not getattr(self.offers, capability):
            pytest.skip(f"{self.adapter.name} does not offer {capability}: nothing to test")

    async def stream(self, fake: FakeProvider, http: HttpClient, request: ChatRequest = HELLO) -> list[ChatChunk]:
        return [chunk async for chunk in self.adapter.stream_chat(http, self.config(fake), request)]

    async def answer(self, fake: FakeProvider, http: HttpClient, request: ChatRequest, streaming: bool) -> Answer:
        """What a chat answers to ``request``, or a stream joined (its text, and its last chunk's finish and usage)."""
        if not streaming:
            response = await self.adapter.chat(http, self.config(fake), request)
            return Answer(response.text, response.finish_reason, response.usage)
        chunks = await self.stream(fake, http, request)
        return Answer("".join(c.text for c in chunks), chunks[-1].finish_reason, chunks[-1].usage)

    def _usage_case(self) -> tuple[Mapping[str, Any], Usage]:
        if self.usage_with_cache is None:
            pytest.fail(f"{type(self).__name__}: set usage_with_cache to a raw usage body of the wire, "
                        "cache counts included, and the Usage it means")
        return self.usage_with_cache
