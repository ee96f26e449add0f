"""Public test helpers: ``FakeProvider``, a real HTTP server on loopback with scripted faults.

It speaks the OpenAI (``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``)
and Anthropic (``/v1/messages``) wire formats with deterministic answers ("echo: <last
user text>", one token per word, vectors from SHA-256), so tests, benchmarks and the demo
talk real HTTP without a key or a network. Like a real provider it refuses (400) to embed
with a model it knows as a chat model (``gpt-4o-mini``: the price table gives it an output
ceiling); any other name is served as asked::

    async with FakeProvider() as fake:
        fake.script(Fault(status=503), model="primary-model")   # next matching request fails
        config = ProviderConfig(identifier="p", provider="openai", model="primary-model",
                                base_url=fake.openai_base_url)
        ...
        assert fake.count(model="primary-model") == 2

Like a real provider it can hold each model to a number of requests a minute (``limit``,
answering 429 with ``retry-after`` beyond it, on an injectable clock, and telling each answer
under it the requests left and when one more is let in: ``x-ratelimit-remaining-requests`` /
``x-ratelimit-reset-requests`` on the OpenAI wire, ``anthropic-ratelimit-requests-*`` on
Anthropic's) and report the part of a
chat prompt it saw before on the same model as cached input (``prompt_cache=True``)::

    fake.limit(100, model="east-model", clock=clock)    # the 101st request in 60 s: 429
    FakeProvider(prompt_cache=True)                     # turn 2 of a conversation: turn 1 cached

Run it standalone with ``python -m provmw.testing --port 8765`` or ``provmw fake-provider``.

For middleware unit tests, ``call_context`` builds a context with the facts a test needs
in one line, ``ScriptedNext`` stands in for the inner layers (each call returns or raises
the next scripted outcome) and ``FakeClock`` is a clock whose ``sleep`` advances time
instead of waiting::

    clock = FakeClock()
    retry = RetryMiddleware(sleep=clock.sleep)
    inner = ScriptedNext(ProviderUnavailableError("busy", status=503))
    response = await retry.handle(call_context(controls={"max_attempts": 2}), config, inner)
    assert len(inner.calls) == 2 and len(clock.sleeps) == 1

For adapter authors, ``AdapterConformance`` (from ``provmw.conformance``, loaded on first
use because it needs pytest) is a test class to subclass: it runs an adapter through chat,
tools, images, streaming, embeddings and the error table against a ``FakeProvider``. For
ledger store authors, ``UsageStoreConformance`` (from ``provmw.usage_conformance``, loaded
the same way) checks a usage store's writes, reads, summary and closing.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import hashlib
import importlib
import json
import math
import random
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import attrs
from aiohttp import web

from provmw.config import ProviderConfig
from provmw.context import CallFacts, FrozenMap, ProviderCallContext, ProviderOperation
from provmw.messages import Message
from provmw.pricing import PriceTable
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, ProviderRequest
from provmw.responses import CompletionResponse, ProviderResponse
from provmw.testing import wires as wire
from provmw.testing.faults import (
    EXAMPLES,
    ROUTES,
    Fault,
    FaultPlan,
    RequestLimit,
    add_fault_arguments,
    admin_routes,
    plans_from_arguments,
)
from provmw.testing.wire_media import FakeBinary, OpenAIMediaWire, wav
from provmw.testing.wire_rank import RankWire
from provmw.testing.wire_responses import ResponsesWire, WireRefusalError
from provmw.testing.wires import AnthropicWire, FakeWire, OpenAIWire, Tokenizer, embedding_vector, sse, words

if TYPE_CHECKING:
    from provmw.conformance import SENTINEL_KEY, AdapterConformance
    from provmw.usage_conformance import UsageStoreConformance

__all__ = ["ROUTES", "SENTINEL_KEY", "AdapterConformance", "AnthropicWire", "FakeClock", "Fault", "FakeProvider",
           "FakeWire", "OpenAIWire", "RecordedRequest", "RequestLimit", "ScriptedNext", "Tokenizer",
           "UsageStoreConformance", "call_context", "embedding_vector", "sse", "words", "wav"]

# Loaded on first use: `provmw demo` and `provmw fake-provider` import this module where
# pytest, which the conformance suites need, is not installed.
_CONFORMANCE_MODULES = {"SENTINEL_KEY": "provmw.conformance", "AdapterConformance": "provmw.conformance",
                        "UsageStoreConformance": "provmw.usage_conformance"}

_ANY = "*"
_PREFIXES_KEPT = 1_000_000  # prompt prefixes the prompt cache remembers at most (oldest forgotten first)


@attrs.frozen
class RecordedRequest:
    """A request the fake received: route, model, JSON body and headers."""

    route: str
    model: str
    body: Any
    headers: FrozenMap


class ScriptedNext:
    """A ``next`` callable that returns or raises its scripted outcomes in order, then answers "ok".

    ``calls`` are the configurations it was called with; ``contexts`` the context each call was
    handed (None: the layer passed its own on unchanged)."""

    def __init__(self, *outcomes: ProviderResponse | BaseException) -> None:
        self._outcomes = collections.deque(outcomes)
        self.calls: list[ProviderConfig] = []
        self.contexts: list[ProviderCallContext | None] = []

    async def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> Any:
        self.calls.append(config)
        self.contexts.append(ctx)
        outcome = self._outcomes.popleft() if self._outcomes else None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome or CompletionResponse(provider=config.provider, model=config.model,
                                             served_by=config.identifier, text="ok")


class FakeClock:
    """A monotonic clock for tests: ``clock()`` reads it, ``await clock.sleep(s)`` advances it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)  # still let other tasks run, as a real sleep would


