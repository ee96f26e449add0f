"""Settings checks: attrs validators, option tables and "did you mean" hints; each error names the field."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from provmw.errors import ConfigurationError

__all__ = ["check_json", "did_you_mean", "number", "one_of", "options_from"]

T = TypeVar("T")

Validator = Callable[[object, "attrs.Attribute[Any]", Any], None]


def number(*, gt: float | None = None, ge: float | None = None, le: float | None = None,
           integer: bool = False, optional: bool = False) -> Validator:
    """A validator for a finite number (an int when ``integer``) within the given bounds."""
    kind = "an integer" if integer else "a number"
    bounds = [f"> {gt:g}" if gt is not None else "", f">= {ge:g}" if ge is not None else "",
              f"<= {le:g}" if le is not None else ""]
    wanted = " ".join([kind, " and ".join(filter(None, bounds))]).strip()

    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is None and optional:
            return
        ok = not isinstance(value, bool) and isinstance(value, int if integer else int | float)
        ok = ok and math.isfinite(value) and (gt is None or value > gt) and (ge is None or value >= ge)
        if not ok or (le is not None and value > le):
            raise ConfigurationError(f"{attribute.name} must be {wanted}, got {value!r}")

    check.__doc__ = wanted  # the rule in words: the settings reference prints it (docs/gen_settings.py)
    return check


# Deeper than any real schema or option: past it a value is refused before the encoder
# (or a recursive walk) can be made to overflow the stack.
_MAX_JSON_DEPTH = 32


def check_json(value: object, where: str, depth: int = 0) -> None:
    """Raise ``ConfigurationError`` unless ``value`` is JSON a provider accepts: string keys,
    finite numbers, lists and mappings at most 32 deep. ``where`` names it in the error."""
    if isinstance(value, str | bool | int | None):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigurationError(f"{where} must be a finite number, got {value!r}")
        return
    if depth >= _MAX_JSON_DEPTH:
        raise ConfigurationError(f"{where} is nested more than {_MAX_JSON_DEPTH} levels deep")
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigurationError(f"{where} has a key that is not a string: {key!r}")
            check_json(item, f"{where}.{key}", depth + 1)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_json(item, f"{where}[{index}]", depth + 1)
    else:
        raise ConfigurationError(f"{where} must be JSON (text, number, true/false, list or table), "
                                 f"got {type(value).__name__}")


def did_you_mean(name: str, known: Sequence[str]) -> str:
    """Return a ' (did you mean 'x'?)' hint, or '' when nothing is close."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def one_of(choices: tuple[str, ...]) -> Validator:
    """A validator for a value among ``choices``."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value not in choices:
            raise ConfigurationError(f"{attribute.name} must be one of {', '.join(choices)}; got {value!r}")

    check.__doc__ = f"one of {', '.join(choices)}"
    return check


def options_from(cls: type[T], section: Mapping[str, Any], where: str) -> T:
    """Build an attrs options class from a settings table; an unknown key names a near match.

    ``enabled`` is everyone's key (the host reads it); ``where`` prefixes every error, so a
    converter that builds a nested table (``[[middleware.budget.limits]]``) calls this too.
    """
    if not isinstance(section, Mapping):
        raise ConfigurationError(f"{where}: must be a table, got {section!r}")
    known = [a.name for a in attrs.fields(cls)]  # type: ignore[arg-type]
    values = {k: v for k, v in section.items() if k != "enabled"}
    for key in values:
        if key not in known:
            raise ConfigurationError(f"{where}: unknown key {key!r}{did_you_mean(key, known)}")
    try:
        return cls(**values)
    except (TypeError, ValueError, ConfigurationError) as exc:
        raise ConfigurationError(f"{where}: {exc}") from exc
