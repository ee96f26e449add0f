"""The call context: what every middleware layer knows about one logical call.

A context holds the call's ``operation`` and ``correlation_id``, its typed, frozen
``request`` (what will be sent), the built-in :class:`CallFacts` the manager computed from
it (read them as ``ctx.facts.tenant``, ``ctx.facts.cache_key`` ...: typed, never string
keys), the call's :class:`AttemptLog`, and ``metadata``: an immutable mapping that belongs
to plugins (prefix keys with the plugin's name). A layer that changes what is sent hands
``ctx.with_request(changed)`` down (ADR 0001): the facts below it are those of the changed
request. For a middleware test, ``provmw.testing.call_context(tenant="acme")`` builds one
in a line.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import hashlib
import itertools
import json
import warnings
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from provmw._base.ids import new_call_id, new_correlation_id
from provmw.errors import ConfigurationError

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.requests import ProviderRequest
    from provmw.responses import Attempt, Billed, Usage

__all__ = ["AttemptLog", "AttemptMeter", "CallFacts", "FrozenMap", "Principal", "ProviderCallContext",
           "ProviderOperation", "attempt_meters", "metering", "scoped_key"]


class ProviderOperation(enum.Enum):
    """The kind of provider call a context describes (beyond the first five: ``provmw.operations``)."""

    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    VISION = "vision"
    TOOLS = "tools"
    RESPONSES = "responses"
    IMAGE = "image"
    IMAGE_EDIT = "image_edit"
    TRANSCRIPTION = "transcription"
    SPEECH = "speech"
    RERANK = "rerank"
    MODERATION = "moderation"


class FrozenMap(Mapping[str, Any]):
    """An immutable, hashable-free, picklable mapping."""

    __slots__ = ("_data",)
    _data: dict[str, Any]

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        object.__setattr__(self, "_data", dict(data or {}))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    # The per-call path reads options and controls through these: straight to the dict, not
    # through Mapping's generic methods (a merge {**a, **b} was four times slower).
    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> KeysView[str]:
        return self._data.keys()

    def items(self) -> ItemsView[str, Any]:
        return self._data.items()

    def values(self) -> ValuesView[Any]:
        return self._data.values()

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, Any]]]:
        return (FrozenMap, (self._data,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


_EMPTY = FrozenMap()  # immutable: every context without plugin metadata, every fact left empty, shares it


def _freeze(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _freeze_or_none(value: Mapping[str, Any] | None) -> FrozenMap | None:
    return value if value is None or isinstance(value, FrozenMap) else FrozenMap(value)


def scoped_key(digest: str, tenant: str | None, user: str | None) -> str:
    """A request digest bound to who may see its answer: the caller's tenant and user.

    The scope is JSON, so no (tenant, user) pair can collide with another.
    """
    scope = f"[{_json_string(tenant)}, {_json_string(user)}]"  # json.dumps([tenant, user]), without its setup
    return hashlib.sha256(f"{scope}\n{digest}".encode()).hexdigest()


def _json_string(value: str | None) -> str:
    if value is None:
        return "null"
    return encode_basestring_ascii(value) if type(value) is str else json.dumps(value)


def _budgets(value: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(value)


def _key_id(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    # A principal's key goes into budget buckets, ledger rows, metrics and logs: a whole virtual key
    # (pmk_<key_id>_<secret>) there would publish its secret. Its id is what names it.
    if not isinstance(value, str) or not value or (value.startswith("pmk_") and len(value) > 16):
        raise ConfigurationError(f"Principal.key: expected a key's public id (the 12 hex digits of pmk_<id>_..., "
                                 f"or a name of the host's own), not {'a whole key' if value else repr(value)}")


@attrs.frozen
class Principal:
    """Who a call is for beyond its ``user``: the virtual key it came with, that key's team, user and
    organisation (``provmw serve`` sets it from the key; ADR 0055), and the budgets those hold
    (``provmw.middleware.budget.BudgetLimit`` values scoped ``key``, ``team``, ``user`` or
    ``organisation``), which the budget layer applies with the configured ones: the strictest binds."""

    key: str = attrs.field(validator=_key_id)
    team: str | None = None
    organisation: str | None = None
    budgets: tuple[Any, ...] = attrs.field(default=(), converter=_budgets, eq=False)
    user: str | None = None

    def subject(self, scope: str) -> str | None:
        """The principal's name in ``scope`` (``key``, ``team``, ``user`` or ``organisation``), if it has
        one; a team or user is named within its organisation (``acme/search``, ``acme/grace``): two
        organisations' teams or users of one name never share a bucket."""
        if scope in ("team", "user"):
            name = self.team if scope == "team" else self.user
            return name if name is None or self.organisation is None else f"{self.organisation}/{name}"
        return self.key if scope == "key" else self.organisation if scope == "organisation" else None