def call_context(operation: ProviderOperation = ProviderOperation.CHAT, *, digest: str | None = None,
                 metadata: Mapping[str, Any] | None = None, request: ProviderRequest | None = None,
                 **facts: Any) -> ProviderCallContext:
    """A context for a middleware test: ``call_context(tenant="acme", controls={"no_cache": True})``.

    ``facts`` are :class:`~provmw.context.CallFacts` fields; ``digest`` stands for the canonical
    request's digest, from which the cache keys follow. ``request`` is what the call sends
    (by default a one-line "hello" of the operation's kind, with the ``response_schema`` fact).
    """
    known = CallFacts(**facts, digest=None if digest is None else lambda: digest)
    if request is None:
        request = _hello(operation, known)
    return ProviderCallContext(operation, metadata=metadata, facts=known, request=request)


def _hello(operation: ProviderOperation, facts: CallFacts) -> ProviderRequest:
    if operation is ProviderOperation.EMBEDDING:
        return EmbeddingRequest(("hello",))
    if operation is ProviderOperation.COMPLETION:
        return CompletionRequest("hello")
    return ChatRequest((Message.user("hello"),), response_schema=facts.response_schema)


@attrs.define
class _RandomFaults:
    rate: float
    fault: Fault
    rng: random.Random


class _PromptCache:
    """What a provider's prompt cache holds: every prefix of the chat prompts each model was sent.

    A prompt's longest prefix (whole messages, the system prompt first) seen before on its model
    is reported as cached input: OpenAI's ``prompt_tokens_details.cached_tokens``, Anthropic's
    ``cache_read_input_tokens`` (taken out of its ``input_tokens``, as the Messages API counts).
    """

    def __init__(self) -> None:
        self._seen: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()

    def answered(self, route: str, model: str, body: Mapping[str, Any], payload: dict[str, Any],
                 count: Tokenizer) -> dict[str, Any]:
        messages = list(body.get("messages", []))
        system = str(body.get("system", "")) if route == "messages" else ""
        digests = _prefix_digests(system, messages)
        hit = max((n for n, d in enumerate(digests, 1) if (model, d) in self._seen), default=0)
        for digest in digests:
            self._seen[(model, digest)] = None
            self._seen.move_to_end((model, digest))
        while len(self._seen) > _PREFIXES_KEPT:
            self._seen.popitem(last=False)
        return _with_cache_read(route, payload, wire._prompt_tokens(messages[:hit], count, system) if hit else 0)


def _prefix_digests(system: str, messages: Sequence[Any]) -> list[str]:
    running = hashlib.sha256(system.encode())
    digests = []
    for message in messages:
        running.update(json.dumps(message, sort_keys=True).encode())
        digests.append(running.copy().hexdigest())
    return digests


def _with_cache_read(route: str, payload: dict[str, Any], tokens: int) -> dict[str, Any]:
    if not tokens:
        return payload
    usage = dict(payload.get("usage", {}))
    if route == "messages":
        usage["input_tokens"] = usage.get("input_tokens", 0) - tokens
        usage["cache_read_input_tokens"] = tokens
    else:
        usage["prompt_tokens_details"] = {"cached_tokens": tokens}
    return {**payload, "usage": usage}


