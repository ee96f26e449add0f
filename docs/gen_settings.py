"""The configuration reference, generated from the classes that parse each settings section.

Every key, its type, default and allowed values come from the code's own declarations (the
attrs options classes and the settings parser's key lists); only the meaning of each key is
written by hand, in ``docs/settings_meaning.py``. ``docs/hooks.py`` renders this into
``reference/settings.md`` at every build, and ``tests/test_docs.py`` fails when a key the
code accepts has no meaning written, or a meaning names a key that no longer exists.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import attrs
from provmw_azure.adapter import AzureOpenAIAdapter
from provmw_bedrock import BedrockAdapter
from provmw_calllog.middleware import CallLogMiddleware, CallLogOptions
from provmw_gemini.adapter import GeminiAdapter
from provmw_guard.middleware import GuardMiddleware
from provmw_guard.options import CheckOptions, DenyRule, GuardOptions, PatternOption
from provmw_otel.middleware import OtelCallMiddleware
from provmw_otel.options import OtelOptions
from provmw_postgres.store import PostgresOptions
from provmw_redis.backend import RedisOptions

from docs.settings_meaning import MEANING
from provmw import settings as settings_module
from provmw._transport.reads import ReadLimits
from provmw.config import KNOWN_OPTIONS, ProviderConfig
from provmw.destinations import DestinationPolicy
from provmw.middleware import BUILTINS, NoOptions
from provmw.middleware.budget import BudgetLimit
from provmw.pools import Pool
from provmw.pricing import Price, PriceTier
from provmw.providers import ProviderAdapter
from provmw.settings import PluginPolicy
from provmw.stores.rate_limits import RateLimits
from provmw.stores.shared import StateSettings

__all__ = ["Key", "Section", "render", "render_controls", "sections"]


@attrs.frozen
class Key:
    """One settings key: its name, TOML type, default and allowed values."""

    name: str
    kind: str
    default: str
    rule: str = ""


@attrs.frozen
class Section:
    """One table of the settings file; ``ident`` names it in ``MEANING`` and in the page's anchors."""

    ident: str
    header: str
    intro: str
    keys: tuple[Key, ...]


def sections() -> tuple[Section, ...]:
    """Every section of the settings file, in the order of the reference page."""
    return (_top_level(), *_core(), *_middleware(), *_first_party_plugins(), *_provider_plugins())


def _top_level() -> Section:
    keys = tuple(Key(name, "string" if name == "default" else "table", "unset" if name == "default" else "{}")
                 for name in settings_module._TOP_KEYS)
    return Section("top", "top level", "The keys outside any table; each table has its section below.", keys)


def _core() -> Iterator[Section]:
    yield _section("plugins", "[plugins]", PluginPolicy, only=settings_module._PLUGIN_KEYS)
    yield _section("configurations", "[configurations.NAME]", ProviderConfig, only=settings_module._CONFIG_KEYS)
    yield Section("pools", "[pools.NAME]", _intro(Pool),
                  (*_keys(Pool, skip=("name",)), Key("deployments", "table of tables", "{}")))
    yield _section("price", "[configurations.NAME.price]", Price)
    yield _section("price.tiers", "[[configurations.NAME.price.tiers]]", PriceTier)
    yield _section("state", "[state]", StateSettings, skip=("options",))
    yield _section("security", "[security]", DestinationPolicy)
    yield _section("http", "[http]", ReadLimits)


# Every middleware section takes it, built-in or a plugin's: the host reads it.
_ENABLED = Key("enabled", "boolean", "true")


def _middleware() -> Iterator[Section]:
    for builtin in BUILTINS:
        options = () if builtin.options is NoOptions else _keys(builtin.options)
        yield Section(f"middleware.{builtin.name}", f"[middleware.{builtin.name}]", _intro(builtin.cls),
                      (_ENABLED, *options))
        if builtin.name == "budget":
            yield _section("middleware.budget.limits", "[[middleware.budget.limits]]", BudgetLimit)
        if builtin.name == "rate_limit":
            yield _section("middleware.rate_limit.limits", "[middleware.rate_limit.limits.NAME]", RateLimits)


def _first_party_plugins() -> Iterator[Section]:
    yield Section("plugin.call_log", f"[middleware.{CallLogMiddleware.name}] (plugin provmw-calllog)",
                  _intro(CallLogMiddleware), (_ENABLED, *_keys(CallLogOptions)))
    yield Section("plugin.guard", f"[middleware.{GuardMiddleware.name}] (plugin provmw-guard)",
                  _intro(GuardMiddleware), (_ENABLED, *_keys(GuardOptions)))
    yield _section("plugin.guard.patterns", "[[middleware.guard.patterns]] (plugin provmw-guard)", PatternOption)
    yield _section("plugin.guard.deny", "[[middleware.guard.deny]] (plugin provmw-guard)", DenyRule)
    yield _section("plugin.guard.check", "[middleware.guard.check] (plugin provmw-guard)", CheckOptions)
    yield Section("plugin.otel", f"[middleware.{OtelCallMiddleware.name}] (plugin provmw-otel)",
                  _intro(OtelOptions), (_ENABLED, *_keys(OtelOptions)))
    yield _section("plugin.redis", '[state] with url = "redis://..." (plugin provmw-redis)', RedisOptions)
    yield _section("plugin.postgres", '[middleware.usage] with store = "postgresql://..." (plugin provmw-postgres)',
                   PostgresOptions)


