"""Provider configurations: one named way to reach one model, with its fallback chain."""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import math
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

import attrs

from provmw.context import FrozenMap
from provmw.errors import ConfigurationError
from provmw.options import check_json, did_you_mean, number
from provmw.pricing import Price, to_price
from provmw.scrubbing import masked_url, url_secrets

__all__ = [
    "GenerationOptions",
    "KNOWN_OPTIONS",
    "OWNED_BODY_KEYS",
    "ProviderConfig",
    "Secret",
    "check_options",
    "did_you_mean",
    "fallback_chain",
    "fingerprint",
]

_MASK = "**********"

# Option name -> accepted value types: the options provmw checks and the built-in adapters map
# (README "Options"). Any other vendor field goes through ``extra_body``.
KNOWN_OPTIONS: Mapping[str, tuple[type, ...]] = {
    "temperature": (int, float),
    "top_p": (int, float),
    "max_tokens": (int,),
    "max_completion_tokens": (int,),  # OpenAI's name for the output bound, the only one reasoning models take
    "seed": (int,),
    "stop": (str, list, tuple),
    "presence_penalty": (int, float),
    "frequency_penalty": (int, float),
    "response_format": (str, dict, FrozenMap),
    "tool_choice": (str, dict, FrozenMap),
    "parallel_tool_calls": (bool,),
    "reasoning_effort": (str,),
    "logprobs": (bool,),
    "top_logprobs": (int,),
    "top_k": (int,),
    "thinking": (dict, FrozenMap),
    "metadata": (dict, FrozenMap),
    "extra_body": (dict, FrozenMap),
}


class GenerationOptions(TypedDict, total=False):
    """``KNOWN_OPTIONS`` as the call methods' typed keyword arguments (ADR 0019)."""

    temperature: float
    top_p: float
    max_tokens: int
    max_completion_tokens: int
    seed: int
    stop: str | Sequence[str]
    presence_penalty: float
    frequency_penalty: float
    response_format: str | Mapping[str, Any]
    tool_choice: str | Mapping[str, Any]
    parallel_tool_calls: bool
    reasoning_effort: str
    logprobs: bool
    top_logprobs: int
    top_k: int
    thinking: Mapping[str, Any]
    metadata: Mapping[str, Any]
    extra_body: Mapping[str, Any]


# Bounds every provider documents (inclusive; None: unbounded); beyond them a call is refused
# here rather than sent to fail upstream, or to be priced on a budget that cannot apply.
_RANGES: Mapping[str, tuple[float, float]] = {
    "temperature": (0, math.inf),
    "top_p": (0, 1),
    "max_tokens": (1, math.inf),
    "max_completion_tokens": (1, math.inf),
    "top_logprobs": (0, 20),
    "top_k": (1, math.inf),
}
_ANY_NUMBER = (-math.inf, math.inf)
_NUMBERS = (int, float)

# RFC 9110 field names are tokens; a value may hold no control character, so neither a
# header nor an API key can end the line and add headers of its own.
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Body keys an adapter writes itself, from the request and the configuration, and which pricing,
# budgets and the cache key were computed on: ``extra_body`` may not replace them afterwards.
OWNED_BODY_KEYS = frozenset({
    *KNOWN_OPTIONS, "model", "messages", "prompt", "input", "system", "tools", "functions", "n", "best_of",
    "stream", "stream_options", "max_output_tokens", "dimensions", "encoding_format",
    # billed at other rates than the price table's: a call priced at standard rates must go out at them
    "service_tier", "modalities", "audio", "web_search_options", "prediction",
})


class Secret:
    """A credential whose repr and str are masked; ``reveal()`` is the only way in."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise ConfigurationError(f"a secret must be a string, not {type(value).__name__}")
        self._value = value

    def reveal(self) -> str:
        """Return the secret itself, for the one place that sends it."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{_MASK}')"

    def __str__(self) -> str:
        return _MASK

    def __format__(self, spec: str) -> str:
        return _MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(Secret)

    def __bool__(self) -> bool:
        return bool(self._value)


def _to_secret(value: str | Secret | None) -> Secret | None:
    if value is None or isinstance(value, Secret):
        return value
    return Secret(value)


def _non_empty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{attribute.name} must be a non-empty string, got {value!r}")
    if not value.isprintable():  # it reaches log lines and keys: a newline there forges a line
        raise ConfigurationError(f"{attribute.name} must be printable text, got {value!r}")