class FakeProvider:
    """A loopback server speaking the OpenAI and Anthropic wire formats, with faults.

    ``wires`` adds wire formats (``provmw.testing.FakeWire``), e.g. a provider plugin's own:
    their routes are served beside the built-in ones, with the same faults and counts.
    ``prompt_cache`` reports, on the chat routes (``chat``, ``messages``), the part of a prompt
    already sent to the same model as cached input tokens.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, api_key: str | None = None,
                 record_limit: int = 10_000, tokenizer: Literal["words", "characters"] = "words",
                 admin: bool = False, wires: Sequence[FakeWire] = (), prompt_cache: bool = False) -> None:
        self._host, self._port = host, port
        self._admin = admin
        self._api_key = api_key
        # "characters" counts as densely as real tokenizers do on CJK text, one token a character.
        self._count = wire.characters if tokenizer == "characters" else wire.words
        self._wires: dict[str, FakeWire] = {}
        builtin: list[FakeWire] = [wire.OpenAIWire(), wire.AnthropicWire()]
        builtin.append(OpenAIMediaWire())
        builtin.append(RankWire())
        builtin.append(ResponsesWire())
        for served in (*builtin, *wires):
            taken = set(served.routes) & set(self._wires)
            if taken:
                raise ValueError(f"route(s) {', '.join(sorted(taken))} served twice")
            self._wires.update(dict.fromkeys(served.routes, served))
        self._scripted: dict[tuple[str, str], collections.deque[Fault]] = {}
        self._random: dict[tuple[str, str], _RandomFaults] = {}
        self._limits: dict[tuple[str, str], RequestLimit] = {}
        self._prompt_cache = _PromptCache() if prompt_cache else None
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.received: collections.deque[RecordedRequest] = collections.deque(maxlen=record_limit)
        self._runner: web.AppRunner | None = None
        self._prices = PriceTable()

    @property
    def url(self) -> str:
        """The server root, e.g. ``http://127.0.0.1:41234`` (the Anthropic base URL)."""
        return f"http://{self._host}:{self._port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def routes(self) -> tuple[str, ...]:
        """The route names served, the keys of faults and counts."""
        return tuple(self._wires)

    async def start(self) -> FakeProvider:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for route, served in self._wires.items():
            app.router.add_post(served.routes[route], self._handler(route))
        if self._admin:
            app.add_routes(admin_routes(self))
        # A client that gave up (a timeout) cancels its handler, as a real server's would stop.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self._port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeProvider:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def script(self, *faults: Fault, route: str | None = None, model: str | None = None) -> None:
        """Queue faults for the next matching requests, one per request, in order."""
        self._scripted.setdefault(self._key(route, model), collections.deque()).extend(faults)

    def fail_randomly(self, rate: float, fault: Fault, *, route: str | None = None,
                      model: str | None = None, seed: int = 0) -> None:
        """Apply ``fault`` to a ``rate`` share of matching requests (seeded, reproducible)."""
        self._random[self._key(route, model)] = _RandomFaults(rate, fault, random.Random(seed))

    def limit(self, requests_per_minute: int, *, route: str | None = None, model: str | None = None,
              clock: Callable[[], float] = time.monotonic) -> RequestLimit:
        """Hold matching requests to ``requests_per_minute`` (on ``clock``): beyond it, 429 with
        ``retry-after``; within it, answers carry the wire's rate-limit headers. Returns the limit,
        whose ``admitted`` and ``refused`` count what it did; a later limit on the same route and
        model replaces it, ``reset`` removes it."""
        limit = self._limits[self._key(route, model)] = RequestLimit(requests_per_minute, clock)
        return limit

    def count(self, route: str | None = None, model: str | None = None) -> int:
        """Requests received, optionally only for one route and/or model."""
        return sum(n for (r, m), n in self._counts.items()
                   if route in (None, r) and model in (None, m))

    def clear_faults(self) -> None:
        """Forget scripted and random faults; counts and recorded requests stay."""
        self._scripted.clear()
        self._random.clear()

    def reset(self) -> None:
        """Forget faults, limits, counts and recorded requests."""
        self.clear_faults()
        self._limits.clear()
        self._counts.clear()
        self.received.clear()

    def _key(self, route: str | None, model: str | None) -> tuple[str, str]:
        if route is not None and route not in self._wires:
            raise ValueError(f"unknown route {route!r}; routes: {', '.join(self._wires)}")
        return (route or _ANY, model or _ANY)

    def _handler(self, route: str) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._handle(route, self._wires[route], request)

        return handle

    async def _handle(self, route: str, served: FakeWire, request: web.Request) -> web.StreamResponse:
        try:
            body = await _request_body(request)
        except ValueError:
            return _error_response(served, route, 400, None, "request body is not JSON", {})
        model = served.model(route, request.match_info.get("model"), body)
        self._counts[route, model] += 1
        self.received.append(RecordedRequest(route, model, body, FrozenMap(request.headers)))
        if self._api_key is not None and not _authorized(request, self._api_key):
            return _error_response(served, route, 401, None, "invalid x-api-key / bearer token", {})
        limit = self._limit_for(route, model)
        if limit is not None and (wait_s := limit.refusal()) is not None:
            return _error_response(served, route, 429, None, "requests per minute exceeded",
                                   {"retry-after": str(math.ceil(wait_s))})
        headers = {} if limit is None else _rate_limit_headers(served, limit)
        fault = self._next_fault(route, model)
        if fault is not None and fault.delay_s:
            await asyncio.sleep(fault.delay_s)
        if fault is not None and fault.status is not None:
            return _error_response(served, route, fault.status, fault.code, fault.message, fault.headers)
        if route == "embedding" and self._chat_model(model):
            return _error_response(served, route, 400, None, f"model {model!r} is a chat model and does not make "
                                   "embeddings (use an embedding model, such as text-embedding-3-small)", {})
        try:
            payload = served.answer(route, body, self._count)
        except WireRefusalError as refused:
            return _error_response(served, route, refused.status, refused.code, refused.message, {})
        if fault is not None and fault.usage is not None:
            payload = served.with_usage(payload, json.loads(json.dumps(fault.usage, default=dict)))
        elif self._prompt_cache is not None and route in ("chat", "messages"):
            payload = self._prompt_cache.answered(route, model, body, payload, self._count)
        if isinstance(payload, FakeBinary) and (fault is None or not (fault.malformed_json or fault.drop_connection)):
            return web.Response(body=payload.data, headers={**headers, "Content-Type": payload.content_type})
        if served.streams(route, body):
            return await _stream(request, served, route, served.frames(route, body, payload), fault or Fault(),
                                 headers)
        if fault is not None and fault.replace:
            payload = _replaced(payload, fault.replace)
        if fault is not None and fault.malformed_json:
            return web.Response(text='{"id": "broken", "choices": [', content_type="application/json")
        if fault is not None and fault.drop_connection:
            return await _drop_mid_body(request, payload.data if isinstance(payload, FakeBinary) else
                                        json.dumps(payload).encode())
        return web.json_response(payload, headers=headers)

    def _chat_model(self, model: str) -> bool:
        """Whether the bundled price table knows ``model`` as an OpenAI chat model (it has an output ceiling).

        A name the table does not know is served as asked, for embeddings as for chat: tests and
        conformance suites name models freely ("m", "gpt-test"), and only a known chat model is
        one a real provider would refuse to embed with.
        """
        if "embed" in model.lower():
            return False
        price = self._prices._lookup("openai", model)  # not price_for: that warns about unknown names
        return price is not None and bool(price.max_output_tokens)

    def _limit_for(self, route: str, model: str) -> RequestLimit | None:
        """The limit a request is held to: the most specific that matches."""
        for key in ((route, model), (route, _ANY), (_ANY, model), (_ANY, _ANY)):
            limit = self._limits.get(key)
            if limit is not None:
                return limit
        return None

    def _next_fault(self, route: str, model: str) -> Fault | None:
        for key in ((route, model), (route, _ANY), (_ANY, model), (_ANY, _ANY)):
            queue = self._scripted.get(key)
            if queue:
                return queue.popleft()
        for key in ((route, model), (route, _ANY), (_ANY, model), (_ANY, _ANY)):
            chance = self._random.get(key)
            if chance is not None and chance.rng.random() < chance.rate:
                return chance.fault
        return None