@attrs.frozen(kw_only=True)
class CallFacts:
    """What the manager knows about one call, computed once by :func:`provmw._call.facts.call_facts`.

    ``user``, ``tenant``: who the call is for (budgets and usage group by them, the cache
    scopes keys by them); ``principal``: the virtual key, team and organisation of a gateway
    call, with their budgets (``Principal``). ``options``: the generation options the call itself gave (each
    configuration's own are under it: ``provmw.requests.merged_options``), for layers that
    report what was asked. ``controls``: per-call middleware controls. ``idempotency_key``:
    the caller's, when given. ``deterministic``: embeddings, or generation with temperature 0
    or a seed. ``estimated_input_tokens`` (4 characters a token, for rate limits and
    estimates), ``max_input_tokens`` (a true upper bound over the fallback chain, ADR 0015)
    and ``max_output_tokens``: what the call may consume. ``planned_cost_usd``: the worst
    case over the fallback chain at the bound, every input token at the highest rate the
    call can incur (None when a configuration in it is unpriced or has no output bound);
    ``estimated_cost_usd``: the same at the estimate and the input rate. ``shared_cache_key``
    (the canonical request digest) and ``cache_key`` (the digest bound to tenant and user)
    are computed on first read only, and so are the three bounds when the manager gives
    ``bounds`` (what computes them), and the estimate, ``max_output_tokens`` and ``unmet``
    when it gives ``sizes``. ``stream``: the call streams its answer (what the pipeline
    returns is an ``OpenedStream``; the cache and idempotency keys pass it by).

    ``needs``: the capabilities the call needs (names of ``provmw.providers.Capabilities``
    fields: ``chat``, ``tools``, ``vision``, ``schema``, ``response_format``, ``streaming``...);
    ``unmet``: for each configuration of the fallback chain that cannot honour them, the
    identifier and what it lacks (the fallback layer skips it and says why).
    ``response_schema``: the JSON Schema the answer must follow, when the call gave one.
    ``chain``: the call's configuration and its fallbacks, in the order the fallback layer tries them.
    ``rebuild``: the facts of another request for the same call (``ProviderCallContext.with_request``).
    """

    user: str | None = None
    tenant: str | None = None
    principal: Principal | None = None
    options: FrozenMap = attrs.field(default=_EMPTY, converter=_freeze)
    controls: FrozenMap = attrs.field(default=_EMPTY, converter=_freeze)
    idempotency_key: str | None = None
    deterministic: bool = False
    _estimated_input_tokens: int = attrs.field(default=0, alias="estimated_input_tokens")
    _max_input_tokens: int = attrs.field(default=0, alias="max_input_tokens")
    _max_output_tokens: int | None = attrs.field(default=None, alias="max_output_tokens")
    _planned_cost_usd: float | None = attrs.field(default=None, alias="planned_cost_usd")
    _estimated_cost_usd: float | None = attrs.field(default=None, alias="estimated_cost_usd")
    stream: bool = False
    # The configurations the call may try, in order (``fallback_chain``), computed once by the manager.
    chain: tuple[ProviderConfig, ...] = ()
    needs: frozenset[str] = frozenset()
    _unmet: FrozenMap = attrs.field(default=_EMPTY, converter=_freeze, alias="unmet")
    response_schema: FrozenMap | None = attrs.field(default=None, converter=_freeze_or_none)
    # Why no bound before sending holds what the call may be billed (None: one does; provmw.operations).
    unknown_worst_case: str | None = None
    digest: Callable[[], str] | None = attrs.field(default=None, eq=False, repr=False)
    rebuild: Callable[[ProviderRequest], CallFacts] | None = attrs.field(default=None, eq=False, repr=False)
    # Computes (max_input_tokens, planned_cost_usd, estimated_cost_usd) on first read: only budgets
    # read them, and over a fallback chain they cost more than every other fact together.
    bounds: Callable[[], tuple[int, float | None, float | None]] | None = attrs.field(
        default=None, eq=False, repr=False)
    # Computes (estimated_input_tokens, max_output_tokens, unmet) on first read: a cache hit reads
    # none of them (rate limits, budgets and the fallback layer do, on a miss).
    sizes: Callable[[], tuple[int, int | None, Mapping[str, tuple[str, ...]]]] | None = attrs.field(
        default=None, eq=False, repr=False)
    # What the lazy facts came to, once read. Plain slots rather than cached properties: on a
    # slotted class those reach their value through an AttributeError and ``__getattr__``.
    _sized: tuple[int, int | None, FrozenMap] | None = attrs.field(default=None, init=False, eq=False, repr=False)
    _bounded: tuple[int, float | None, float | None] | None = attrs.field(
        default=None, init=False, eq=False, repr=False)
    _keys: tuple[str | None, str | None] | None = attrs.field(default=None, init=False, eq=False, repr=False)

    @property
    def _sizes(self) -> tuple[int, int | None, FrozenMap]:
        sized = self._sized
        if sized is None:
            if self.sizes is not None:
                estimated, max_output, unmet = self.sizes()
                sized = estimated, max_output, _freeze(unmet)
            else:
                sized = self._estimated_input_tokens, self._max_output_tokens, self._unmet
            object.__setattr__(self, "_sized", sized)
        return sized

    @property
    def estimated_input_tokens(self) -> int:
        """The input tokens at 4 characters a token, for rate limits and estimates."""
        return self._sizes[0]

    @property
    def max_output_tokens(self) -> int | None:
        """The largest output bound over the fallback chain (None when one of them sets none)."""
        return self._sizes[1]

    @property
    def unmet(self) -> FrozenMap:
        """For each configuration of the fallback chain that cannot honour ``needs``: what it lacks."""
        return self._sizes[2]

    @property
    def _bounds(self) -> tuple[int, float | None, float | None]:
        bounded = self._bounded
        if bounded is None:
            bounded = self.bounds() if self.bounds is not None else \
                (self._max_input_tokens, self._planned_cost_usd, self._estimated_cost_usd)
            object.__setattr__(self, "_bounded", bounded)
        return bounded

    @property
    def max_input_tokens(self) -> int:
        """A true upper bound of the input tokens over the fallback chain (ADR 0015)."""
        return self._bounds[0]

    @property
    def planned_cost_usd(self) -> float | None:
        """The worst case over the fallback chain at the bound (None when it cannot be known)."""
        return self._bounds[1]

    @property
    def estimated_cost_usd(self) -> float | None:
        """The worst case over the fallback chain at the estimate."""
        return self._bounds[2]

    @property
    def shared_cache_key(self) -> str | None:
        """The canonical request's digest, for nobody in particular (shared cache namespaces)."""
        return self._cache_keys[0]

    @property
    def cache_key(self) -> str | None:
        """The digest bound to the caller's tenant and user: what the cache keys answers by."""
        return self._cache_keys[1]

    @property
    def _cache_keys(self) -> tuple[str | None, str | None]:
        keys = self._keys
        if keys is None:
            shared = None if self.digest is None else self.digest()
            keys = shared, None if shared is None else scoped_key(shared, self.tenant, self.user)
            object.__setattr__(self, "_keys", keys)
        return keys


