"""Ad-hoc destinations, pinned where the mutation run found them unchecked (docs/testing.md)."""

from __future__ import annotations

import pytest

from provmw.destinations import CheckingResolver, DestinationPolicy
from provmw.errors import ConfigurationError, DestinationRefusedError


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