async def _request_body(request: web.Request) -> Any:
    """A JSON body decoded, or a multipart form as a dict of its fields (files as their bytes);
    ``ValueError`` for anything else."""
    if request.content_type != "multipart/form-data":
        return json.loads(await request.read())
    form = await request.post()
    return {name: value.file.read() if isinstance(value, web.FileField) else value for name, value in form.items()}


def _rate_limit_headers(served: FakeWire, limit: RequestLimit) -> Mapping[str, str]:
    """What an answer admitted under ``limit`` says of it, in the wire's style (none if it has none):
    requests left in the window, and the seconds until one more is let in (0 while some are left)."""
    headers = getattr(served, "rate_limit_headers", None)
    if headers is None:
        return {}
    times = limit._times  # the window RequestLimit slides: admitted requests' times, oldest first
    remaining = max(limit.requests_per_minute - len(times), 0)
    reset_s = max(times[0] + 60 - limit.clock(), 0.0) if times and not remaining else 0.0
    return dict(headers(remaining, math.ceil(reset_s * 1000) / 1000))  # in whole ms, up: waited, it lets one in


async def _stream(request: web.Request, served: FakeWire, route: str, frames: Sequence[bytes],
                  fault: Fault, headers: Mapping[str, str]) -> web.StreamResponse:
    """Send ``frames`` with the fault's stream faults struck where it says."""
    response = web.StreamResponse(headers={**headers, "Content-Type": served.stream_content_type})
    await response.prepare(request)
    await response.write(served.stream_preamble)
    frames = frames[:max(len(frames) - fault.withhold_last, 0)]
    for sent in range(len(frames) + 1):
        if sent == fault.stall_after:
            await _stall(response, served, fault)
        if sent == fault.stream_error_after:
            await response.write(served.error_frame(route, fault.code, fault.message))
            break
        if sent == fault.malformed_after:
            await response.write(served.malformed_frame(route))
            break
        if sent == fault.cut_stream_after:
            assert request.transport is not None
            request.transport.close()
            return response
        if sent < len(frames):
            await (_dribble(response, frames[sent]) if fault.split_frames else response.write(frames[sent]))
    await response.write_eof()
    return response


