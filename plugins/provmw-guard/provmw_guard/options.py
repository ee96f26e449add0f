"""Settings of ``[middleware.guard]``, checked once when the stack is built."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.options import did_you_mean, number, one_of, options_from
from provmw_guard.detect import ENTITIES

__all__ = ["POLICY_FIELDS", "CheckOptions", "DenyRule", "GuardOptions", "PatternOption"]

_STORES_ABOVE = 810  # the highest built-in that stores answers or records: usage_hits
_LABEL = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
_RULE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
# What a named policy may set; the rest belongs to the layer (where it stands, what it loads), set once.
POLICY_FIELDS = ("mode", "entities", "configurations", "tenants", "secrets", "patterns", "deny", "max_input_chars",
                 "max_output_chars", "check")
_LAYER_FIELDS = ("analyzers", "priority", "policies")


def _regex(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{attribute.name} must be a regular expression, got {value!r}")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigurationError(f"{attribute.name} is not a regular expression: {exc}") from None


def _matching(pattern: re.Pattern[str], what: str) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise ConfigurationError(f"{attribute.name} must be {what}, got {value!r}")

    return check


@attrs.frozen
class PatternOption:
    """A custom kind to redact: ``name`` labels its placeholders (``EMPLOYEE_ID`` gives ``<EMPLOYEE_ID_1>``)."""

    name: str = attrs.field(validator=_matching(_LABEL, "an upper-case label such as EMPLOYEE_ID"))
    regex: str = attrs.field(validator=_regex)


@attrs.frozen
class DenyRule:
    """A pattern that refuses the call where it matches, named by ``rule`` in the refusal and the log."""

    rule: str = attrs.field(validator=_matching(_RULE, "a rule name (letters, digits, _ . : -)"))
    regex: str = attrs.field(validator=_regex)
    stage: str = attrs.field(default="both", validator=one_of(("input", "output", "both")))


@attrs.frozen
class CheckOptions:
    """An external check: a moderation endpoint (``kind = "moderation"``, OpenAI's ``/moderations``)
    or a judging chat-completions endpoint (``kind = "judge"``, which answers ALLOW or DENY)."""

    base_url: str = attrs.field(validator=_matching(re.compile(r"https?://\S+"), "an http(s) URL"))
    kind: str = attrs.field(default="moderation", validator=one_of(("moderation", "judge")))
    model: str = attrs.field(default="omni-moderation-latest", validator=attrs.validators.instance_of(str))
    api_key_env: str | None = attrs.field(default=None,
                                          validator=attrs.validators.optional(attrs.validators.instance_of(str)))
    timeout_s: float = attrs.field(default=2.0, validator=number(gt=0, le=60))
    stage: str = attrs.field(default="input", validator=one_of(("input", "output", "both")))


def _tables(cls: type[Any], where: str, value: Sequence[Any]) -> tuple[Any, ...]:
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        raise ConfigurationError(f"{where} must be a list of tables, got {type(value).__name__}")
    return tuple(v if isinstance(v, cls) else options_from(cls, v, f"{where}[{i}]") for i, v in enumerate(value))


def _patterns(value: Sequence[PatternOption | Mapping[str, Any]]) -> tuple[PatternOption, ...]:
    return _tables(PatternOption, "patterns", value)


def _deny(value: Sequence[DenyRule | Mapping[str, Any]]) -> tuple[DenyRule, ...]:
    return _tables(DenyRule, "deny", value)


def _check(value: CheckOptions | Mapping[str, Any] | None) -> CheckOptions | None:
    return value if value is None or isinstance(value, CheckOptions) else options_from(CheckOptions, value, "check")


def _names(what: str, value: Sequence[str], known: tuple[str, ...] | None = None) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{what} must be a list of strings, got {value!r}")
    unknown = sorted(set(value) - set(known or value))
    if unknown:
        raise ConfigurationError(f"{what}: unknown {', '.join(unknown)}; known: {', '.join(known or ())}")
    return tuple(value)


def _entities(value: Sequence[str]) -> tuple[str, ...]:
    return _names("entities", value, ENTITIES)


def _configurations(value: Sequence[str]) -> tuple[str, ...]:
    return _names("configurations", value)


def _tenants(value: Sequence[str]) -> tuple[str, ...]:
    return _names("tenants", value)


def _analyzers(value: Sequence[str]) -> tuple[str, ...]:
    return _names("analyzers", value)


def _policies(value: Mapping[str, Mapping[str, Any]]) -> FrozenMap:
    """The named policies' tables as written (each key checked here, each value by ``GuardOptions``)."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"policies must be a table of tables ([middleware.guard.policies.NAME]), "
                                 f"got {type(value).__name__}")
    return FrozenMap({name: _policy_table(name, table) for name, table in value.items()})


