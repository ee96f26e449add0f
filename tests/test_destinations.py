"""Finding 2: a call's own base_url may not take the key to loopback, private, link-local or
metadata addresses unless the settings allow it; nothing is sent when it is refused."""

from __future__ import annotations

import asyncio
import io
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.destinations import CheckingResolver, DestinationGuard, DestinationPolicy, address_kind
from provmw.errors import ConfigurationError, DestinationRefusedError
from provmw.manager import ServiceManager
from provmw.messages import Message
from provmw.pipeline import Next, R
from provmw.plugins import PluginHost
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.settings import Settings, parse_settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, LOOPBACK_ALLOWED, SENTINEL_KEY, openai_config


@attrs.define
class CountingServer:
    """A loopback TCP server that counts the connections made to it and answers nothing."""

    port: int = 0
    connections: int = 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.close()


@pytest.fixture
async def counting() -> AsyncIterator[CountingServer]:
    counter = CountingServer()
    server = await asyncio.start_server(counter._accept, "127.0.0.1", 0)
    counter.port = server.sockets[0].getsockname()[1]
    async with server:
        yield counter


def bare(policy: DestinationPolicy | None = None) -> Settings:
    return Settings(middleware=BUILTIN_MIDDLEWARE_OFF, destinations=policy or DestinationPolicy())


