from __future__ import annotations

from typing import Any

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.manager import ServiceManager
from provmw.messages import ImagePart, ToolSpec
from provmw.pipeline import Next, R
from provmw.plugins import PluginHost
from provmw.responses import CompletionResponse, EmbeddingResponse, VisionResponse
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED, anthropic_config, openai_config


class Spy:
    """Records each context and configuration that enters the pipeline."""

    name, priority = "spy", 1
    controls = frozenset({"no_cache"})

    def __init__(self) -> None:
        self.calls: list[tuple[ProviderCallContext, ProviderConfig]] = []

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        self.calls.append((ctx, config))
        return await next(config)


@pytest.fixture
def spy() -> Spy:
    return Spy()


@pytest.fixture
def manager(fake: FakeProvider, builtin_only: PluginHost, spy: Spy) -> ServiceManager:
    settings = Settings(configurations={"oa": openai_config(fake, fallbacks=("an",)), "an": anthropic_config(fake)},
                        default="oa", middleware=BUILTIN_MIDDLEWARE_OFF, destinations=LOOPBACK_ALLOWED)
    return ServiceManager(settings, host=builtin_only, middleware=[spy])


CASES: list[tuple[str, tuple[Any, ...], dict[str, Any], ProviderOperation, type]] = [
    ("chat", ("hi",), {}, ProviderOperation.CHAT, CompletionResponse),
    ("complete", ("once",), {}, ProviderOperation.COMPLETION, CompletionResponse),
    ("embed", (["a", "b"],), {}, ProviderOperation.EMBEDDING, EmbeddingResponse),
    ("vision", ("what?", [ImagePart(url="https://x.test/a.png")]), {}, ProviderOperation.VISION, VisionResponse),
    ("chat_with_tools", ("Paris", [ToolSpec(name="weather")]), {}, ProviderOperation.TOOLS, CompletionResponse),
]


@pytest.mark.parametrize(("method", "args", "kwargs", "operation", "kind"), CASES, ids=[c[0] for c in CASES])
async def test_each_method_runs_the_pipeline_once_with_its_operation(
        manager: ServiceManager, spy: Spy, fake: FakeProvider, method: str, args: tuple[Any, ...],
        kwargs: dict[str, Any], operation: ProviderOperation, kind: type) -> None:
    async with manager:
        response = await getattr(manager, method)(*args, user="ada", tenant="acme", **kwargs)
    assert isinstance(response, kind)
    assert len(spy.calls) == 1
    assert spy.calls[0][0].operation is operation
    assert fake.count() == 1


async def test_the_context_carries_the_call_facts(manager: ServiceManager, spy: Spy) -> None:
    async with manager:
        await manager.chat("hi", user="ada", tenant="acme", idempotency_key="idem-1",
                           options={"max_tokens": 7}, controls={"no_cache": True})
    facts = spy.calls[0][0].facts
    assert (facts.user, facts.tenant, facts.idempotency_key) == ("ada", "acme", "idem-1")
    assert facts.cache_key is not None and len(facts.cache_key) == 64
    assert facts.max_output_tokens == 7
    assert facts.estimated_input_tokens >= 1
    assert facts.controls["no_cache"] is True


@pytest.mark.parametrize("who", ["user", "tenant"])
async def test_a_user_or_tenant_that_is_not_a_string_is_refused(manager: ServiceManager, spy: Spy, who: str) -> None:
    bad: dict[str, Any] = {who: 42}
    with pytest.raises(ConfigurationError, match=f"{who} must be a string, got int 42"):
        await manager.chat("hi", **bad)
    assert spy.calls == []


async def test_the_request_digest_is_computed_only_when_a_layer_reads_it(
        manager: ServiceManager, monkeypatch: pytest.MonkeyPatch) -> None:
    digests: list[object] = []

    def counted(*args: object) -> str:
        digests.append(args)
        return "d"

    monkeypatch.setattr("provmw._call.facts.request_digest", counted)
    async with manager:
        await manager.chat("hi")  # no cache installed: nobody asks for the key
    assert digests == []


