"""Settings: named configurations, middleware sections and plugin policy, from TOML.

The file is found, in order, at the path given, at ``$PROVMW_CONFIG``, or as ``provmw.toml``
or a ``pyproject.toml`` with a ``[tool.provmw]`` table in the working folder or the nearest of
its parents (up to the home folder or the filesystem root); with none, the embedded defaults
apply (no configurations, default middleware settings, files in the user's data folder)::

    default = "primary"

    [plugins]
    allow = ["calllog"]          # optional allowlist: entry-point names or distribution:name
    block = []

    [configurations.primary]
    provider = "openai"
    model = "gpt-4o-mini"
    api_key_env = "OPENAI_API_KEY"    # read when the configuration is first used
    fallbacks = ["backup"]
    options = { temperature = 0.2, max_tokens = 512 }

    [middleware.retry]
    max_attempts = 3

    [state]                      # optional: share state across processes (a plugin serves it)
    url = "redis://127.0.0.1:6379/0"

    [security]
    ad_hoc_destinations = ["public"]   # where a call's own base_url may go (provmw.destinations)

    [http]                       # optional: how much of an answer to read (see provmw._transport.reads)
    max_body_bytes = 67108864

Every error names the file, the section and the key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import attrs

from provmw._base.locations import home_folder, not_found, searched_folders, settings_file_in, user_data_folder
from provmw._transport.reads import ReadLimits
from provmw.config import ProviderConfig
from provmw.context import FrozenMap
from provmw.destinations import DestinationPolicy
from provmw.errors import ConfigurationError
from provmw.options import did_you_mean, options_from
from provmw.pools import pools_from_table, with_pools
from provmw.stores.shared import StateSettings

__all__ = ["PluginPolicy", "Settings", "find_settings_file", "load_settings", "normalized_distribution", "options_from"]

T = TypeVar("T")

_TOP_KEYS = ("default", "configurations", "pools", "aliases", "middleware", "plugins", "state", "security", "http")
_PLUGIN_KEYS = ("autoload", "allow", "block")
_CONFIG_KEYS = ("provider", "model", "base_url", "api_key_env", "options", "fallbacks", "timeout_s",
                "first_chunk_timeout_s", "stream_idle_timeout_s", "active", "headers", "headers_env",
                "context_window", "price")

PluginStatus = Literal["loaded", "blocked", "not-allowed", "disabled", "failed"]


_AUTOLOAD_ON = frozenset({"", "0", "false", "no", "off"})  # the only values that leave autoload on
_AUTOLOAD_OFF = frozenset({"1", "true", "yes", "on"})


def _entries(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(_plugin_entry(entry) for entry in value)


def _optional_entries(value: Iterable[str] | None) -> tuple[str, ...] | None:
    return None if value is None else _entries(value)


@attrs.frozen
class PluginPolicy:
    """Which plugins may load: autoload switch, allowlist (None: all) and blocklist.

    An entry is an entry-point name (``redis``) or ``distribution:name``
    (``provmw-redis:redis``), which matches only that name published by that distribution.
    """

    autoload: bool = True
    allow: tuple[str, ...] | None = attrs.field(default=None, converter=_optional_entries)
    block: tuple[str, ...] = attrs.field(default=(), converter=_entries)

    def with_environment(self, environ: Mapping[str, str]) -> PluginPolicy:
        """Apply ``PROVMW_DISABLE_PLUGIN_AUTOLOAD``, ``PROVMW_PLUGINS``, ``PROVMW_BLOCKED_PLUGINS``."""
        policy = self
        if _disables_autoload(environ.get("PROVMW_DISABLE_PLUGIN_AUTOLOAD", "")):
            policy = attrs.evolve(policy, autoload=False)
        if allow := environ.get("PROVMW_PLUGINS", "").strip():
            policy = attrs.evolve(policy, allow=_names(allow, "PROVMW_PLUGINS"))
        if block := environ.get("PROVMW_BLOCKED_PLUGINS", "").strip():
            policy = attrs.evolve(policy, block=(*policy.block, *_names(block, "PROVMW_BLOCKED_PLUGINS")))
        return policy

    def status_of(self, name: str, distribution: str = "") -> PluginStatus | None:
        """Why entry point ``name`` of ``distribution`` must not load, or None when it may."""
        if not self.autoload:
            return "disabled"
        if _matches(self.block, name, distribution):
            return "blocked"
        if self.allow is not None and not _matches(self.allow, name, distribution):
            return "not-allowed"
        return None


    def unmatched(self, installed: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Allow- and block-list entries that match no installed ``(name, distribution)``, each with
        its list's name: a typo here would silently disable every plugin, or block nothing."""
        if not self.autoload:
            return ()
        installed = tuple(installed)
        lists = {"allowlist": self.allow or (), "blocklist": self.block}
        return tuple((label, entry) for label, entries in lists.items() for entry in entries
                     if not any(_matches((entry,), name, dist) for name, dist in installed))


