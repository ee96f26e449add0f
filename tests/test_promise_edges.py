"""Small rules the mutation run found unpinned: what an error status bills, what the ledger's grace keeps at its
edge, what a base URL or a misspelt setting is told, how the resolver keeps its answers, what changes a key."""

from __future__ import annotations

import socket

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderOperation
from provmw.destinations import CheckingResolver, DestinationPolicy, _host_port
from provmw.errors import ConfigurationError, ProviderError
from provmw.messages import Message
from provmw.requests import ChatRequest, request_digest
from provmw.stores.budgets import KEEP_EXPIRED_S, Amounts, BucketId, Charge, Limits, MemoryBudgetStore
from provmw.stores.usage import billed_for
from provmw.testing import call_context

LOOPBACK_ALLOWED = DestinationPolicy(ad_hoc_destinations=("public", "loopback"))


@pytest.mark.parametrize(("status", "billed"), [(400, "no"), (399, "unknown"), (None, "unknown")])
def test_an_error_status_from_400_up_was_not_billed(status: int | None, billed: str) -> None:
    assert billed_for(ProviderError("answered", status=status)) == billed


async def test_a_reservation_is_settleable_up_to_the_last_instant_of_its_grace() -> None:
    store, day = MemoryBudgetStore(), BucketId("user", "ada", "day", "2026-11-22")
    await store.reserve("r1", [Charge(day, Limits(), Amounts(900, 0, 1))], now=0, lease_s=5)
    await store.reserve("r2", [Charge(day, Limits(), Amounts(1, 0, 1))], now=5 + KEEP_EXPIRED_S, lease_s=5)
    await store.settle("r1", Amounts(300, 0, 1))
    [state] = await store.states(now=5 + KEEP_EXPIRED_S)
    assert state.spent.cost_micro_usd == 300


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


def test_options_holding_lists_are_keyed_by_their_items() -> None:
    config = ProviderConfig(identifier="p", provider="openai", model="m")
    one, other = (ChatRequest((Message.user("hi"),), options={"stop": [word]}) for word in ("end", "halt"))
    assert request_digest(ProviderOperation.CHAT, config, one) != request_digest(ProviderOperation.CHAT, config, other)


def test_metadata_get_returns_the_default_for_a_missing_key() -> None:
    assert call_context(metadata={"plugin": 1}).metadata.get("absent", "fallback") == "fallback"