class AttemptMeter(Protocol):
    """What a layer outside retry and fallback learns of each attempt of its pass (ADR 0040).

    A layer meters what runs under it with :func:`metering`; the terminal tells every meter of
    the task it runs in (:func:`attempt_meters`). A context variable, not the call's context,
    holds them: tasks copy it, so an outer layer that runs ``next`` twice at once (a hedge)
    gets two passes, each told of its own attempts only, while a hedge below the layer is told
    to it.
    """

    async def sending(self, config: ProviderConfig, ctx: ProviderCallContext | None = None) -> None:
        """The attempt is about to leave for ``config``, sending ``ctx.request`` (a layer below the meter
        may have rewritten it); raising refuses it, and nothing is sent."""

    async def ended(self, config: ProviderConfig, billed: Billed, usage: Usage | None) -> None:
        """The attempt ended: ``usage`` (priced) when answered, None with ``billed`` from its error."""


class AttemptLog:
    """The attempts of one logical call: numbers for ledger records, and what reached a provider.

    The manager creates one per call. Numbers are unique within the call even when a
    middleware runs attempts in parallel (a hedge); the terminal records each request that
    reached a provider, and the manager puts them in ``response.attempts``.
    """

    __slots__ = ("_numbers", "recorded")

    def __init__(self) -> None:
        self._numbers = itertools.count(1)
        self.recorded: list[Attempt] = []

    def number(self) -> int:
        """The next attempt number of this call, from 1."""
        return next(self._numbers)

    def record(self, attempt: Attempt) -> None:
        """Note one request that reached a provider, and how it ended."""
        self.recorded.append(attempt)