def _disables_autoload(value: str) -> bool:
    """``PROVMW_DISABLE_PLUGIN_AUTOLOAD`` read stripped and in any case; a value neither true nor false
    is refused, never guessed: a switch meant to turn plugins off must not be defeated by its spelling."""
    word = value.strip().lower()
    if word not in _AUTOLOAD_ON | _AUTOLOAD_OFF:
        raise ConfigurationError(f"PROVMW_DISABLE_PLUGIN_AUTOLOAD: {value.strip()!r} is neither true "
                                 "(1, true, yes, on) nor false (0, false, no, off, or empty), in any case")
    return word in _AUTOLOAD_OFF


def _plugin_entry(entry: str) -> str:
    """``entry`` checked as a policy entry: ``name``, or ``distribution:name`` (normalised)."""
    distribution, colon, name = (part.strip() for part in entry.rpartition(":"))
    if not name or (colon and not distribution) or ":" in distribution:
        raise ConfigurationError(f"plugin entry {entry.strip()!r}: expected an entry-point name or distribution:name")
    return f"{normalized_distribution(distribution)}:{name}" if colon else name


def _matches(entries: tuple[str, ...], name: str, distribution: str) -> bool:
    # In any case: a blocklist entry spelled ``Redis`` must block ``redis``, not match nothing.
    wanted = {entry.casefold() for entry in entries}
    return name.casefold() in wanted or f"{normalized_distribution(distribution)}:{name}".casefold() in wanted


