"""Ad-hoc destinations, pinned where the mutation run found them unchecked (docs/testing.md)."""

from __future__ import annotations

import pytest

from provmw._transport.reads import ReadLimits
from provmw.config import ProviderConfig
from provmw.destinations import CheckingResolver, DestinationGuard, DestinationPolicy
from provmw.errors import ConfigurationError, DestinationRefusedError
from provmw.http import HttpClient
from provmw.testing import FakeClock


async def test_a_shorthand_ipv4_host_is_resolved_and_checked_as_the_address_it_names() -> None:
    # "1.2.3" is no literal ipaddress accepts, but the resolver reads it as 1.2.0.3 (inet_aton's forms).
    [result] = await CheckingResolver(DestinationPolicy()).checked("1.2.3", 443)
    assert (result["host"], result["port"]) == ("1.2.0.3", 443)


async def test_a_shorthand_ipv4_host_that_names_loopback_is_refused() -> None:
    with pytest.raises(DestinationRefusedError, match="reaches 127.0.0.1"):
        await CheckingResolver(DestinationPolicy()).checked("0x7f.1", 443)


def test_a_single_kind_written_as_a_string_is_refused_with_the_kinds_there_are() -> None:
    with pytest.raises(ConfigurationError) as refused:
        DestinationPolicy(ad_hoc_destinations="public")
    assert str(refused.value) == "ad_hoc_destinations must be a list of public, private, loopback, got 'public'"


def test_an_unknown_kind_is_refused_with_the_nearest_and_why_some_are_never_allowed() -> None:
    with pytest.raises(ConfigurationError) as refused:
        DestinationPolicy(ad_hoc_destinations=["privat"])
    assert str(refused.value) == (
        "ad_hoc_destinations: 'privat' is not one of public, private, loopback (did you mean 'private'?) "
        "(link-local and metadata addresses are never reachable ad hoc: name them in a configuration)")


async def test_an_answer_is_kept_ten_seconds_by_default() -> None:
    clock = FakeClock(0.0)
    resolver = CheckingResolver(DestinationPolicy(), clock=clock)
    await resolver.checked("8.8.8.8", 443)
    resolver.policy = DestinationPolicy(ad_hoc_destinations=["private"])  # would now refuse it
    clock.now = 9.99
    await resolver.checked("8.8.8.8", 443)  # the kept answer
    clock.now = 10.0
    with pytest.raises(DestinationRefusedError):
        await resolver.checked("8.8.8.8", 443)


async def test_the_resolver_keeps_at_most_256_names_by_default() -> None:
    resolver = CheckingResolver(DestinationPolicy())
    for i in range(257):
        await resolver.checked(f"8.8.{i // 256}.{i % 256}", 443)
    assert len(resolver) == 256


async def test_the_guards_client_opens_at_most_100_connections_by_default() -> None:
    guard = DestinationGuard(DestinationPolicy())
    connector = guard.http.session.connector
    assert connector is not None and connector.limit == 100
    await guard.http.aclose()


def test_the_guards_client_reads_with_the_limits_it_was_given() -> None:
    limits = ReadLimits(max_body_bytes=1024)
    assert DestinationGuard(DestinationPolicy(), limits=limits).http.limits is limits


def test_an_ad_hoc_call_to_a_base_url_goes_through_the_guards_client() -> None:
    guard, default = DestinationGuard(DestinationPolicy()), HttpClient()
    config = ProviderConfig.ad_hoc("openai", "gpt-4o", base_url="https://example.com/v1", api_key="k")
    assert guard.client_for(config, default) is guard.http


def test_an_ad_hoc_call_without_a_base_url_keeps_the_usual_client() -> None:
    guard, default = DestinationGuard(DestinationPolicy()), HttpClient()
    assert guard.client_for(ProviderConfig.ad_hoc("openai", "gpt-4o", api_key="k"), default) is default