def _optional_url(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigurationError(f"base_url must be an http(s) URL, got {_shown_url(value)}")
    _check_url_parts(value)


def _check_url_parts(url: str) -> None:
    # The URL is not echoed: it may carry credentials.
    if _CONTROL.search(url) or " " in url:
        raise ConfigurationError("base_url must not contain spaces or control characters")
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or not parts.hostname:
        raise ConfigurationError("base_url needs a host and, if it gives a port, one from 1 to 65535")


def _header_safe_key(instance: object, attribute: attrs.Attribute[Any], value: Secret | None) -> None:
    if value is not None and _CONTROL.search(value.reveal()):
        raise ConfigurationError("api_key contains a control character (such as CR or LF); it is sent in a header")


def _bool(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{attribute.name} must be true or false, got {value!r}")


def check_options(options: object) -> None:
    """Raise ``ConfigurationError`` for options that are not a mapping, an unknown option, or
    a value of the wrong type or out of its range (NaN and infinity included)."""
    if not isinstance(options, Mapping):
        raise ConfigurationError(f"options must be a mapping of option names to values, got {type(options).__name__}")
    for name, option in options.items():
        accepted = KNOWN_OPTIONS.get(name)
        if accepted is None:
            hint = did_you_mean(str(name), list(KNOWN_OPTIONS))
            raise ConfigurationError(f"options.{name} is not a known option{hint}; a vendor field provmw does "
                                     f"not know goes in options={{'extra_body': {{{name!r}: ...}}}}")
        if (isinstance(option, bool) and bool not in accepted) or not isinstance(option, accepted):
            kinds = " or ".join(t.__name__ for t in accepted)
            raise ConfigurationError(f"options.{name} must be {kinds}, got {option!r}")
        if isinstance(option, _NUMBERS) and not isinstance(option, bool):
            low, high = _RANGES.get(name, _ANY_NUMBER)
            if not (-math.inf < option < math.inf and low <= option <= high):  # NaN fails every comparison
                raise _out_of_range(name, option, low, high)
        elif not isinstance(option, str | bool):
            _check_structure(name, option)
    owned = sorted(OWNED_BODY_KEYS.intersection(options.get("extra_body", {})))
    if owned:
        raise ConfigurationError(
            f"options.extra_body may not set {', '.join(owned)}: provmw sends those itself and prices, budgets "
            "and caches the call on them; pass them as the call's own arguments or options")


def _out_of_range(name: str, option: float, low: float, high: float) -> ConfigurationError:
    span = "" if low == -math.inf else f", at least {low:g}" if high == math.inf else f", from {low:g} to {high:g}"
    return ConfigurationError(f"options.{name} must be a finite number{span}, got {option!r}")


def _check_structure(name: str, option: object) -> None:
    if name == "stop":
        if not all(isinstance(item, str) for item in option):  # type: ignore[attr-defined]
            raise ConfigurationError(f"options.stop must be a string or a list of strings, got {option!r}")
    else:
        check_json(option, f"options.{name}")


def _validate_options(instance: object, attribute: attrs.Attribute[Any], value: FrozenMap) -> None:
    check_options(value)


def _to_str_tuple(value: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigurationError(f"fallbacks must be a list of identifiers, got the string {value!r}")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str) or not item:
            raise ConfigurationError(f"fallbacks entries must be identifiers, got {item!r}")
    return items


def _validate_headers(instance: object, attribute: attrs.Attribute[Any], value: FrozenMap) -> None:
    for name, header in value.items():
        if not isinstance(name, str) or not isinstance(header, str):
            raise ConfigurationError(f"headers.{name} must map a string to a string")
        if not _HEADER_NAME.fullmatch(name):
            raise ConfigurationError(f"headers: {name!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~)")
        if _CONTROL.search(header):  # the value is not echoed: it may be a credential
            raise ConfigurationError(f"headers.{name} contains a control character (such as CR or LF)")


def _optional_variable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _non_empty_str(instance, attribute, value)


def _header_variables(instance: object, attribute: attrs.Attribute[Any], value: FrozenMap) -> None:
    _validate_headers(instance, attribute, value)  # the variable names, as header values, are printable


def _to_frozen(value: Mapping[str, Any] | None) -> FrozenMap:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _shown_url(value: object) -> str:
    return repr(masked_url(value)) if isinstance(value, str) else repr(value)


def _repr_headers(value: FrozenMap) -> str:
    return repr(sorted(value))  # header values may carry credentials


@functools.cache
def _fingerprint_key() -> bytes:
    # A fleet sets the same key everywhere so that processes sharing a cache or breakers agree;
    # the default still never shows a secret, it only makes fingerprints comparable across hosts.
    chosen = os.environ.get("PROVMW_FINGERPRINT_KEY", "provmw credential fingerprint v1")
    return hashlib.sha256(chosen.encode()).digest()


def fingerprint(api_key: Secret | None, headers: Mapping[str, str], base_url: str | None = None) -> str:
    """A keyed digest of the credentials calls carry (key, headers, and those inside the base
    URL): equal credentials give equal fingerprints, and the fingerprint never reveals them."""
    material = json.dumps([api_key.reveal() if api_key is not None else None, sorted(headers.items()),
                           sorted(url_secrets(base_url))])
    return hashlib.blake2b(material.encode(), key=_fingerprint_key(), digest_size=16).hexdigest()


@attrs.frozen
class ProviderConfig:
    """A named way to reach one model: where, how, with which options, and what comes next."""

    identifier: str = attrs.field(validator=_non_empty_str)
    provider: str = attrs.field(validator=_non_empty_str)
    model: str = attrs.field(validator=_non_empty_str)
    base_url: str | None = attrs.field(default=None, validator=_optional_url, repr=_shown_url)
    api_key: Secret | None = attrs.field(default=None, converter=_to_secret, validator=_header_safe_key)
    options: FrozenMap = attrs.field(factory=FrozenMap, converter=_to_frozen, validator=_validate_options)
    fallbacks: tuple[str, ...] = attrs.field(default=(), converter=_to_str_tuple)
    # 30 s fits most unstreamed answers; with the deadline's 120 s a hung provider still
    # leaves a fallback its turn (ADR 0007, amendment on default time limits).
    timeout_s: float = attrs.field(default=30.0, validator=number(gt=0))
    # A streamed attempt's limits (ADR 0005): to its first content chunk, and between chunks
    # after it; unset, each is ``timeout_s``.
    first_chunk_timeout_s: float | None = attrs.field(default=None, validator=number(gt=0, optional=True))
    stream_idle_timeout_s: float | None = attrs.field(default=None, validator=number(gt=0, optional=True))
    active: bool = attrs.field(default=True, validator=_bool)
    headers: FrozenMap = attrs.field(
        factory=FrozenMap, converter=_to_frozen, validator=_validate_headers, repr=_repr_headers
    )
    context_window: int | None = attrs.field(default=None, validator=number(gt=0, integer=True, optional=True))
    price: Price | None = attrs.field(default=None, converter=to_price)
    # Where the key and secret header values live: read when the configuration is first used
    # (``with_credentials``), so a fallback that never runs needs no key set (ADR 0020).
    api_key_env: str | None = attrs.field(default=None, validator=_optional_variable)
    headers_env: FrozenMap = attrs.field(factory=FrozenMap, converter=_to_frozen, validator=_header_variables)
    # Who the calls are made as: the cache and the breakers keep accounts apart by it.
    credential_fingerprint: str = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.api_key is not None and self.base_url and urllib.parse.urlsplit(self.base_url).username is not None:
            raise ConfigurationError(f"base_url {masked_url(self.base_url)} carries credentials and api_key is set "
                                     "too: give the key one way (api_key, or headers)")
        object.__setattr__(self, "credential_fingerprint", fingerprint(self.api_key, self.headers, self.base_url))
        if self.price is not None and self.price.declared_for is None:
            # A price applies to the provider and model it was given with; a configuration derived
            # with ``attrs.evolve`` keeps it declared for those, so the table prices its own (ADR 0049).
            object.__setattr__(self, "price", self.price.declared(self.provider, self.model))

    def with_credentials(self, environ: Mapping[str, str]) -> ProviderConfig:
        """This configuration with ``api_key_env`` and ``headers_env`` read from ``environ``;
        a variable that is not set is a ``ConfigurationError`` naming it."""
        if self.api_key_env is None and not self.headers_env:
            return self
        headers = dict(self.headers)
        for header, variable in self.headers_env.items():
            headers[header] = _variable(environ, variable, f"headers_env.{header}")
        api_key = self.api_key if self.api_key_env is None else _variable(environ, self.api_key_env, "api_key_env")
        return attrs.evolve(self, api_key=api_key, headers=headers, api_key_env=None, headers_env=FrozenMap())

    @property
    def is_ad_hoc(self) -> bool:
        """Whether this configuration was made for one call rather than loaded by name."""
        return self.identifier.startswith("ad-hoc:")

    @classmethod
    def ad_hoc(cls, provider: str, model: str, **fields: Any) -> ProviderConfig:
        """A transient configuration for a call that named provider and model directly."""
        return cls(identifier=f"ad-hoc:{provider}/{model}", provider=provider, model=model,
                   **{**fields, "fallbacks": ()})


def _variable(environ: Mapping[str, str], variable: str, key: str) -> str:
    if variable not in environ:
        raise ConfigurationError(f"{key}: environment variable {variable} is not set")
    return environ[variable]


def fallback_chain(config: ProviderConfig, configurations: Mapping[str, ProviderConfig]) -> list[ProviderConfig]:
    """The configurations a call on ``config`` may try, in order: itself if active, then each
    active, known, distinct fallback (its own identifier in its chain is skipped)."""
    chain = [config] if config.active else []
    for identifier in dict.fromkeys(config.fallbacks):
        candidate = configurations.get(identifier)
        if identifier != config.identifier and candidate is not None and candidate.active:
            chain.append(candidate)
    return chain
