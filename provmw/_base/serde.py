"""Checked access to plain dicts decoded from JSON, for the ``from_dict`` methods."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeVar

from provmw.errors import InvalidDataError

T = TypeVar("T")

_MISSING: Any = object()


def mapping(value: object, where: str) -> Mapping[str, Any]:
    """Return ``value`` if it is a mapping, else raise naming ``where``."""
    if type(value) is dict:  # what JSON decodes to: no walk through Mapping's subclass hooks
        return value
    if not isinstance(value, Mapping):
        raise InvalidDataError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def get(data: Mapping[str, Any], key: str, kind: type[T] | tuple[type, ...], where: str,
        default: Any = _MISSING) -> T:
    """Return ``data[key]`` checked against ``kind``; ``default`` when absent if given."""
    value = data.get(key, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            raise InvalidDataError(f"{where}: missing field {key!r}")
        return default  # type: ignore[no-any-return]
    if type(value) is kind:  # the common case, exactly the type asked for (a bool is never an int here)
        return value
    if value is None and default is None:
        return default  # type: ignore[return-value]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if list in kinds:
        kinds = (*kinds, tuple)  # to_dict keeps tuples; JSON turns them into lists
    if isinstance(value, bool) and bool not in kinds:
        raise InvalidDataError(f"{where}.{key}: expected {_names(kinds)}, got a boolean")
    if not isinstance(value, kinds):
        raise InvalidDataError(f"{where}.{key}: expected {_names(kinds)}, got {type(value).__name__}")
    return value  # type: ignore[return-value]


def sequence(value: object, where: str) -> list[Any] | tuple[Any, ...]:
    """Return ``value`` if it is a list (or the tuple ``to_dict`` left), else raise."""
    if not isinstance(value, list | tuple):
        raise InvalidDataError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def finite(value: object, where: str) -> float:
    """Return ``value`` as a finite float."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidDataError(f"{where}: expected a finite number, got {value!r}")
    return float(value)


def check_type(data: Mapping[str, Any], expected: str, where: str) -> None:
    """Raise unless the ``type`` discriminator of ``data`` is ``expected``."""
    found = data.get("type")
    if found != expected:
        raise InvalidDataError(f"{where}: expected type {expected!r}, got {found!r}")


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in kinds)