def _provider_plugins() -> Iterator[Section]:
    """Provider plugins add no table: a configuration names their ``provider``."""
    adapters: tuple[tuple[str, ProviderAdapter], ...] = (("provmw-azure", AzureOpenAIAdapter()),
                                                         ("provmw-bedrock", BedrockAdapter()),
                                                         ("provmw-gemini", GeminiAdapter()))
    for distribution, adapter in adapters:
        yield Section(f"plugin.{adapter.name}",
                      f'[configurations.NAME] with provider = "{adapter.name}" (plugin {distribution})',
                      _intro(adapter), ())


def _section(ident: str, header: str, cls: type, *, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> Section:
    return Section(ident, header, _intro(cls), _keys(cls, only, skip))


def _keys(cls: type, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> tuple[Key, ...]:
    fields = {f.name: f for f in attrs.fields(cls) if f.init and f.name not in skip}
    return tuple(_key(fields[name]) for name in (only or fields))


def _key(field: attrs.Attribute[Any]) -> Key:
    rule = _rule(field.validator)
    kind = "string" if rule.startswith("one of") else _kind(str(field.type))
    return Key(field.name, kind, _default(field.default), rule)


def _intro(cls: object) -> str:
    """The first paragraph of ``cls``'s docstring, on one line."""
    return " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())


def _rule(validator: object) -> str:
    """The rule of a ``provmw.options`` validator (``number`` and ``one_of`` say theirs); else nothing."""
    qualname = getattr(validator, "__qualname__", "")
    return (getattr(validator, "__doc__", "") or "") if qualname.startswith(("number.", "one_of.")) else ""


_SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "FrozenMap": "table",
            "Price": "table", "Scope": "string", "Period": "string", "FailurePolicy": "string"}


def _kind(annotation: str) -> str:
    """A field's annotation in TOML's words: ``tuple[str, ...] | None`` is a list of strings."""
    text = re.sub(r"\s*\|\s*None$", "", annotation.strip())
    if text.startswith("Literal["):
        return "string"
    if text.startswith(("Mapping[", "dict[")):
        return "table of tables"
    if match := re.fullmatch(r"(?:tuple|frozenset)\[(\w+)(?:, \.\.\.)?\]", text):
        inner = _kind(match.group(1))
        return f"list of {inner}s" if inner in _SCALARS.values() else "list of tables"
    return _SCALARS.get(text, "table")


def _default(value: object) -> str:
    if value is attrs.NOTHING:
        return "required"
    factory = getattr(value, "factory", None)  # an attrs.Factory
    if factory is not None:
        value = factory()
    return _toml(value)


def _toml(value: object) -> str:
    """A default as it would be written in the file (``unset`` for None)."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, frozenset | tuple | list):
        items = sorted(value) if isinstance(value, frozenset) else value
        return "[" + ", ".join(_toml(v) for v in items) + "]"
    if isinstance(value, dict) or hasattr(value, "items"):
        return "{}" if not value else str(dict(value))  # type: ignore[call-overload]
    return str(value)


def render() -> str:
    """The reference as Markdown: one heading and one table per section."""
    return "\n".join(_render(section) for section in sections())


def _render(section: Section) -> str:
    meanings = MEANING.get(section.ident, {})
    rows = [f"| `{k.name}` | {k.kind} | `{k.default}` | {k.rule} | {_cell(meanings.get(k.name, ''))} |"
            for k in section.keys]
    intro = meanings.get("(section)", section.intro)
    return "\n".join([f"## `{section.header}` {{#{section.ident.replace('.', '-')}}}", "",
                      _cell(intro), "", "| Key | Type | Default | Allowed | Meaning |",
                      "|---|---|---|---|---|", *rows, ""])


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_VALUES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "list": "list", "tuple": "list",
           "dict": "table", "FrozenMap": "table"}


def render_controls() -> str:
    """The per-call controls each built-in declares, and the generation options provmw knows."""
    rows = [f"| `{control}` | `{b.name}` |" for b in BUILTINS for control in sorted(getattr(b.cls, "controls", ()))]
    options = [f"| `{name}` | {' or '.join(dict.fromkeys(_VALUES[t.__name__] for t in kinds))} |"
               for name, kinds in KNOWN_OPTIONS.items()]
    return "\n".join(["| control | read by |", "|---|---|", *rows, "", "| option | value |", "|---|---|", *options, ""])
