"""The key store contract: pytest tests a virtual key store inherits (ADR 0055).

Subclass ``KeyStoreConformance`` in a test module (its name must start with ``Test``) and
implement ``open_store(name)``: a new ``name`` opens an empty store, the same ``name`` again
the same store. pytest-asyncio (``asyncio_mode = "auto"``) runs the tests::

    class TestAcmeKeyStore(KeyStoreConformance):
        async def open_store(self, name):
            return AcmeKeyStore(f"acme://127.0.0.1/{name}")

The contract: the whole key comes back once, from ``create`` and ``rotate``, and nothing read
later holds its secret; ``verify`` finds a key by its whole text only (a malformed, unknown or
wrong one is None) and returns a disabled key's record marked disabled; a key rotates once,
to a successor with the same owner, models and key budgets, leaving one of the two enabled;
``budgets_for`` holds the key's, its team's, its user's and its organisation's limits, and only those;
an organisation or team name with a '/' is refused; ``response_owner`` answers the organisation
a response was first recorded for, and None for any other id.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import attrs
import pytest

from provmw.errors import ConfigurationError
from provmw.gateway.keys import KEY_LENGTH, KeyStore
from provmw.middleware.budget import BudgetLimit

__all__ = ["MALFORMED_KEYS", "KeyStoreConformance"]

_WELL_FORMED = "pmk_0123456789ab_" + "A" * 43
# Each wrong in one way; the last is a 10 MB header.
MALFORMED_KEYS: tuple[Any, ...] = (
    "", "sk_0123456789ab_" + "A" * 44, _WELL_FORMED[:-1], _WELL_FORMED + "A", "pmk_0123456789AB_" + "A" * 43,
    "pmk_0123456789xy_" + "A" * 43, "pmk_0123456789ab-" + "A" * 43, "pmk_0123456789ab_" + "A" * 42 + "=",
    "pmk_0123456789ab_" + "A" * 42 + "é", None, b"pmk_0123456789ab_" + b"A" * 43, "pmk_" + "0" * 10_000_000)


def _secret(whole: str) -> str:
    return whole[len("pmk_0123456789ab_"):]


class KeyStoreConformance:
    """Tests every key store must pass; subclass it and implement ``open_store``."""

    durable: ClassVar[bool] = True

    async def open_store(self, name: str) -> KeyStore:
        """The key store called ``name`` (a lowercase identifier): empty when new."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self) -> AsyncIterator[KeyStore]:
        store = await self.open_store(f"keys_{uuid.uuid4().hex[:12]}")
        yield store
        await store.aclose()

    async def test_a_key_is_shown_whole_with_its_record(self, store: KeyStore) -> None:
        whole, record = await store.create("acme", team="search", user="ada", models=["gpt", "claude"],
                                           guard="strict", name="ci")
        assert len(whole) == KEY_LENGTH
        assert whole.startswith(f"pmk_{record.key_id}_")
        assert (record.organisation, record.team, record.user, record.models, record.guard, record.name) == \
            ("acme", "search", "ada", ("gpt", "claude"), "strict", "ci")
        assert (record.disabled, record.rotated_from) == (False, None)
        assert record.created_at > 0

    async def test_a_key_verifies_as_its_record(self, store: KeyStore) -> None:
        whole, record = await store.create("acme", team="search")
        assert await store.verify(whole) == record

    async def test_a_wrong_secret_for_a_known_key_id_is_none(self, store: KeyStore) -> None:
        whole, _ = await store.create("acme")
        wrong = whole[:-2] + ("AA" if whole[-2:] != "AA" else "BB")
        assert await store.verify(wrong) is None

    async def test_an_unknown_key_is_none(self, store: KeyStore) -> None:
        assert await store.verify(_WELL_FORMED) is None

    @pytest.mark.parametrize("presented", MALFORMED_KEYS, ids=range(len(MALFORMED_KEYS)))
    async def test_a_malformed_key_is_none(self, store: KeyStore, presented: Any) -> None:
        await store.create("acme")
        assert await store.verify(presented) is None

    async def test_a_disabled_key_verifies_marked_disabled(self, store: KeyStore) -> None:
        whole, record = await store.create("acme")
        assert (await store.disable(record.key_id)).disabled
        assert await store.verify(whole) == attrs.evolve(record, disabled=True)

    async def test_nothing_read_back_holds_the_secret(self, store: KeyStore) -> None:
        whole, record = await store.create("acme", team="t", user="u", models=["m"], name="n")
        await store.disable(record.key_id)
        rotated, _ = await store.rotate(record.key_id)
        seen = [record, await store.get(record.key_id), await store.verify(rotated), await store.list(),
                await store.budgets_for(record)]
        for secret in (_secret(whole), _secret(rotated)):
            assert not any(secret in repr(value) or secret in str(value) for value in seen)

    async def test_get_finds_a_key_by_id_and_none_for_another(self, store: KeyStore) -> None:
        _, record = await store.create("acme")
        assert await store.get(record.key_id) == record
        assert await store.get("0123456789ab") is None

    async def test_list_gives_an_organisations_keys_oldest_first(self, store: KeyStore) -> None:
        first = (await store.create("acme", name="1"))[1]
        await store.create("globex")
        second = (await store.create("acme", name="2"))[1]
        assert await store.list("acme") == [first, second]
        assert len(await store.list()) == 3

    async def test_disabling_or_rotating_an_unknown_key_is_refused(self, store: KeyStore) -> None:
        with pytest.raises(ConfigurationError, match="0123456789ab"):
            await store.disable("0123456789ab")
        with pytest.raises(ConfigurationError, match="0123456789ab"):
            await store.rotate("0123456789ab")

    async def test_a_rotated_key_keeps_owner_models_and_budgets(self, store: KeyStore) -> None:
        old_whole, old = await store.create("acme", team="t", user="u", models=["m"], guard="g", name="n")
        await store.set_budget("key", old.key_id, "day", max_requests=5)
        whole, new = await store.rotate(old.key_id)
        assert (new.organisation, new.team, new.user, new.models, new.guard, new.name, new.rotated_from) == \
            ("acme", "t", "u", ("m",), "g", "n", old.key_id)
        assert await store.budgets_for(new) == (BudgetLimit(scope="key", match=new.key_id, period="day",
                                                             max_requests=5),)
        assert await store.verify(whole) == new
        assert await store.verify(old_whole) == attrs.evolve(old, disabled=True)

    async def test_a_budget_for_a_rotated_key_is_refused_naming_its_successor(self, store: KeyStore) -> None:
        _, old = await store.create("acme")
        _, new = await store.rotate(old.key_id)
        with pytest.raises(ConfigurationError, match=f"rotated already, to '{new.key_id}'"):
            await store.set_budget("key", old.key_id, "day", max_requests=5)
        assert await store.budgets_for(old) == ()

    async def test_a_rotation_leaves_exactly_one_enabled_key(self, store: KeyStore) -> None:
        _, old = await store.create("acme", team="t")
        await store.disable(old.key_id)  # a leaked key, disabled first, then replaced
        outcomes = await asyncio.gather(store.rotate(old.key_id), store.rotate(old.key_id), return_exceptions=True)
        assert sorted(type(o).__name__ for o in outcomes) == ["ConfigurationError", "tuple"]
        assert [r.disabled for r in await store.list("acme")] == [True, False]

    async def test_budgets_for_holds_the_keys_teams_users_and_organisations_limits(self, store: KeyStore) -> None:
        _, record = await store.create("acme", team="search", user="grace")
        await store.set_budget("organisation", "acme", "month", max_cost_usd=100.0)
        await store.set_budget("user", "acme/grace", "day", max_tokens=50)
        await store.set_budget("team", "acme/search", "week", max_tokens=1000)
        await store.set_budget("key", record.key_id, "day", max_requests=10)
        assert await store.budgets_for(record) == (
            BudgetLimit(scope="key", match=record.key_id, period="day", max_requests=10),
            BudgetLimit(scope="team", match="acme/search", period="week", max_tokens=1000),
            BudgetLimit(scope="user", match="acme/grace", period="day", max_tokens=50),
            BudgetLimit(scope="organisation", match="acme", period="month", max_cost_usd=100.0))

    async def test_budgets_for_leaves_out_other_keys_teams_users_and_organisations(self, store: KeyStore) -> None:
        _, record = await store.create("acme", team="search", user="grace")
        _, other = await store.create("globex", team="search", user="grace")  # the same names elsewhere
        for scope, subject in (("key", other.key_id), ("team", "globex/search"), ("user", "globex/grace"),
                               ("organisation", "globex")):
            await store.set_budget(scope, subject, "total", max_requests=1)  # type: ignore[arg-type]
        assert await store.budgets_for(record) == ()

    async def test_a_key_without_a_team_or_user_draws_on_no_team_or_user_budget(self, store: KeyStore) -> None:
        _, record = await store.create("acme")
        await store.set_budget("team", "acme/None", "total", max_requests=1)  # names that a missing one might print as
        await store.set_budget("user", "acme/None", "total", max_requests=1)
        assert await store.budgets_for(record) == ()

    async def test_a_budget_set_again_replaces_it_and_with_no_maximum_goes(self, store: KeyStore) -> None:
        _, record = await store.create("acme")
        await store.set_budget("organisation", "acme", "day", max_requests=1)
        await store.set_budget("organisation", "acme", "day", max_tokens=7)
        assert [(b.max_requests, b.max_tokens) for b in await store.budgets_for(record)] == [(None, 7)]
        assert await store.set_budget("organisation", "acme", "day") is None
        assert await store.budgets_for(record) == ()

    @pytest.mark.parametrize(("scope", "subject", "period", "maximum"), [
        ("user", "ada", "day", 1), ("user", "/ada", "day", 1), ("tenant", "acme", "day", 1), ("team", "", "day", 1),
        ("team", "a/t", "hour", 1), ("team", "a/t", "day", -1),
        ("team", "t", "day", 1),
        ("key", "0123456789ab", "day", 1)])
    async def test_a_budget_badly_named_or_for_no_key_is_refused(self, store: KeyStore, scope: str, subject: str,
                                                                 period: str, maximum: int) -> None:
        with pytest.raises(ConfigurationError):
            await store.set_budget(scope, subject, period, max_requests=maximum)  # type: ignore[arg-type]

    @pytest.mark.parametrize(("organisation", "team"), [("a/b", "c"), ("a", "b/c"), ("ac\x00me", None),
                                                        ("o" * 129, None)])
    async def test_a_key_for_an_organisation_or_team_no_bucket_can_name_is_refused(
            self, store: KeyStore, organisation: str, team: str | None) -> None:
        with pytest.raises(ConfigurationError):
            await store.create(organisation, team=team)
        assert await store.list() == []

    async def test_a_recorded_response_is_owned_by_its_organisation_and_others_are_unknown(
            self, store: KeyStore) -> None:
        await store.record_response("resp_1", "acme")
        assert await store.response_owner("resp_1") == "acme"
        assert await store.response_owner("resp_2") is None
        assert await store.response_owner("x" * 10_000) is None

    async def test_a_response_keeps_its_first_owner(self, store: KeyStore) -> None:
        await store.record_response("resp_1", "acme")
        await store.record_response("resp_1", "globex")
        assert await store.response_owner("resp_1") == "acme"

    @pytest.mark.parametrize("response_id", ["", "r" * 257, "resp\n1"])
    async def test_a_response_id_no_provider_gives_is_not_recorded(self, store: KeyStore, response_id: str) -> None:
        with pytest.raises(ConfigurationError):
            await store.record_response(response_id, "acme")

    async def test_keys_and_budgets_outlive_the_store_object(self) -> None:
        if not self.durable:
            pytest.skip("this store keeps nothing once closed")
        name = f"keys_{uuid.uuid4().hex[:12]}"
        first = await self.open_store(name)
        whole, record = await first.create("acme")
        await first.set_budget("key", record.key_id, "total", max_requests=3)
        await first.aclose()
        again = await self.open_store(name)
        try:
            assert await again.verify(whole) == record
            assert len(await again.budgets_for(record)) == 1
        finally:
            await again.aclose()

