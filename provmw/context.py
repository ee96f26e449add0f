"""The call context: what every middleware layer knows about one logical call.

The ServiceManager fills ``metadata`` under these documented keys (any of them may be
absent; plugins may add their own, preferably prefixed with the plugin's name):

``user``, ``tenant``
    Who the call is for; budgets and usage group by them, the cache scopes keys by them.
``cache_key``
    Hex digest of the canonical request (operation, provider, model, base URL, payload,
    options) bound to the caller's ``[tenant, user]`` scope; see
    :func:`provmw.requests.cache_key`.
``shared_cache_key``
    The same digest without the scope; only for cache namespaces marked shared.
``deterministic``
    True for embeddings, and for generation with temperature 0 or a seed.
``idempotency_key``
    The caller's idempotency key, when given.
``estimated_input_tokens``, ``max_output_tokens``
    What the call may consume, for budgets and token rate limits.
``planned_cost_usd``
    The worst case in USD over the configuration's fallback chain: the prompt estimate
    plus ``max_tokens`` (else the model's own output ceiling) at each one's price; None
    when any configuration in the chain has no price (see :mod:`provmw.pricing`).
``call_options``
    Per-call middleware controls (``no_cache``, ``ttl_s`` ...), an immutable mapping.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

__all__ = ["FrozenMap", "ProviderCallContext", "ProviderOperation"]


class ProviderOperation(enum.Enum):
    """The kind of provider call a context describes."""

    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    VISION = "vision"
    TOOLS = "tools"


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

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FrozenMap is immutable")

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, Any]]]:
        return (FrozenMap, (self._data,))

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def _new_correlation_id() -> str:
    return uuid.uuid4().hex


def _freeze(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


@attrs.frozen
class ProviderCallContext:
    """What one logical call is: its operation, correlation id and metadata."""

    operation: ProviderOperation = attrs.field(validator=attrs.validators.instance_of(ProviderOperation))
    correlation_id: str = attrs.field(factory=_new_correlation_id)
    metadata: FrozenMap = attrs.field(factory=FrozenMap, converter=_freeze)

    def with_metadata(self, **values: Any) -> ProviderCallContext:
        """Return a copy whose metadata is merged with ``values``."""
        return attrs.evolve(self, metadata=FrozenMap({**self.metadata, **values}))
