"""Provider hooks see the settings, and a plugin decorates installed adapters by name: its own or
another plugin's it never imports. Calls go over real HTTP to the loopback fake."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import attrs
import provmw_gemini
import pytest
from provmw_gemini.fake import GeminiWire

from provmw.config import ProviderConfig
from provmw.errors import PluginError
from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.plugins import PluginHost, PluginPolicy, ProviderDecorator, hookimpl
from provmw.providers import ALL_PROVIDERS, Capabilities, ForwardingAdapter, ProviderAdapter, capabilities_of
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF
from tests.providers.thirdparty_adapter import AcmeAdapter


class Marking(ForwardingAdapter):
    """Appends ``mark`` to the last message before the wrapped adapter sends it."""

    def __init__(self, inner: ProviderAdapter, mark: str) -> None:
        super().__init__(inner)
        self.mark = mark

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        *earlier, last = request.messages
        marked = attrs.evolve(request, messages=(*earlier, Message.user(f"{last.text} {self.mark}")))
        return await super().chat(http, config, marked)


class Decorating:
    """A plugin that only decorates: it imports no adapter of the providers it names."""

    def __init__(self, *decorators: ProviderDecorator) -> None:
        self.decorators = decorators

    @hookimpl
    def provmw_provider_decorators(self, settings: Settings) -> Iterable[ProviderDecorator]:
        return self.decorators


class Acme:
    """The third-party adapter's plugin, with the hook's old signature (no settings)."""

    @hookimpl
    def provmw_providers(self) -> Iterable[ProviderAdapter]:
        return [AcmeAdapter()]


def marking(provider: str, mark: str) -> ProviderDecorator:
    return ProviderDecorator(provider, lambda adapter: Marking(adapter, mark))


def host(**plugins: object) -> PluginHost:
    built = PluginHost(PluginPolicy(autoload=False), environ={})
    for name, plugin in plugins.items():
        built.register(plugin, name)
    return built


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    async with FakeProvider(wires=[GeminiWire()]) as server:
        yield server


def settings(fake: FakeProvider, provider: str = "acme") -> Settings:
    """One configuration, on the fake, for the adapter named ``provider``."""
    config = {"acme": ProviderConfig(identifier="acme", provider="acme", model="acme-large",
                                     base_url=fake.openai_base_url, api_key="k"),
              "gemini": ProviderConfig(identifier="gem", provider="gemini", model="gemini-2.5-flash",
                                       base_url=fake.url + "/v1beta", api_key="k")}[provider]
    return Settings(configurations={config.identifier: config}, default=config.identifier,
                    middleware=BUILTIN_MIDDLEWARE_OFF)


async def test_a_plugin_decorates_the_third_party_adapter_it_never_imports(fake: FakeProvider) -> None:
    plugins = host(acme=Acme(), audit=Decorating(marking("acme", "[audited]")))
    async with ServiceManager(settings(fake), host=plugins) as manager:
        response = await manager.chat("hello")
    assert response.text == "echo: hello [audited]"
    assert fake.count(model="acme-large") == 1


async def test_a_plugin_decorates_a_first_party_plugins_adapter(fake: FakeProvider) -> None:
    plugins = host(gemini=provmw_gemini, audit=Decorating(marking("gemini", "[audited]")))
    async with ServiceManager(settings(fake, "gemini"), host=plugins) as manager:
        response = await manager.chat("hello")
    assert response.text == "echo: hello [audited]"
    assert response.provider == "gemini"


async def test_a_decorated_adapter_keeps_its_name_and_capabilities(fake: FakeProvider) -> None:
    plugins = host(acme=Acme(), audit=Decorating(marking("acme", "[audited]")))
    async with ServiceManager(settings(fake), host=plugins) as manager:
        assert isinstance(manager.providers["acme"], Marking)
        assert manager.capabilities["acme"] == AcmeAdapter.capabilities


def test_a_forwarding_subclass_may_declare_capabilities_of_its_own() -> None:
    class WithoutTools(ForwardingAdapter):
        capabilities = Capabilities(tools=False)

    providers = host(audit=Decorating(ProviderDecorator("openai", WithoutTools))).collect_providers()
    assert capabilities_of(providers["openai"]).tools is False


def test_decorators_apply_by_plugin_name_then_in_the_order_given() -> None:
    providers = host(zeta=Decorating(marking("openai", "z")),
                     alpha=Decorating(marking("openai", "a1"), marking("openai", "a2"))).collect_providers()
    outer = providers["openai"]
    assert isinstance(outer, Marking) and isinstance(outer.inner, Marking) and isinstance(outer.inner.inner, Marking)
    assert [outer.mark, outer.inner.mark, outer.inner.inner.mark] == ["z", "a2", "a1"]


def test_all_providers_wraps_every_installed_adapter() -> None:
    providers = host(acme=Acme(), audit=Decorating(marking(ALL_PROVIDERS, "*"))).collect_providers()
    assert {name: type(adapter) for name, adapter in providers.items()} == dict.fromkeys(
        ("acme", "anthropic", "cohere", "openai"), Marking)


def test_a_decorator_naming_no_installed_provider_is_an_error_naming_both() -> None:
    plugins = host(audit=Decorating(marking("gemeni", "x")))
    with pytest.raises(PluginError, match=r"plugin 'audit' decorates provider 'gemeni', which no installed plugin "
                                          r"provides; installed: anthropic, cohere, openai \(plugin autoload is off\)"):
        plugins.collect_providers()


def test_a_decorator_returning_no_adapter_is_an_error_naming_the_plugin() -> None:
    def nothing(adapter: ProviderAdapter) -> Any:
        return object()

    plugins = host(audit=Decorating(ProviderDecorator("openai", nothing)))
    with pytest.raises(PluginError, match=r"'audit' .*\(decorating provider 'openai'\) .* not a provider adapter"):
        plugins.collect_providers()


class Bare:
    """A wrapper that forwards the operations and the name only."""

    def __init__(self, inner: ProviderAdapter) -> None:
        self.name, self.chat, self.complete = inner.name, inner.chat, inner.complete
        self.embed, self.stream_chat = inner.embed, inner.stream_chat


def test_a_wrapper_that_drops_the_key_variable_is_an_error() -> None:
    plugins = host(audit=Decorating(ProviderDecorator("openai", Bare)))
    with pytest.raises(PluginError, match="api_key_env is None, not 'OPENAI_API_KEY'.*ForwardingAdapter"):
        plugins.collect_providers()


def test_a_wrapper_that_drops_the_capabilities_is_an_error() -> None:
    plugins = host(acme=Acme(), audit=Decorating(ProviderDecorator("acme", Bare)))
    with pytest.raises(PluginError, match=r"'audit' decorated provider 'acme' with a Bare .* capabilities are not "
                                          r"declared, while the wrapped adapter declares Capabilities\(chat=True"):
        plugins.collect_providers()


def test_a_wrapper_that_renames_the_adapter_is_an_error() -> None:
    def renamed(adapter: ProviderAdapter) -> ProviderAdapter:
        wrapper = ForwardingAdapter(adapter)
        wrapper.name = "other"
        return wrapper

    with pytest.raises(PluginError, match="name is 'other', not 'openai'"):
        host(audit=Decorating(ProviderDecorator("openai", renamed))).collect_providers()


def test_a_value_that_is_no_decorator_is_an_error_naming_the_plugin() -> None:
    class Wrong:
        @hookimpl
        def provmw_provider_decorators(self) -> Iterable[object]:
            return [("openai", Marking)]

    with pytest.raises(PluginError, match="plugin 'wrong' .* tuple, not a provmw.providers.ProviderDecorator"):
        host(wrong=Wrong()).collect_providers()


async def test_the_provider_hook_receives_the_managers_settings(fake: FakeProvider) -> None:
    seen: list[Settings] = []

    class Reading:
        @hookimpl
        def provmw_providers(self, settings: Settings) -> Iterable[ProviderAdapter]:
            seen.append(settings)
            return [AcmeAdapter()]

    chosen = settings(fake)
    async with ServiceManager(chosen, host=host(acme=Reading())):
        assert seen == [chosen] and seen[0] is chosen


def test_the_old_provider_hook_without_settings_still_contributes() -> None:
    assert isinstance(host(acme=Acme()).collect_providers(Settings())["acme"], AcmeAdapter)


def test_a_decorator_is_built_with_a_name_and_a_callable() -> None:
    wrap: Callable[[ProviderAdapter], ProviderAdapter] = ForwardingAdapter
    with pytest.raises(ValueError, match="provider"):
        ProviderDecorator("", wrap)
    with pytest.raises(TypeError, match="wrap"):
        ProviderDecorator("openai", "not callable")  # type: ignore[arg-type]