def _policy_table(name: object, table: object) -> FrozenMap:
    if not isinstance(name, str) or not name or not name.isprintable():
        raise ConfigurationError(f"policies: a policy's name must be printable text, got {name!r}")
    if not isinstance(table, Mapping):
        raise ConfigurationError(f"policies.{name} must be a table, got {type(table).__name__}")
    for key in table:
        if key in _LAYER_FIELDS:
            raise ConfigurationError(f"policies.{name}.{key} is the layer's, not a policy's: set it in "
                                     "[middleware.guard]")
        if key not in POLICY_FIELDS:
            raise ConfigurationError(f"policies.{name}: unknown key {key!r}{did_you_mean(str(key), POLICY_FIELDS)}")
    return FrozenMap(table)


@attrs.frozen
class GuardOptions:
    """Settings of ``[middleware.guard]``; see the plugin's README for each."""

    mode: str = attrs.field(default="enforce", validator=one_of(("enforce", "monitor")))
    entities: tuple[str, ...] = attrs.field(default=ENTITIES, converter=_entities)
    # fnmatch patterns: the redaction applies to calls on a matching configuration (or fallback) and tenant.
    configurations: tuple[str, ...] = attrs.field(default=("*",), converter=_configurations)
    tenants: tuple[str, ...] = attrs.field(default=("*",), converter=_tenants)
    secrets: str = attrs.field(default="block", validator=one_of(("block", "redact", "off")))
    patterns: tuple[PatternOption, ...] = attrs.field(default=(), converter=_patterns)
    deny: tuple[DenyRule, ...] = attrs.field(default=(), converter=_deny)
    max_input_chars: int | None = attrs.field(default=None, validator=number(gt=0, integer=True, optional=True))
    max_output_chars: int | None = attrs.field(default=None, validator=number(gt=0, integer=True, optional=True))
    check: CheckOptions | None = attrs.field(default=None, converter=_check)
    analyzers: tuple[str, ...] = attrs.field(default=(), converter=_analyzers)
    # Named policies ([middleware.guard.policies.NAME]) a call picks with controls={"guard_policy": NAME}.
    policies: Mapping[str, Mapping[str, Any]] = attrs.field(factory=FrozenMap, converter=_policies)
    # Above 900 (call_log) and 950 (otel) their content capture holds redacted text, and the deadline no
    # longer bounds the external check (ADR 0048).
    priority: int = attrs.field(default=825, validator=number(integer=True))

    @priority.validator
    def _above_the_stores(self, attribute: attrs.Attribute[int], value: int) -> None:
        # Below these, the idempotency store, the cache or the hits' records would hold what the guard
        # restores (raw values), or key by what it removes (ADR 0048).
        if value <= _STORES_ABOVE:
            raise ConfigurationError(f"priority must be above {_STORES_ABOVE} (usage_hits; idempotency 805, cache "
                                     f"800): below, shared stores would hold the values it removes; got {value}")

    @policies.validator
    def _policies_valid(self, attribute: attrs.Attribute[Mapping[str, Any]], value: Mapping[str, Any]) -> None:
        for name in value:
            self.policy(name)

    @property
    def monitor(self) -> bool:
        return self.mode == "monitor"

    def policy(self, name: str) -> GuardOptions:
        """The options of the policy ``name``: its table over these, a field it does not give inherited."""
        try:
            return attrs.evolve(self, policies=FrozenMap(), **self.policies[name])
        except ConfigurationError as exc:  # each field's own message starts with the field's name
            raise ConfigurationError(f"policies.{name}.{exc}") from None