def normalized_distribution(distribution: str) -> str:
    """A distribution name as pip compares them (PEP 503): ``Provmw_Redis`` is ``provmw-redis``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _names(text: str, variable: str) -> tuple[str, ...]:
    try:
        return tuple(_plugin_entry(part) for part in text.split(",") if part.strip())
    except ConfigurationError as exc:
        raise ConfigurationError(f"{variable}: {exc}") from None


@attrs.frozen
class Settings:
    """Everything a manager is built from; also what ``provmw_middleware(settings)`` receives."""

    configurations: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)
    default: str | None = None
    # Deployment pools by name (provmw.pools), each also a configuration of that name; aliases: a
    # public name for a configuration or pool.
    pools: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)
    aliases: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)
    middleware: FrozenMap = attrs.field(factory=FrozenMap, converter=FrozenMap)
    plugins: PluginPolicy = attrs.field(factory=PluginPolicy)
    source: str = "<embedded defaults>"
    state: StateSettings | None = None
    destinations: DestinationPolicy = attrs.field(factory=DestinationPolicy)
    http: ReadLimits = attrs.field(factory=ReadLimits)
    # With no settings file, where relative paths (the ledger's) go: the user's data folder.
    data_folder: str | None = None
    # Where ``api_key_env`` and ``headers_env`` are read, when a configuration is first used.
    environ: Mapping[str, str] = attrs.field(factory=lambda: os.environ, eq=False, repr=False)
    # The last configuration read per name, with the values it was read from: reading the
    # variables is cheap, building the configuration again on every call is not.
    _read: dict[str, tuple[ProviderConfig, tuple[str | None, ...], ProviderConfig]] = attrs.field(
        factory=dict, init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.pools or self.aliases:
            object.__setattr__(self, "configurations", FrozenMap(
                with_pools(self.configurations, self.pools, self.aliases, self.source)))
        if self.default is not None and self.default not in self.configurations and self.default not in self.aliases:
            raise ConfigurationError(
                f"{self.source}: default names no configuration: {self.default!r}"
                f"{did_you_mean(self.default, list(self.configurations))}"
            )
        for config in self.configurations.values():
            for fallback in config.fallbacks:
                if fallback not in self.configurations:
                    raise ConfigurationError(
                        f"{self.source}: [configurations.{config.identifier}] fallbacks: "
                        f"{fallback!r} names no configuration"
                        f"{did_you_mean(fallback, list(self.configurations))}"
                    )

    def section(self, name: str) -> FrozenMap:
        """The settings of the middleware called ``name`` (empty when not given)."""
        found = self.middleware.get(name)
        return found if isinstance(found, FrozenMap) else FrozenMap(found)

    def enabled(self, name: str) -> bool:
        """Whether ``[middleware.<name>]`` leaves that middleware on (``enabled = false`` turns it off)."""
        value = self.section(name).get("enabled", True)
        if not isinstance(value, bool):
            raise ConfigurationError(f"{self.source}: [middleware.{name}] enabled: must be true or false, "
                                     f"got {value!r}")
        return value

    def relative_to_file(self, path: str) -> str:
        """A relative path is relative to the settings file's folder; with no file, to the user's
        data folder (settings loaded) or the working folder (settings built in code)."""
        source = Path(self.source)
        if Path(path).is_absolute():
            return path
        if source.is_file():
            return str(source.parent / path)
        return str(Path(self.data_folder) / path) if self.data_folder else path

    def configuration(self, identifier: str | None) -> ProviderConfig:
        """The named configuration, or the default one when ``identifier`` is None, its key
        variables read."""
        return self.with_credentials(self.named(identifier))

    def named(self, identifier: str | None) -> ProviderConfig:
        """The named configuration, or the default one, as written: its key variables are read when
        a call admits it (once a call)."""
        name = identifier if identifier is not None else self._default_name()
        name = self.aliases.get(name, name)
        try:
            config: ProviderConfig = self.configurations[name]
        except KeyError:
            raise ConfigurationError(
                f"no configuration named {name!r}{did_you_mean(name, list(self.configurations))}; "
                f"known: {', '.join(self.configurations) or 'none'}"
            ) from None
        return config

    def with_credentials(self, config: ProviderConfig) -> ProviderConfig:
        """``config`` with its key and header variables read now, from this settings' environment;
        a variable that is not set names the file, the configuration and the variable."""
        if config.api_key_env is None and not config.headers_env:
            return config
        variable = config.api_key_env
        if not config.headers_env and variable is not None:  # the usual: one key variable, read once a call
            values: tuple[str | None, ...] = (self.environ.get(variable),)
        else:
            values = tuple(self.environ.get(v) for v in (config.api_key_env, *config.headers_env.values()) if v)
        kept = self._read.get(config.identifier)
        if kept is not None and kept[0] is config and kept[1] == values:
            return kept[2]
        try:
            read = config.with_credentials(self.environ)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{self.source}: [configurations.{config.identifier}] {exc}") from None
        if len(self._read) >= 1024:  # ad-hoc identifiers are the caller's to invent
            self._read.clear()
        self._read[config.identifier] = (config, values, read)
        return read

    def _default_name(self) -> str:
        if self.default is not None:
            return self.default
        if len(self.configurations) == 1:
            return next(iter(self.configurations))
        raise ConfigurationError(
            f"{self.source}: no default configuration; set `default` or name one per call, "
            "or pass provider= and model="
        )


def find_settings_file(path: str | os.PathLike[str] | None = None,
                       environ: Mapping[str, str] | None = None) -> Path | None:
    """The settings file to read, following the documented search order."""
    environ = os.environ if environ is None else environ
    explicit = path if path is not None else environ.get("PROVMW_CONFIG")
    if explicit:
        if not Path(explicit).is_file():
            raise ConfigurationError(f"settings file not found: {explicit}")
        return Path(explicit)
    for index, folder in enumerate(_settings_folders(environ)):
        # The working folder's file keeps a short relative name in every message.
        if (found := settings_file_in(Path() if index == 0 else folder)) is not None:
            return found
    return None


def load_settings(path: str | os.PathLike[str] | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings file, or return the embedded defaults."""
    environ = os.environ if environ is None else environ
    found = find_settings_file(path, environ)
    if found is None:
        return Settings(source=not_found(_settings_folders(environ)), environ=environ,
                        data_folder=str(user_data_folder(environ)))
    try:
        document = tomllib.loads(found.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"{found}: not valid TOML: {exc}") from exc
    # A pyproject is read for its [tool.provmw] table however it was named (argument or variable).
    if found.name == "pyproject.toml":
        document = document.get("tool", {}).get("provmw", {})
    return parse_settings(document, str(found), environ)


