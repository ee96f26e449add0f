"""The gateway's virtual keys in Redis: one key store for every host of a fleet (ADR 0055).

``provmw serve --keys redis://...`` on each host, and ``provmw keys --keys redis://...`` anywhere:
a key disabled or a budget set on one host reaches every server within the gateway's cache TTL.
Every key carries the hash tag ``{<key_prefix>:keys}`` (one slot: the scripts also run on a Redis
Cluster)::

    {provmw:keys}:k:<key_id>               hash: the record's fields and the SHA-256 of the whole key
                                           (never the secret); 'successor' once rotated
    {provmw:keys}:all, ...:org:<name>      sorted sets of key ids by creation time: list()
    {provmw:keys}:b:<scope>:<subject>      hash: period -> [max_cost_usd, max_tokens, max_requests]
    {provmw:keys}:r:<response_id>          the organisation whose call made it, expiring after 30 days

Creating and rotating a key are Lua scripts (an id never overwritten; a key rotates once: two
rotations at once, from two hosts, cannot both win); a verify is one ``HGETALL`` and a
constant-time compare of the digests (an unknown id against a dummy digest). The store has its
own client, from the URL; while Redis does not answer, every call raises ``RedisUnavailableError``
(the gateway answers 503). Run this Redis with persistence (``appendonly yes``): a restart
without it forgets every key.
"""

from __future__ import annotations

import builtins
import functools
import hmac
import json
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from provmw.errors import ConfigurationError
from provmw.gateway.keys import (
    KEY_SCOPES,
    RESPONSES_KEPT_S,
    KeyRecord,
    KeyScope,
    budget_limit,
    budget_owner,
    check_name,
    is_response_id,
    key_digest,
    key_id_of,
    new_key,
)
from provmw.stores.shared import StateSettings
from provmw_redis.backend import RedisState, milliseconds

if TYPE_CHECKING:
    from provmw.middleware.budget import BudgetLimit

__all__ = ["RedisKeyStore"]

_NO_DIGEST = "0" * 64  # compared against when the key id is unknown
_KEY_ID = re.compile(r"[0-9a-f]{12}")  # looked up only in this shape
_DRAWS = 8
_OPTIONAL = ("team", "user", "guard", "rotated_from")  # fields left out of the hash when None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fields(record: KeyRecord, digest: str) -> list[str]:
    """The hash of ``record`` as a flat field, value list (what HSET takes)."""
    fields = {"digest": digest, "organisation": record.organisation, "models": json.dumps(list(record.models)),
              "disabled": "1" if record.disabled else "0", "created_at": repr(record.created_at),
              "name": record.name, **{f: getattr(record, f) for f in _OPTIONAL if getattr(record, f) is not None}}
    return [part for pair in fields.items() for part in pair]


def _record(key_id: str, raw: Mapping[Any, Any]) -> KeyRecord:
    found = {_text(field): _text(value) for field, value in raw.items()}
    return KeyRecord(key_id=key_id, organisation=found["organisation"], team=found.get("team"),
                     user=found.get("user"), models=json.loads(found["models"]), guard=found.get("guard"),
                     disabled=found["disabled"] == "1", created_at=float(found["created_at"]),
                     rotated_from=found.get("rotated_from"), name=found["name"])


