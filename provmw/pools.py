"""Deployment pools: one name over several deployments of a model, and how a call chooses one.

A pool is written in the settings file (or built in code) and callers name it exactly as they
name a configuration: ``manager.chat(..., configuration="gpt-4o")``, in fallback chains, in
budgets' scopes. Its members are configurations (declared as usual, or inline under the pool,
inheriting a base configuration)::

    [pools.gpt-4o]
    strategy = "affinity"            # then least_busy for a key not seen yet
    members = ["oa-east", "oa-west"]
    fallbacks = ["claude"]

    [pools.gpt-4o.deployments.backup]  # the configuration "gpt-4o/backup"
    base = "oa-east"
    base_url = "https://backup.example.com/v1"
    api_key_env = "BACKUP_KEY"

    [aliases]
    gpt4 = "gpt-4o"

The ``pool`` layer (priority 450: inside ``retry``, outside ``circuit_breaker``) chooses a
member for each attempt: first a filter (not cooling down after a 429 or an open breaker,
capable of the call, not excluded, not already failed in this call while another is left),
then the pool's strategy (:data:`STRATEGIES`). Each retry of a call is a new choice, so a
retryable failure moves to another deployment before the fallback chain moves to another
model (ADR 0051).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, UnsupportedOperationError
from provmw.options import did_you_mean, number, one_of

__all__ = ["AFFINITY_KEYS", "POOL_PROVIDER", "STRATEGIES", "Pool", "pools_from_table", "refuse_unservable",
           "with_pools"]

POOL_PROVIDER = "pool"  # the provider of a pool's own configuration: no adapter serves it, the pool layer does

STRATEGIES = ("order", "weighted", "least_busy", "latency", "headroom", "affinity")
AFFINITY_KEYS = ("session", "user", "prefix")  # what keys a call to its deployment, first given first


def _members(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"members must be a list of configuration names, got {value!r}")
    if not value:
        raise ConfigurationError("members: a pool needs at least one deployment")
    if len(set(value)) != len(value):
        raise ConfigurationError(f"members: a deployment is listed twice in {list(value)!r}")
    return tuple(value)


def _per_member(value: object) -> FrozenMap:
    if not isinstance(value, FrozenMap | dict):
        raise ConfigurationError(f"must be a table of deployment names to numbers, got {value!r}")
    for name, amount in dict(value).items():
        if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
            raise ConfigurationError(f"{name}: must be a number of at least 0, got {amount!r}")
    return FrozenMap(value)


def _fallbacks(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"fallbacks must be a list of configuration names, got {value!r}")
    return tuple(value)


def _keys(value: object) -> tuple[str, ...]:
    keys = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list | tuple) else None
    if not keys or any(k not in AFFINITY_KEYS for k in keys):
        raise ConfigurationError(f"affinity must name some of {', '.join(AFFINITY_KEYS)}, got {value!r}")
    return keys


@attrs.frozen(kw_only=True)
class Pool:
    """A name over deployments (``members``: configuration identifiers) and the rule that picks one.

    ``strategy``: one of :data:`STRATEGIES`. ``weights`` (``weighted``; a member not listed
    weighs 1), ``rpm`` and ``tpm`` (``headroom``: each member's requests and tokens a minute,
    unlimited when not listed), ``affinity`` (what keys a call to its deployment: the
    ``session`` control, the call's ``user``, the ``prefix`` of its prompt; the first the call
    has), ``then`` (how ``affinity`` chooses for a key it has not seen), ``explore`` (the share
    of ``latency``'s choices made at random, so a recovered deployment is measured again),
    ``affinity_ttl_s`` (how long a key stays with its deployment after its last call).
    ``fallbacks`` are the pool's fallback chain, as a configuration's.
    """

    name: str
    members: tuple[str, ...] = attrs.field(converter=_members)
    strategy: str = attrs.field(default="least_busy", validator=one_of(STRATEGIES))
    weights: FrozenMap = attrs.field(factory=FrozenMap, converter=_per_member)
    rpm: FrozenMap = attrs.field(factory=FrozenMap, converter=_per_member)
    tpm: FrozenMap = attrs.field(factory=FrozenMap, converter=_per_member)
    affinity: tuple[str, ...] = attrs.field(default=AFFINITY_KEYS, converter=_keys)
    then: str = attrs.field(default="least_busy", validator=one_of(tuple(s for s in STRATEGIES if s != "affinity")))
    explore: float = attrs.field(default=0.05, validator=number(ge=0, le=1))
    affinity_ttl_s: float = attrs.field(default=3600.0, validator=number(gt=0))
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_fallbacks)

    # Each limited deployment's (rpm, tpm), in a plain dict: the filter reads it for every member of
    # every choice.
    limits: Mapping[str, tuple[float | None, float | None]] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        for table in ("weights", "rpm", "tpm"):
            unknown = sorted(set(getattr(self, table)) - set(self.members))
            if unknown:
                raise ConfigurationError(f"{table}: {', '.join(unknown)} is not a member of pool {self.name!r}")
        object.__setattr__(self, "limits", {m: (self.rpm.get(m), self.tpm.get(m)) for m in self.members
                                            if m in self.rpm or m in self.tpm})

    def config(self) -> ProviderConfig:
        """The pool's own configuration: what callers, fallback chains and budgets name."""
        return ProviderConfig(identifier=self.name, provider=POOL_PROVIDER, model=self.name,
                              fallbacks=self.fallbacks)


_POOL_KEYS = ("members", "strategy", "weights", "rpm", "tpm", "affinity", "then", "explore", "affinity_ttl_s",
              "fallbacks", "deployments")


def pools_from_table(table: Mapping[str, Any], configurations: Mapping[str, ProviderConfig],
                     source: str) -> tuple[dict[str, Pool], dict[str, ProviderConfig]]:
    """``[pools.NAME]`` tables: the pools, and the configurations their inline deployments declare
    (``NAME/DEPLOYMENT``, each its ``base`` configuration with the keys it changes)."""
    pools: dict[str, Pool] = {}
    declared: dict[str, ProviderConfig] = {}
    for name, entry in table.items():
        where = f"{source}: [pools.{name}]"
        if not isinstance(entry, Mapping):
            raise ConfigurationError(f"{where} must be a table")
        unknown = sorted(set(entry) - set(_POOL_KEYS))
        if unknown:
            raise ConfigurationError(f"{where} {unknown[0]}: unknown key{did_you_mean(unknown[0], _POOL_KEYS)}; "
                                     f"known: {', '.join(_POOL_KEYS)}")
        inline = {f"{name}/{dep}": _deployment(f"{name}/{dep}", fields, configurations, f"{where}.deployments.{dep}")
                  for dep, fields in dict(entry.get("deployments", {})).items()}
        declared.update(inline)
        fields = {k: v for k, v in entry.items() if k != "deployments"}
        fields["members"] = [*fields.get("members", []), *inline]
        try:
            pools[name] = Pool(name=name, **fields)
        except (ConfigurationError, TypeError) as exc:
            raise ConfigurationError(f"{where} {exc}") from None
    return pools, declared


def _deployment(identifier: str, fields: Any, configurations: Mapping[str, ProviderConfig],
                where: str) -> ProviderConfig:
    if not isinstance(fields, Mapping) or not isinstance(fields.get("base"), str):
        raise ConfigurationError(f"{where}: base: the configuration it inherits, by name (missing)")
    base = configurations.get(fields["base"])
    if base is None:
        raise ConfigurationError(f"{where} base: {fields['base']!r} names no configuration"
                                 f"{did_you_mean(fields['base'], list(configurations))}")
    changes = {k: v for k, v in fields.items() if k != "base"}
    for key in ("identifier", "fallbacks"):
        if key in changes:
            raise ConfigurationError(f"{where} {key}: a deployment takes its name from the pool, and falls back "
                                     "with it")
    try:
        return attrs.evolve(base, identifier=identifier, **changes)
    except (ConfigurationError, TypeError) as exc:
        raise ConfigurationError(f"{where} {exc}") from None


def with_pools(configurations: Mapping[str, ProviderConfig], pools: Mapping[str, Pool],
               aliases: Mapping[str, str], source: str) -> dict[str, ProviderConfig]:
    """``configurations`` and each pool's own configuration, every member and alias checked."""
    merged = dict(configurations)
    for pool in pools.values():
        own = merged.get(pool.name)
        if own is not None and own.provider != POOL_PROVIDER:
            raise ConfigurationError(f"{source}: [pools.{pool.name}] a configuration has the same name")
        for member in pool.members:
            found = configurations.get(member)
            if found is None or found.provider == POOL_PROVIDER:
                raise ConfigurationError(f"{source}: [pools.{pool.name}] members: {member!r} names no "
                                         f"configuration{did_you_mean(member, list(configurations))}")
        merged[pool.name] = pool.config()
    for alias, target in aliases.items():
        if alias in merged:
            raise ConfigurationError(f"{source}: [aliases] {alias!r} is already a configuration or pool")
        if not isinstance(target, str) or target not in merged:
            raise ConfigurationError(f"{source}: [aliases] {alias}: {target!r} names no configuration or pool"
                                     f"{did_you_mean(str(target), list(merged))}")
    return merged


def refuse_unservable(pool: ProviderConfig, unmet: Mapping[str, Sequence[str]],
                      deployments: Sequence[ProviderConfig]) -> None:
    """Refuse a call that no deployment of ``pool`` can honour (``unmet``: the call facts'), naming
    what each lacks; nothing is sent."""
    if pool.identifier in unmet:
        reasons = "; ".join(f"{d.identifier} lacks {', '.join(unmet.get(d.identifier, ()))}" for d in deployments)
        raise UnsupportedOperationError(POOL_PROVIDER, ", ".join(unmet[pool.identifier]),
                                        configuration=f"{pool.identifier}: {reasons}")
