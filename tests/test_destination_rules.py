"""The destination policy's finer rules: embedded IPv4 forms, names of the metadata service, literal
addresses, what a refusal says, how long a resolution is kept, where a base URL points."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from provmw.destinations import CheckingResolver, DestinationPolicy, _host_port, address_kind
from provmw.errors import ConfigurationError, DestinationRefusedError

LOOPBACK_ALLOWED = DestinationPolicy(ad_hoc_destinations=("public", "loopback"))
NEVER = "never reachable by an ad-hoc call; name it in a configuration of the settings file"


@pytest.mark.parametrize(("address", "kind"), [
    ("64:ff9b::7f00:1", "loopback"), ("64:ff9b::a9fe:a9fe", "metadata"), ("64:ff9b::a00:1", "private"),
    ("64:ff9b::808:808", "public"), ("224.0.0.1", "reserved"), ("ff02::1", "reserved"), ("240.0.0.1", "reserved")])
def test_nat64_forms_carry_their_ipv4_class_and_multicast_is_reserved(address: str, kind: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("name", ["METADATA.google.internal.", "metadata.", "Metadata.Goog"])
def test_a_metadata_name_is_refused_however_it_is_written(name: str) -> None:
    with pytest.raises(DestinationRefusedError) as refused:
        DestinationPolicy(ad_hoc_destinations=("public", "private", "loopback")).check_name(name)
    assert (refused.value.host, refused.value.address, refused.value.kind, refused.value.hint) == \
        (name, name, "metadata", NEVER)


def test_a_refusal_says_how_to_allow_its_class() -> None:
    with pytest.raises(DestinationRefusedError) as refused:
        DestinationPolicy().check("gateway.test", "10.0.0.1")
    assert refused.value.hint == "allowed only when [security] ad_hoc_destinations lists 'private'"


async def test_a_literal_address_resolves_to_itself_with_its_family() -> None:
    resolver = CheckingResolver(LOOPBACK_ALLOWED)
    numeric = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
    assert await resolver.resolve("::1", 8080) == [{"hostname": "::1", "host": "::1", "port": 8080,
                                                   "family": socket.AF_INET6, "proto": socket.IPPROTO_TCP,
                                                   "flags": numeric}]
    assert [r["family"] for r in await resolver.resolve("127.0.0.1", 80)] == [socket.AF_INET]
    assert await resolver.resolve("127.0.0.1", 80, family=socket.AF_INET6) == []


async def test_a_kept_resolution_is_fresh_until_exactly_its_ttl() -> None:
    now = [0.0]
    resolver = CheckingResolver(LOOPBACK_ALLOWED, ttl_s=10.0, clock=lambda: now[0])
    first = await resolver.checked("localhost", 80)
    now[0] = 9.999
    assert await resolver.checked("LOCALHOST.", 80) is first  # one name, however it is spelt
    now[0] = 10.0
    assert await resolver.checked("localhost", 80) is not first


@pytest.mark.parametrize(("url", "where"), [("https://h.test/v1", ("h.test", 443)), ("http://h.test", ("h.test", 80)),
                                            ("http://h.test:8080/x", ("h.test", 8080))])
def test_a_base_url_points_at_its_host_and_port(url: str, where: tuple[str, int]) -> None:
    assert _host_port(url) == where


@pytest.mark.parametrize(("url", "message"), [("http://h.test:99999/v1", "base_url: the port is not a number from 0 "
                                                                            "to 65535"),
                                               ("http:///v1", "base_url: names no host")])
def test_a_base_url_error_says_exactly_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        _host_port(url)
    assert str(refused.value) == message


def test_a_misspelt_security_key_is_told_the_right_one() -> None:
    with pytest.raises(ConfigurationError, match="did you mean 'ad_hoc_destinations'"):
        DestinationPolicy.from_table({"ad_hoc_destination": ["public"]}, "f.toml")


async def test_a_name_resolves_to_stream_addresses_only() -> None:
    results = await CheckingResolver(LOOPBACK_ALLOWED).resolve("localhost", 80)
    assert results and {r["proto"] for r in results} == {socket.IPPROTO_TCP}


async def test_a_name_resolved_again_is_the_newest_kept() -> None:
    now = [0.0]
    resolver = CheckingResolver(LOOPBACK_ALLOWED, ttl_s=10.0, max_entries=2, clock=lambda: now[0])
    await resolver.checked("127.0.0.1", 80)
    await resolver.checked("127.0.0.2", 80)
    now[0] = 11.0
    again = await resolver.checked("127.0.0.1", 80)  # expired: resolved again, now the newest
    await resolver.checked("127.0.0.3", 80)  # one too many: the oldest (127.0.0.2) goes
    assert await resolver.checked("127.0.0.1", 80) is again