async def test_stream_chat_refuses_an_idempotency_key(manager: ServiceManager) -> None:
    with pytest.raises(ConfigurationError, match="idempotency_key applies to unary calls"):
        [c async for c in manager.stream_chat("hi", idempotency_key="k1")]


async def test_a_misspelt_call_argument_is_a_type_error(manager: ServiceManager) -> None:
    with pytest.raises(TypeError, match="usr"):
        await manager.chat("hi", usr="ada")  # type: ignore[call-arg]


async def test_cache_key_differs_per_tenant(manager: ServiceManager, spy: Spy) -> None:
    async with manager:
        await manager.chat("hi", tenant="a")
        await manager.chat("hi", tenant="b")
        await manager.chat("hi", tenant="a")
    keys = [ctx.facts.cache_key for ctx, _ in spy.calls]
    assert keys[0] != keys[1]
    assert keys[0] == keys[2]


async def test_named_configuration_with_fallbacks_is_resolved(manager: ServiceManager, spy: Spy) -> None:
    async with manager:
        response = await manager.chat("hi")
    config = spy.calls[0][1]
    assert (config.identifier, config.fallbacks) == ("oa", ("an",))
    assert response.served_by == "oa"


async def test_named_configuration_can_switch_provider(manager: ServiceManager) -> None:
    async with manager:
        response = await manager.chat("hi", configuration="an")
    assert (response.provider, response.served_by) == ("anthropic", "an")


async def test_ad_hoc_call_gets_a_transient_configuration(
        manager: ServiceManager, spy: Spy, fake: FakeProvider) -> None:
    async with manager:
        await manager.chat("hi", provider="openai", model="other", base_url=fake.openai_base_url)
    config = spy.calls[0][1]
    assert config.identifier == "ad-hoc:openai/other"
    assert config.fallbacks == ()


async def test_correlation_id_can_be_given(manager: ServiceManager, spy: Spy) -> None:
    async with manager:
        await manager.chat("hi", correlation_id="trace-42")
    assert spy.calls[0][0].correlation_id == "trace-42"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"configuration": "nope"}, "no configuration named 'nope'"),
        ({"provider": "opnai", "model": "m"}, "did you mean 'openai'"),
        ({"provider": "openai"}, "both provider= and model="),
        ({"options": {"temprature": 1}}, "did you mean 'temperature'"),
    ],
)
async def test_bad_call_arguments_raise_before_the_pipeline(
        manager: ServiceManager, spy: Spy, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        await manager.chat("hi", **kwargs)
    assert spy.calls == []


def test_unknown_provider_in_a_configuration_fails_at_build(builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"x": ProviderConfig(identifier="x", provider="gemeni", model="m")})
    with pytest.raises(ConfigurationError, match=r"\[configurations.x\] provider.*'gemeni'"):
        ServiceManager(settings, host=builtin_only)


async def test_stream_chat_opens_through_the_pipeline_once(manager: ServiceManager, spy: Spy) -> None:
    async with manager:
        chunks = [c async for c in manager.stream_chat("a b", configuration="an")]
    assert "".join(c.text for c in chunks).strip() == "echo: a b"
    assert [ctx.facts.stream for ctx, _ in spy.calls] == [True]


def test_pipeline_is_built_once_per_manager(manager: ServiceManager) -> None:
    assert manager.pipeline is manager.pipeline
    assert manager.pipeline.order == ("spy",)
    assert [(e.name, e.plugin) for e in manager.stack] == [("spy", "(application)")]


@pytest.mark.parametrize("key", ["model", "max_tokens", "messages", "n", "max_completion_tokens", "service_tier"])
async def test_extra_body_cannot_replace_what_the_call_was_priced_on(
        manager: ServiceManager, fake: FakeProvider, key: str) -> None:
    async with manager:
        with pytest.raises(ConfigurationError, match=rf"extra_body may not set {key}"):
            await manager.chat("hi", options={"extra_body": {key: 100_000}})
    assert list(fake.received) == []


def test_a_configuration_whose_extra_body_sets_the_model_fails_at_load(fake: FakeProvider) -> None:
    with pytest.raises(ConfigurationError, match="extra_body may not set model"):
        openai_config(fake, options={"extra_body": {"model": "o1-pro"}})