# The meters of the running pass; tasks copy it (see AttemptMeter). Empty: nothing meters.
_METERS: contextvars.ContextVar[tuple[AttemptMeter, ...]] = contextvars.ContextVar("provmw_meters", default=())


def attempt_meters() -> tuple[AttemptMeter, ...]:
    """The meters every attempt sent from here must tell."""
    return _METERS.get()


@contextlib.contextmanager
def metering(meter: AttemptMeter) -> Iterator[None]:
    """Tell ``meter`` of every attempt sent inside the block (this task and the tasks it starts)."""
    token = _METERS.set((*_METERS.get(), meter))
    try:
        yield
    finally:
        _METERS.reset(token)


# The metadata keys 0.1.0 documented for the built-in facts, and the fact each one is now.
_DEPRECATED_KEYS = {"user": "user", "tenant": "tenant", "cache_key": "cache_key",
                    "shared_cache_key": "shared_cache_key", "deterministic": "deterministic",
                    "idempotency_key": "idempotency_key", "estimated_input_tokens": "estimated_input_tokens",
                    "max_output_tokens": "max_output_tokens", "planned_cost_usd": "planned_cost_usd",
                    "call_options": "controls"}


class _Metadata(FrozenMap):
    """Plugins' metadata, still answering 0.1.0's built-in keys from the facts, with a warning."""

    __slots__ = ("_facts",)
    _facts: CallFacts

    def __init__(self, data: FrozenMap, facts: CallFacts) -> None:
        object.__setattr__(self, "_data", data._data)  # both immutable: one dict serves
        object.__setattr__(self, "_facts", facts)

    def get(self, key: str, default: Any = None) -> Any:
        found = self._data.get(key, _MISSING)
        if found is not _MISSING:
            return found
        fact = _DEPRECATED_KEYS.get(key)
        return default if fact is None else self._deprecated(key, fact)

    def __contains__(self, key: object) -> bool:
        return key in self._data or key in _DEPRECATED_KEYS

    def __getitem__(self, key: str) -> Any:
        try:
            return self._data[key]
        except KeyError:
            fact = _DEPRECATED_KEYS.get(key)
            if fact is None:
                raise
        return self._deprecated(key, fact)

    def _deprecated(self, key: str, fact: str) -> Any:
        # stacklevel 3: past this method and get or __getitem__, at the line that read the key.
        warnings.warn(f"ctx.metadata[{key!r}] is deprecated: read ctx.facts.{fact}", DeprecationWarning, stacklevel=3)
        return getattr(self._facts, fact)


_MISSING = object()  # a metadata value no plugin can have set


@attrs.frozen
class ProviderCallContext:
    """What one logical call is: its operation, correlation id, request, facts, attempts and plugin metadata."""

    operation: ProviderOperation = attrs.field(validator=attrs.validators.instance_of(ProviderOperation))
    correlation_id: str = attrs.field(factory=new_correlation_id)
    metadata: FrozenMap = attrs.field(default=_EMPTY, converter=_freeze)
    facts: CallFacts = attrs.field(factory=CallFacts, kw_only=True)
    # The ledger keys records by this, never by the caller's correlation id, which callers reuse.
    call_id: str = attrs.field(factory=new_call_id, kw_only=True, eq=False, repr=False)
    attempts: AttemptLog = attrs.field(factory=AttemptLog, kw_only=True, eq=False, repr=False)
    # What is sent: never in a repr (it is the caller's text). None only in a context built without one.
    request: ProviderRequest | None = attrs.field(default=None, kw_only=True, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "metadata", _Metadata(self.metadata, self.facts))

    def with_metadata(self, **values: Any) -> ProviderCallContext:
        """Return a copy whose metadata is merged with ``values`` (the same facts and attempts)."""
        return attrs.evolve(self, metadata=FrozenMap({**self.metadata, **values}))

    def with_request(self, request: ProviderRequest) -> ProviderCallContext:
        """A copy of this call that sends ``request`` instead (a layer's rewrite: redaction, a policy,
        a repair turn): hand it down with ``next(config, ctx)``. Its facts are recomputed for
        ``request`` (digest, sizes, bounds, needs), so every layer below and the adapter see what
        is sent; the call id, attempts and metadata are this call's."""
        if self.request is not None and type(request) is not type(self.request):
            raise ConfigurationError(f"with_request: a {type(self.request).__name__} call cannot send a "
                                     f"{type(request).__name__}")
        rebuild = self.facts.rebuild
        return attrs.evolve(self, request=request, facts=self.facts if rebuild is None else rebuild(request))
