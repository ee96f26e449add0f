"""What several built-in middleware share: injectable time, per-call controls, breaker keys, hits."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import urlsplit

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError
from provmw.pipeline import R

__all__ = ["Clock", "Sleep", "as_hit", "endpoint_key", "monotonic", "seconds_control"]

T = TypeVar("T")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

monotonic: Clock = time.monotonic


def as_hit(response: R) -> R:
    """An answer served again without a provider request: cached, costing nothing, saving what
    it cost when it was made, and with no attempts of its own (a cache hit, an idempotent repeat)."""
    if response.cached:
        return response
    usage = attrs.evolve(response.usage, cost_usd=0.0, saved_cost_usd=response.usage.cost_usd)
    return attrs.evolve(response, cached=True, usage=usage, attempts=())


def seconds_control(ctx: ProviderCallContext, name: str) -> float | None:
    """The per-call control ``name`` as a positive number of seconds, if the caller gave one."""
    value = ctx.facts.controls.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"controls[{name!r}] must be a positive number of seconds, got {value!r}")
    return float(value)


def endpoint_key(config: ProviderConfig) -> str:
    """``provider|scheme://host/path|model|account``: what a breaker guards.

    The account is a prefix of the credentials' keyed fingerprint, so one account's failing
    key never opens the breaker for another's; user info and query strings are dropped so
    that no credential ends up in a key.
    """
    url = ""
    if config.base_url:
        parts = urlsplit(config.base_url)
        url = f"{parts.scheme}://{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"
    return f"{config.provider}|{url}|{config.model}|{config.credential_fingerprint[:16]}"
