"""Virtual keys: what ``provmw serve`` accepts in place of a provider key (ADR 0055).

A key is shown to its owner once, as ``pmk_<key_id>_<secret>``: ``key_id`` is 12 lowercase hex
digits and public (it names the key in lists, logs, the ledger and metrics); ``secret`` is 32
random bytes, URL-safe base64 without padding. A store keeps ``key_id`` and the SHA-256 of the
whole key, never the secret, and :class:`KeyRecord` has no field that could hold either::

    whole, record = await store.create("acme", team="search", models=("gpt",))
    print(whole)                          # the only time anyone sees it
    record = await store.verify(whole)    # a KeyRecord, or None: malformed, unknown or wrong
    principal = record.principal(await store.budgets_for(record))

A store answers :class:`KeyStore`; :class:`KeyCache` keeps its answers a short while (2 s)
so that each request does not read the store, and a change (a key disabled, a budget set)
still reaches every server within that time, without a restart.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import functools
import hashlib
import re
import secrets
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import attrs

from provmw._base.periods import PERIODS
from provmw.context import Principal
from provmw.errors import ConfigurationError
from provmw.middleware.budget import BudgetLimit

if TYPE_CHECKING:
    from provmw._base.periods import Period
    from provmw.settings import Settings

__all__ = ["KEYS_FILE", "KEY_SCOPES", "NAME_MAX", "RESPONSES_KEPT_S", "RESPONSE_ID_MAX", "KeyCache", "KeyRecord",
           "KeyScope", "KeyStore", "check_name", "is_response_id", "key_digest",
           "key_id_of", "keys_path", "new_key"]

KEYS_FILE = "provmw-keys.sqlite3"
PREFIX = "pmk_"
KeyScope = Literal["key", "team", "user", "organisation"]
KEY_SCOPES: tuple[str, ...] = get_args(KeyScope)
_SECRET_BYTES = 32
_KEY_ID_CHARS = 12
# 4 + 12 + 1 + 43: a presented key of any other length is refused before any other work.
KEY_LENGTH = len(PREFIX) + _KEY_ID_CHARS + 1 + 43
_SHAPE = re.compile(r"pmk_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
_KEY_ID = re.compile(r"[0-9a-f]{12}")
# How long a stored response may be continued through the gateway (OpenAI keeps stored responses 30 days).
RESPONSES_KEPT_S = 30 * 86_400
RESPONSE_ID_MAX = 256  # longer is no provider's id: refused unread
NAME_MAX = 128  # an organisation, team or user name: it goes into every ledger row and bucket of the key's calls


def new_key() -> tuple[str, str]:
    """A fresh ``(key_id, whole key)``."""
    key_id = secrets.token_hex(_KEY_ID_CHARS // 2)
    return key_id, f"{PREFIX}{key_id}_{secrets.token_urlsafe(_SECRET_BYTES)}"


def key_id_of(presented: object) -> str | None:
    """The key id of a well-formed key, else None (checked by length first: a 10 MB header costs nothing)."""
    if not isinstance(presented, str) or len(presented) != KEY_LENGTH:
        return None
    shape = _SHAPE.fullmatch(presented)
    return shape[1] if shape else None


def key_digest(whole: str) -> str:
    """What a store keeps of a key: the SHA-256 of all of it, in hex (ADR 0055: why not a slow KDF)."""
    return hashlib.sha256(whole.encode("ascii")).hexdigest()


def _key_id(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or not _KEY_ID.fullmatch(value):
        raise ConfigurationError(f"{attribute.name}: a key id is 12 lowercase hex digits, got {value!r}")


def _name(instance: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        check_name(attribute.name, value, owner=attribute.name in ("organisation", "team"))


def check_name(field: str, value: object, *, owner: bool = True) -> None:
    """Refuse (``ConfigurationError`` naming ``field``) a name that is empty, over ``NAME_MAX`` characters
    or not printable (control characters, lone surrogates: the ledger and the logs take it as given), or,
    for an organisation or team (``owner``), holds a '/': a team's bucket is ``ORGANISATION/TEAM``, and a
    slash would let organisation 'a/b' team 'c' and organisation 'a' team 'b/c' share one."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{field}: expected a non-empty name, got {value!r}")
    if len(value) > NAME_MAX or not value.isprintable() or (owner and "/" in value):
        shown = repr(value[:40]) + ("..." if len(value) > 40 else "")
        slash = " and no '/'" if owner else ""
        raise ConfigurationError(f"{field}: a name is at most {NAME_MAX} printable characters{slash}, got {shown}")


def _names(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):  # one name, not its letters
        return (value,)
    names = tuple(value)
    if not all(isinstance(name, str) and name.strip() for name in names):
        raise ConfigurationError(f"models: expected configuration, pool or alias names, got {names!r}")
    return names


