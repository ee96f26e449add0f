"""Ad-hoc destinations, pinned where the mutation run found them unchecked (docs/testing.md)."""

from __future__ import annotations

import pytest

from provmw.destinations import CheckingResolver, DestinationPolicy
from provmw.errors import DestinationRefusedError


async def test_a_shorthand_ipv4_host_is_resolved_and_checked_as_the_address_it_names() -> None:
    # "1.2.3" is no literal ipaddress accepts, but the resolver reads it as 1.2.0.3 (inet_aton's forms).
    [result] = await CheckingResolver(DestinationPolicy()).checked("1.2.3", 443)
    assert (result["host"], result["port"]) == ("1.2.0.3", 443)


async def test_a_shorthand_ipv4_host_that_names_loopback_is_refused() -> None:
    with pytest.raises(DestinationRefusedError, match="reaches 127.0.0.1"):
        await CheckingResolver(DestinationPolicy()).checked("0x7f.1", 443)