class RedisKeyStore:
    """Virtual keys in Redis (see the module's text); implements ``provmw.gateway.KeyStore``."""

    def __init__(self, state: RedisState, *, clock: Callable[[], float] = time.time) -> None:
        self._state, self._clock = state, clock  # the store's own: closed with it
        self._client = state.client
        self._tag = f"{{{state.options.key_prefix}:keys}}:"
        self._create = state.script("keys_create")
        self._rotate = state.script("keys_rotate")

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any] | None = None) -> RedisKeyStore:
        """A store with a client of its own for ``url``; ``options`` are ``[state]``'s connection keys
        (``key_prefix``, ``timeout_s``, ``retry_s``, ``max_connections``)."""
        return cls(RedisState(StateSettings(url, shared=(), options=options or {}), "the Redis key store"))

    def __repr__(self) -> str:
        return f"RedisKeyStore({self._state.shown_url!r}, key_prefix={self._state.options.key_prefix})"

    async def create(self, organisation: str, *, team: str | None = None, user: str | None = None,
                     models: Iterable[str] = (), guard: str | None = None, name: str = "") -> tuple[str, KeyRecord]:
        template = KeyRecord(key_id="0" * 12, organisation=organisation, team=team, user=user, models=models,
                             guard=guard, name=name)  # checked here, before Redis is touched
        for _ in range(_DRAWS):
            whole, record = self._drawn(template)
            keys = [self._key(record.key_id), self._tag + "all", self._organisation(organisation)]
            args = [record.key_id, repr(record.created_at), *_fields(record, key_digest(whole))]
            if await self._state.run(functools.partial(self._create, keys=keys, args=args)):
                return whole, record
        raise ConfigurationError(f"no free key id in {_DRAWS} draws: is the key store sound?")

    async def verify(self, presented: str) -> KeyRecord | None:
        key_id = key_id_of(presented)
        if key_id is None:
            return None  # malformed: Redis is not read
        raw = await self._state.run(lambda: self._client.hgetall(self._key(key_id)))
        stored = _text(raw.get(b"digest", _NO_DIGEST))
        matches = hmac.compare_digest(stored, key_digest(presented))
        return _record(key_id, raw) if raw and matches else None

    async def get(self, key_id: str) -> KeyRecord | None:
        if not _KEY_ID.fullmatch(key_id):
            return None  # no key has this id (one Redis could not even be sent: a lone surrogate)
        raw = await self._state.run(lambda: self._client.hgetall(self._key(key_id)))
        return _record(key_id, raw) if raw else None

    async def list(self, organisation: str | None = None) -> builtins.list[KeyRecord]:
        listed = self._tag + "all" if organisation is None else self._organisation(organisation)

        async def read() -> builtins.list[KeyRecord]:
            ids = [_text(key_id) for key_id in await self._client.zrange(listed, 0, -1)]  # by time, then id
            async with self._client.pipeline(transaction=False) as pipe:
                for key_id in ids:
                    pipe.hgetall(self._key(key_id))
                rows = await pipe.execute()
            return [_record(key_id, raw) for key_id, raw in zip(ids, rows, strict=True) if raw]

        return await self._state.run(read)

    async def disable(self, key_id: str) -> KeyRecord:
        record = await self._existing(key_id)
        await self._state.run(lambda: self._client.hset(self._key(key_id), "disabled", "1"))
        return attrs.evolve(record, disabled=True)

    async def rotate(self, key_id: str) -> tuple[str, KeyRecord]:
        old = await self._existing(key_id)
        template = attrs.evolve(old, disabled=False, rotated_from=key_id)
        for _ in range(_DRAWS):
            whole, new = self._drawn(template)
            keys = [self._key(key_id), self._key(new.key_id), self._tag + "all", self._organisation(old.organisation),
                    self._budgets("key", key_id), self._budgets("key", new.key_id)]
            args = [new.key_id, repr(new.created_at), *_fields(new, key_digest(whole))]
            outcome = await self._state.run(functools.partial(self._rotate, keys=keys, args=args))
            code = int(outcome[0])
            if code == 1:
                return whole, new
            if code == 0:
                raise _unknown(key_id)
            if code == -1:
                raise ConfigurationError(f"virtual key {key_id!r} was rotated already, to "
                                         f"{_text(outcome[1])!r}: rotate that one")
        raise ConfigurationError(f"no free key id in {_DRAWS} draws: is the key store sound?")

    async def set_budget(self, scope: KeyScope, subject: str, period: str, *, max_cost_usd: float | None = None,
                         max_tokens: int | None = None, max_requests: int | None = None) -> BudgetLimit | None:
        maxima = (max_cost_usd, max_tokens, max_requests)
        budget_owner(scope, subject, period)
        limit = None if maxima == (None, None, None) else budget_limit(
            scope, subject, period, max_cost_usd=max_cost_usd, max_tokens=max_tokens, max_requests=max_requests)
        if scope == "key":  # keys are never deleted: it cannot go before the write below
            await self._existing(subject)
            successor = await self._state.run(lambda: self._client.hget(self._key(subject), "successor"))
            if successor is not None:  # its budget would bind nothing: its successor is the one in use
                raise ConfigurationError(f"virtual key {subject!r} was rotated already, to {_text(successor)!r}: "
                                         "budget that one")
        budgets = self._budgets(scope, subject)
        if limit is None:
            await self._state.run(lambda: self._client.hdel(budgets, period))
        else:
            await self._state.run(lambda: self._client.hset(budgets, period, json.dumps(maxima)))
        return limit

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        # A missing team or user has no budget hash at all: no 'acme/None' budget can match it.
        owners = [(scope, subject) for scope, subject in zip(KEY_SCOPES, (
            record.key_id, *(None if name is None else f"{record.organisation}/{name}"
                             for name in (record.team, record.user)), record.organisation), strict=True)
            if subject is not None]

        async def read() -> builtins.list[Any]:
            async with self._client.pipeline(transaction=False) as pipe:
                for scope, subject in owners:
                    pipe.hgetall(self._budgets(scope, subject))
                return list(await pipe.execute())

        found = await self._state.run(read)
        return tuple(_limit(scope, subject, _text(period), maxima)
                     for (scope, subject), held in zip(owners, found, strict=True)
                     for period, maxima in sorted(held.items()))

    async def record_response(self, response_id: str, organisation: str) -> None:
        if not is_response_id(response_id):
            raise ConfigurationError(f"response_id: not a provider's response id: {response_id!r:.80}")
        check_name("organisation", organisation)
        # NX: its first owner keeps it; Redis forgets it after RESPONSES_KEPT_S.
        await self._state.run(lambda: self._client.set(self._tag + f"r:{response_id}", organisation, nx=True,
                                                       px=milliseconds(RESPONSES_KEPT_S)))

    async def response_owner(self, response_id: str) -> str | None:
        if not is_response_id(response_id):
            return None
        owner = await self._state.run(lambda: self._client.get(self._tag + f"r:{response_id}"))
        return None if owner is None else _text(owner)

    async def aclose(self) -> None:
        await self._state.aclose()

    def _drawn(self, template: KeyRecord) -> tuple[str, KeyRecord]:
        key_id, whole = new_key()
        return whole, attrs.evolve(template, key_id=key_id, created_at=self._clock())

    async def _existing(self, key_id: str) -> KeyRecord:
        found = await self.get(key_id)
        if found is None:
            raise _unknown(key_id)
        return found

    def _key(self, key_id: str) -> str:
        return self._tag + f"k:{key_id}"

    def _organisation(self, organisation: str) -> str:
        return self._tag + f"org:{organisation}"

    def _budgets(self, scope: str, subject: str) -> str:
        return self._tag + f"b:{scope}:{subject}"


def _limit(scope: str, subject: str, period: str, maxima: bytes) -> BudgetLimit:
    cost, tokens, requests = json.loads(maxima)
    return budget_limit(scope, subject, period, max_cost_usd=cost, max_tokens=tokens, max_requests=requests)


def _unknown(key_id: str) -> ConfigurationError:
    return ConfigurationError(f"no virtual key {key_id!r} in this key store")