@attrs.frozen(kw_only=True)
class KeyRecord:
    """A key as a store knows it, without its secret or hash: who it is for and what it may call."""

    key_id: str = attrs.field(validator=_key_id)
    organisation: str = attrs.field(validator=_name)
    team: str | None = attrs.field(default=None, validator=_name)
    user: str | None = attrs.field(default=None, validator=_name)
    models: tuple[str, ...] = attrs.field(default=(), converter=_names)  # empty: every name
    guard: str | None = attrs.field(default=None, validator=_name)
    disabled: bool = False
    created_at: float = 0.0
    rotated_from: str | None = None
    name: str = ""

    def may_call(self, model: str) -> bool:
        """Whether the key may call the configuration, pool or alias ``model``."""
        return not self.models or model in self.models

    def as_data(self) -> dict[str, Any]:
        """The record as JSON data (``provmw keys list --format json``, the admin API): no secret, no hash."""
        return {"key_id": self.key_id, "organisation": self.organisation, "team": self.team, "user": self.user,
                "models": list(self.models), "guard": self.guard, "status": "disabled" if self.disabled else "enabled",
                "created_at": dt.datetime.fromtimestamp(self.created_at, dt.UTC).isoformat(timespec="seconds"),
                "rotated_from": self.rotated_from, "name": self.name}

    def principal(self, budgets: Iterable[BudgetLimit] = ()) -> Principal:
        """The principal of a call made with this key, holding ``budgets`` (``KeyStore.budgets_for``)."""
        return Principal(key=self.key_id, team=self.team, organisation=self.organisation, budgets=tuple(budgets),
                         user=self.user)


def is_response_id(value: object) -> bool:
    """Whether ``value`` could be a provider's response id: a non-empty printable string of at most
    ``RESPONSE_ID_MAX`` characters (anything else is no stored response: it is not looked up)."""
    return isinstance(value, str) and 0 < len(value) <= RESPONSE_ID_MAX and value.isprintable()


def budget_owner(scope: str, subject: str, period: str) -> None:
    """Check a key, team, user or organisation budget's scope, name and period (``ConfigurationError``)."""
    if scope not in KEY_SCOPES:
        raise ConfigurationError(f"scope must be one of {', '.join(KEY_SCOPES)}; got {scope!r}")
    if not isinstance(subject, str) or not subject.strip():
        raise ConfigurationError(f"a {scope} budget needs the {scope}'s name, got {subject!r}")
    if scope in ("team", "user"):
        organisation, _, name = subject.partition("/")
        if not organisation.strip() or not name.strip() or (scope == "team" and "/" in name):
            example = "acme/search" if scope == "team" else "acme/grace"
            raise ConfigurationError(f"a {scope} budget names its {scope} within its organisation (ORGANISATION/"
                                     f"{scope.upper()}, such as {example}): two organisations' {scope}s never share "
                                     f"one; got {subject!r}")
        check_name("organisation", organisation)
        check_name(scope, name, owner=scope == "team")
    elif scope == "organisation":
        check_name("organisation", subject)
    if period not in PERIODS:
        raise ConfigurationError(f"period must be one of {', '.join(PERIODS)}; got {period!r}")


def budget_limit(scope: str, subject: str, period: str, *, max_cost_usd: float | None = None,
                 max_tokens: int | None = None, max_requests: int | None = None) -> BudgetLimit:
    """A key, team, user or organisation limit as the budget layer applies it (validated as the settings' are)."""
    budget_owner(scope, subject, period)
    return BudgetLimit(scope=scope, match=subject, period=period, max_cost_usd=max_cost_usd,  # type: ignore[arg-type]
                       max_tokens=max_tokens, max_requests=max_requests)