@pytest.mark.parametrize(("address", "kind"), [
    ("169.254.169.254", "metadata"), ("fd00:ec2::254", "metadata"), ("100.100.100.200", "metadata"),
    ("::ffff:169.254.169.254", "metadata"), ("169.254.1.1", "link_local"), ("fe80::1", "link_local"),
    ("127.0.0.1", "loopback"), ("::1", "loopback"), ("0.0.0.0", "loopback"), ("::", "loopback"),
    ("::ffff:127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("192.168.1.1", "private"), ("fc00::1", "private"), ("8.8.8.8", "public"), ("2606:4700::1111", "public"),
])
def test_each_address_has_the_class_the_policy_decides_on(address: str, kind: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


@given(st.ip_addresses(v=4))
def test_an_ipv4_address_and_its_ipv6_mapped_form_are_of_one_class(address: ipaddress.IPv4Address) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert address_kind(mapped) == address_kind(address)


@given(st.ip_addresses(network="10.0.0.0/8") | st.ip_addresses(network="169.254.0.0/16")
       | st.ip_addresses(network="127.0.0.0/8") | st.ip_addresses(network="fe80::/10"))
def test_the_default_policy_refuses_every_private_loopback_and_link_local_address(
        address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    with pytest.raises(DestinationRefusedError):
        DestinationPolicy().check("h", str(address))


async def test_an_ad_hoc_loopback_url_is_refused_and_nothing_connects(
        counting: CountingServer, builtin_only: PluginHost) -> None:
    async with ServiceManager(bare(), host=builtin_only) as manager:
        with pytest.raises(DestinationRefusedError, match="loopback") as caught:
            await manager.chat("hi", provider="openai", model="m", api_key=SENTINEL_KEY,
                               base_url=f"http://127.0.0.1:{counting.port}/v1")
    assert (caught.value.kind, caught.value.address) == ("loopback", "127.0.0.1")
    assert isinstance(caught.value, ConfigurationError)
    assert counting.connections == 0


async def test_a_name_that_resolves_to_loopback_is_refused_after_resolution(
        counting: CountingServer, builtin_only: PluginHost) -> None:
    async with ServiceManager(bare(), host=builtin_only) as manager:
        with pytest.raises(DestinationRefusedError) as caught:
            await manager.chat("hi", provider="openai", model="m", base_url=f"http://localhost:{counting.port}/v1")
    assert caught.value.host == "localhost" and caught.value.kind == "loopback"
    assert counting.connections == 0


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest", "http://[fd00:ec2::254]/v1",
                                 "http://metadata.google.internal/v1", "http://100.100.100.200/v1"])
async def test_metadata_addresses_are_refused_even_when_every_class_is_allowed(
        url: str, builtin_only: PluginHost) -> None:
    policy = DestinationPolicy(ad_hoc_destinations=("public", "private", "loopback"))
    async with ServiceManager(bare(policy), host=builtin_only) as manager:
        with pytest.raises(DestinationRefusedError, match="never reachable by an ad-hoc call"):
            await manager.chat("hi", provider="openai", model="m", base_url=url)


@pytest.mark.parametrize(("url", "kind"), [
    ("http://[fd00:ec2::254%251]/v1", "metadata"), ("http://[fd00:ec2::254%eth0]/v1", "metadata"),
    ("http://[fd00:ec2::254%25eth0]:8080/v1", "metadata"), ("http://[fe80::1%25eth0]/v1", "link_local"),
    ("http://[::ffff:169.254.169.254%251]/v1", "metadata"), ("http://[64:ff9b::a9fe:a9fe%251]/v1", "metadata"),
])
async def test_a_zone_id_does_not_change_the_class_of_an_address(
        url: str, kind: str, builtin_only: PluginHost) -> None:
    # A scope (zone id, URL-encoded as %25) names an interface, not another address.
    policy = DestinationPolicy(ad_hoc_destinations=("public", "private", "loopback"))
    async with ServiceManager(bare(policy), host=builtin_only) as manager:
        with pytest.raises(DestinationRefusedError, match="never reachable by an ad-hoc call") as caught:
            await manager.chat("hi", provider="openai", model="m", api_key=SENTINEL_KEY, base_url=url)
    assert caught.value.kind == kind


@given(st.ip_addresses(v=6) | st.sampled_from([ipaddress.IPv6Address("fd00:ec2::254"),
                                               ipaddress.IPv6Address("fe80::a9fe:a9fe")]),
       st.sampled_from(["1", "251", "eth0", "25eth0"]))
def test_an_ipv6_address_with_a_scope_is_of_its_class_without_one(
        address: ipaddress.IPv6Address, scope: str) -> None:
    assert address_kind(ipaddress.IPv6Address(f"{address}%{scope}")) == address_kind(address)


async def test_an_allowed_class_reaches_the_server(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(bare(LOOPBACK_ALLOWED), host=builtin_only) as manager:
        response = await manager.chat("hi", provider="openai", model="m",
                                      base_url=fake.openai_base_url.replace("127.0.0.1", "localhost"))
    assert response.text == "echo: hi"


async def test_a_named_configuration_is_trusted_as_written(fake: FakeProvider, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"oa": openai_config(fake)}, middleware=BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=builtin_only) as manager:
        response = await manager.chat("hi")
    assert response.served_by == "oa"


async def test_a_refused_stream_opens_no_connection(counting: CountingServer, builtin_only: PluginHost) -> None:
    async with ServiceManager(bare(), host=builtin_only) as manager:
        with pytest.raises(DestinationRefusedError):
            async for _ in manager.stream_chat("hi", provider="openai", model="m",
                                               base_url=f"http://127.0.0.1:{counting.port}/v1"):
                pass
    assert counting.connections == 0


async def test_the_ad_hoc_client_connects_only_where_its_resolver_checked(counting: CountingServer) -> None:
    # Rebinding: whatever the name resolves to at connect time is checked again there.
    guard = DestinationGuard(DestinationPolicy())
    config = ProviderConfig.ad_hoc("openai", "m", base_url=f"http://localhost:{counting.port}/v1")
    try:
        with pytest.raises(DestinationRefusedError):
            await OpenAIAdapter().chat(guard.http, config, ChatRequest((Message.user("hi"),)))
    finally:
        await guard.aclose()
    assert counting.connections == 0


async def test_kept_resolutions_are_bounded() -> None:
    resolver = CheckingResolver(LOOPBACK_ALLOWED, max_entries=8)
    for last in range(1, 20):
        await resolver.checked(f"127.0.0.{last}", 80)
    assert len(resolver) == 8


async def test_a_kept_resolution_expires_after_its_ttl() -> None:
    now = [0.0]
    resolver = CheckingResolver(LOOPBACK_ALLOWED, ttl_s=10.0, clock=lambda: now[0])
    first = await resolver.checked("localhost", 80)
    assert await resolver.checked("localhost", 80) is first
    now[0] = 11.0
    assert await resolver.checked("localhost", 80) is not first


def test_the_security_section_sets_the_allowed_classes() -> None:
    settings = parse_settings({"security": {"ad_hoc_destinations": ["public", "private"]}}, "f.toml", {})
    assert settings.destinations.ad_hoc_destinations == {"public", "private"}
    assert Settings().destinations.ad_hoc_destinations == {"public"}


@pytest.mark.parametrize(("table", "named"), [
    ({"ad_hoc_destinations": ["link_local"]}, "'link_local' is not one of public, private, loopback"),
    ({"ad_hoc_destinations": "public"}, "must be a list"),
    ({"ad_hoc_destination": ["public"]}, "unknown key 'ad_hoc_destination'"),
])
def test_a_bad_security_section_is_a_configuration_error(table: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        parse_settings({"security": table}, "f.toml", {})


def test_cli_chat_with_a_loopback_base_url_is_refused(counting: CountingServer, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "provmw.toml").write_text("[plugins]\nautoload = false\n")
    status = main(["--config", str(tmp_path / "provmw.toml"), "chat", "hi", "--provider", "openai", "--model", "m",
                   "--base-url", f"http://127.0.0.1:{counting.port}/v1"], out=io.StringIO())
    assert status == 2
    assert "DestinationRefusedError" in capsys.readouterr().err
    assert counting.connections == 0


async def test_an_ad_hoc_configuration_a_layer_swaps_in_is_checked_before_it_is_sent(
        counting: CountingServer, fake: FakeProvider, builtin_only: PluginHost) -> None:
    swapped = ProviderConfig.ad_hoc("openai", "m", base_url=f"http://[::ffff:127.0.0.1]:{counting.port}/v1",
                                    api_key=SENTINEL_KEY)

    class Swap:
        name, priority = "swap", 1

        async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
            return await next(swapped)

    settings = Settings(configurations={"oa": openai_config(fake)}, middleware=BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=builtin_only, middleware=[Swap()]) as manager:
        with pytest.raises(DestinationRefusedError, match="loopback"):
            await manager.chat("hi")
    assert counting.connections == 0
