"""Strict JSON in and out, for the HTTP layer and the adapters that shape bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from provmw.errors import ConfigurationError

__all__ = ["decode_json", "encode_body", "plain_json"]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Built once: ``json.loads`` with any option builds a new decoder per call. It holds no state.
_STRICT = json.JSONDecoder(parse_constant=_no_constant)


def decode_json(raw: bytes | str) -> Any:
    """Strict JSON: ``NaN`` and ``Infinity`` refused, and nesting too deep to decode is a ``ValueError``."""
    try:
        text = raw if isinstance(raw, str) else raw.decode(json.detect_encoding(raw), "surrogatepass")
        return _STRICT.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def plain_json(value: Any) -> Any:
    """``value`` (frozen mappings included) as plain JSON types."""
    if type(value) in _SCALARS:  # most options: nothing to convert, and a round trip per option shows
        return value
    if not value and isinstance(value, Mapping | list | tuple):  # no extra_body: every call asks for {}
        return {} if isinstance(value, Mapping) else []
    return json.loads(json.dumps(value, default=dict))


def encode_body(body: Mapping[str, Any]) -> bytes:
    """``body`` as compact UTF-8 JSON; what cannot be sent is a ``ConfigurationError``."""
    # NaN and infinity are not JSON: Python would write them, a provider would choke on them.
    try:
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError) as exc:
        raise ConfigurationError(f"the request body cannot be sent as JSON: {exc}") from None