class KeyStore(Protocol):
    """Where virtual keys and their budgets live (``SqliteKeyStore``; conformance: ``KeyStoreConformance``).

    ``verify`` returns None for a malformed, unknown or wrong key, without reading the store
    when it is malformed, and a disabled key's record (``disabled=True``) so the server can
    say so. ``disable`` and ``rotate`` of an unknown key raise ``ConfigurationError``; a key
    rotates once (its successor is then the one to rotate), so a rotation always leaves one
    enabled key. ``set_budget`` with no maximum removes that limit.
    """

    async def create(self, organisation: str, *, team: str | None = None, user: str | None = None,
                     models: Iterable[str] = (), guard: str | None = None, name: str = "") -> tuple[str, KeyRecord]:
        """A new key: the whole key (shown once, never again) and its record."""
        ...

    async def verify(self, presented: str) -> KeyRecord | None:
        """The record of the key ``presented``, compared in constant time; None if it is not one."""
        ...

    async def get(self, key_id: str) -> KeyRecord | None:
        """The record of ``key_id``, if there is one."""
        ...

    async def list(self, organisation: str | None = None) -> builtins.list[KeyRecord]:
        """Every key (of ``organisation``), oldest first."""
        ...

    async def disable(self, key_id: str) -> KeyRecord:
        """Refuse the key from now on (a server's cache within its TTL); returns its record."""
        ...

    async def rotate(self, key_id: str) -> tuple[str, KeyRecord]:
        """A new key for the same owner, models, guard and key budgets; the old one disabled."""
        ...

    async def set_budget(self, scope: KeyScope, subject: str, period: Period, *, max_cost_usd: float | None = None,
                         max_tokens: int | None = None, max_requests: int | None = None) -> BudgetLimit | None:
        """Set (or, with no maximum, remove) the ``period`` limit of a key, team, user or organisation."""
        ...

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        """The limits of the key, its team, its user and its organisation, as ``Principal.budgets``."""
        ...

    async def record_response(self, response_id: str, organisation: str) -> None:
        """Note that a call of ``organisation`` made the stored response ``response_id`` (its first
        owner keeps it); entries older than ``RESPONSES_KEPT_S`` may go."""
        ...

    async def response_owner(self, response_id: str) -> str | None:
        """The organisation whose call made ``response_id``, None if unknown or older than ``RESPONSES_KEPT_S``."""
        ...

    async def aclose(self) -> None:
        """Release the store's connections."""
        ...


def keys_path(settings: Settings) -> Path:
    """The default key file: ``provmw-keys.sqlite3`` beside the usage ledger."""
    from provmw.middleware import USAGE, section_options

    return Path(section_options(settings, USAGE).path).parent / KEYS_FILE


_Entry = tuple[float, "KeyRecord"]


class KeyCache:
    """A store's ``verify`` and ``budgets_for`` answers, each kept ``ttl_s`` (a change reaches a
    server within it), at most ``max_entries`` of each (the oldest go first: a flood of made-up
    keys cannot grow it). Keys the store does not know are kept apart from those it does, so such
    a flood cannot push real keys out either. Entries are found by the key's digest: the cache
    holds no secret."""

    def __init__(self, store: KeyStore, *, ttl_s: float = 2.0, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s < 0 or max_entries < 1:
            raise ConfigurationError(f"KeyCache: ttl_s must be >= 0 and max_entries >= 1, got {ttl_s}, {max_entries}")
        self.store = store
        self._ttl_s, self._max, self._clock = ttl_s, max_entries, clock
        self._records: dict[str, _Entry] = {}
        self._unknown: dict[str, float] = {}  # digest: until when the store's None holds
        self._budgets: dict[tuple[str, str | None, str | None, str], tuple[float, tuple[BudgetLimit, ...]]] = {}
        self._reading: dict[str, asyncio.Future[KeyRecord | None]] = {}  # one store read per key at a time

    async def verify(self, presented: str) -> KeyRecord | None:
        """``store.verify``, at most once per key and TTL (concurrent requests share one read)."""
        if key_id_of(presented) is None:
            return None
        digest = key_digest(presented)
        kept = self._records.get(digest)
        if kept is not None and kept[0] > self._clock():
            return kept[1]
        if self._unknown.get(digest, 0.0) > self._clock():
            return None
        reading = self._reading.get(digest)
        if reading is None:
            reading = self._reading[digest] = asyncio.ensure_future(self.store.verify(presented))
            reading.add_done_callback(functools.partial(self._read, digest))
        # Shielded: a request that goes away does not cancel the read the others wait for.
        return await asyncio.shield(reading)

    def _read(self, digest: str, reading: asyncio.Future[KeyRecord | None]) -> None:
        del self._reading[digest]
        # exception() also marks a failure as seen, when every request that waited for it has gone.
        if not reading.cancelled() and reading.exception() is None:
            until, record = self._clock() + self._ttl_s, reading.result()
            if record is None:
                _keep(self._unknown, digest, until, self._max)
            else:
                _keep(self._records, digest, (until, record), self._max)

    async def budgets_for(self, record: KeyRecord) -> tuple[BudgetLimit, ...]:
        """``store.budgets_for``, at most once per key, team, user and organisation and TTL."""
        owner = (record.key_id, record.team, record.user, record.organisation)
        kept = self._budgets.get(owner)
        if kept is not None and kept[0] > self._clock():
            return kept[1]
        budgets = await self.store.budgets_for(record)
        _keep(self._budgets, owner, (self._clock() + self._ttl_s, budgets), self._max)
        return budgets

    async def principal(self, record: KeyRecord) -> Principal:
        """The principal of a call made with ``record``'s key, holding its budgets."""
        return record.principal(await self.budgets_for(record))


def _keep(entries: dict[Any, Any], key: object, value: object, most: int) -> None:
    entries.pop(key, None)  # moved to the end: the newest
    entries[key] = value
    while len(entries) > most:
        del entries[next(iter(entries))]