def _settings_folders(environ: Mapping[str, str]) -> tuple[Path, ...]:
    return searched_folders(Path.cwd(), home_folder(environ))


def parse_settings(document: Mapping[str, Any], source: str, environ: Mapping[str, str]) -> Settings:
    """Validate a decoded settings document; ``source`` names it in errors."""
    _check_keys(document, _TOP_KEYS, source, "top level")
    configs = _table(document, "configurations", source)
    configurations = {name: _config(name, _table(configs, name, source, f"configurations.{name}"), source)
                      for name in configs}
    pools, declared = pools_from_table(_table(document, "pools", source), configurations, source)
    middleware = _table(document, "middleware", source)
    for name in middleware:
        _table(middleware, name, source, f"middleware.{name}")
    return Settings(
        configurations={**configurations, **declared}, pools=pools,
        aliases=_table(document, "aliases", source),
        default=_typed(document, "default", str, source, "top level"),
        middleware={name: FrozenMap(section) for name, section in middleware.items()},
        plugins=_policy(_table(document, "plugins", source), source),
        source=source,
        state=StateSettings.from_table(_table(document, "state", source), source) if "state" in document else None,
        destinations=DestinationPolicy.from_table(_table(document, "security", source), source),
        http=ReadLimits.from_table(_table(document, "http", source), source),
        environ=environ,
    )


def _config(name: str, table: Mapping[str, Any], source: str) -> ProviderConfig:
    where = f"[configurations.{name}]"
    _check_keys(table, _CONFIG_KEYS, source, where)
    fields = dict(table)
    if "headers_env" in table:
        fields["headers_env"] = _headers_env(table, source, where)
    if "api_key_env" in table:
        fields["api_key_env"] = _typed(table, "api_key_env", str, source, where)
    for key in ("provider", "model"):
        if key not in table:
            raise ConfigurationError(f"{source}: {where} {key}: missing")
    try:
        return ProviderConfig(identifier=name, **fields)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{source}: {where} {exc}") from None


def _headers_env(table: Mapping[str, Any], source: str, where: str) -> Mapping[str, str]:
    """``headers_env`` checked: header name to variable name, no header also in ``headers``. A
    header that is a credential (Azure's ``api-key``) need not be written in the file."""
    named = _table(table, "headers_env", source, f"{where[1:-1]}.headers_env")
    headers = _table(table, "headers", source, f"{where[1:-1]}.headers")
    for header, variable in named.items():
        if not isinstance(variable, str):
            raise ConfigurationError(f"{source}: {where} headers_env.{header}: must name an environment "
                                     f"variable, got {variable!r}")
        if header in headers:
            raise ConfigurationError(f"{source}: {where} headers_env.{header}: also given in headers; keep one")
    return named


def _policy(table: Mapping[str, Any], source: str) -> PluginPolicy:
    _check_keys(table, _PLUGIN_KEYS, source, "[plugins]")
    autoload = _typed(table, "autoload", bool, source, "[plugins]", default=True) is not False
    allow = None if table.get("allow") is None else tuple(_str_list(table, "allow", source))
    block = tuple(_str_list(table, "block", source))
    try:
        return PluginPolicy(autoload=autoload, allow=allow, block=block)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{source}: [plugins] {exc}") from None


def _str_list(table: Mapping[str, Any], key: str, source: str) -> list[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{source}: [plugins] {key}: must be a list of plugin names "
                                 "(entry-point names or distribution:name)")
    return value


def _check_keys(table: Mapping[str, Any], known: tuple[str, ...], source: str, where: str) -> None:
    for key in table:
        if key not in known:
            raise ConfigurationError(
                f"{source}: {where}: unknown key {key!r}{did_you_mean(key, known)}"
            )


def _table(parent: Mapping[str, Any], key: str, source: str, where: str | None = None) -> Mapping[str, Any]:
    value = parent.get(key, {})
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{source}: [{where or key}] must be a table, got {value!r}")
    return value


def _typed(table: Mapping[str, Any], key: str, kind: type[T], source: str, where: str,
           default: T | None = None) -> T | None:
    value = table.get(key, default)
    if value is not None and not isinstance(value, kind):
        raise ConfigurationError(f"{source}: {where} {key}: must be a {kind.__name__}, got {value!r}")
    return value