async def _dribble(response: web.StreamResponse, frame: bytes) -> None:
    """Write ``frame`` a byte at a time, yielding between bytes so the client reads them apart."""
    for index in range(len(frame)):
        await response.write(frame[index:index + 1])
        await asyncio.sleep(0)


def _replaced(value: Any, replace: Mapping[str, Any]) -> Any:
    """``value`` with every string in ``replace`` swapped for its replacement, at any depth."""
    if isinstance(value, str):
        return replace.get(value, value)
    if isinstance(value, Mapping):
        return {key: _replaced(item, replace) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, replace) for item in value]
    return value


async def _stall(response: web.StreamResponse, served: FakeWire, fault: Fault) -> None:
    if fault.keepalive_s is None:
        await asyncio.sleep(fault.stall_s)
        return
    loop = asyncio.get_running_loop()
    until = loop.time() + fault.stall_s
    while (left := until - loop.time()) > 0:
        await asyncio.sleep(min(fault.keepalive_s, left))
        await response.write(served.keepalive)


def _authorized(request: web.Request, api_key: str) -> bool:
    return request.headers.get("x-api-key") == api_key or \
        request.headers.get("Authorization") == f"Bearer {api_key}"


def _error_response(served: FakeWire, route: str, status: int, code: str | None, message: str,
                    headers: Mapping[str, str]) -> web.Response:
    return web.json_response(served.error_body(route, status, code, message), status=status, headers=dict(headers))


async def _drop_mid_body(request: web.Request, payload: bytes) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(payload)
    await response.prepare(request)
    await response.write(payload[: len(payload) // 2])
    assert request.transport is not None
    request.transport.close()
    return response


def __getattr__(name: str) -> Any:
    module = _CONFORMANCE_MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module not in sys.modules:
        import pytest

        pytest.register_assert_rewrite(module)  # failures then show their values
    return getattr(importlib.import_module(module), name)


async def serve(host: str, port: int, plans: Sequence[FaultPlan] = ()) -> None:
    """Run a fake provider with its admin endpoint until cancelled, printing where it listens."""
    async with FakeProvider(host, port, admin=True) as fake:
        for plan in plans:
            plan.apply(fake)
        print(f"fake provider listening on {fake.url}", flush=True)
        print(f"  OpenAI base URL:    {fake.openai_base_url}", flush=True)
        print(f"  Anthropic base URL: {fake.anthropic_base_url}", flush=True)
        print(f"  faults: {len(plans)} scripted; change them at {fake.url}/_admin/faults", flush=True)
        await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m provmw.testing", description=FakeProvider.__doc__,
                                     epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    add_fault_arguments(parser)
    args = parser.parse_args(argv)
    plans = plans_from_arguments(args)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, plans))
