"""Addresses in 0.0.0.0/8 ("this network": 0.0.0.0 reaches the local host) are loopback, never private."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from provmw.destinations import DestinationPolicy, address_kind
from provmw.errors import DestinationRefusedError


@given(st.ip_addresses(network="0.0.0.0/8"))
def test_every_this_network_address_is_loopback(address: ipaddress.IPv4Address) -> None:
    assert address_kind(address) == "loopback"


@given(st.ip_addresses(network="0.0.0.0/8"))
def test_a_this_network_address_in_ipv6_clothes_is_loopback_too(address: ipaddress.IPv4Address) -> None:
    assert address_kind(ipaddress.IPv6Address(f"::ffff:{address}")) == "loopback"


@pytest.mark.parametrize("address", ["0.0.0.1", "0.1.2.3", "0.255.255.255"])
def test_allowing_private_addresses_does_not_allow_this_network(address: str) -> None:
    policy = DestinationPolicy(ad_hoc_destinations=("public", "private"))
    with pytest.raises(DestinationRefusedError) as refused:
        policy.check("gateway.test", address)
    assert (refused.value.kind, refused.value.address) == ("loopback", address)
