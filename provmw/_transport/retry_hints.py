"""Retry hints in response headers: ``retry-after-ms``, ``retry-after`` and ``x-should-retry``."""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping

__all__ = ["MAX_RETRY_HINT_S", "retry_hints"]

MAX_RETRY_HINT_S = 24 * 3600.0  # a longer hint is a broken header, not advice


def retry_hints(headers: Mapping[str, str], now: float | None = None) -> tuple[float | None, bool | None]:
    """``(retry_after_s, should_retry)`` from response headers; bad values are ignored."""
    after: float | None = None
    if (ms := headers.get("retry-after-ms")) is not None and (parsed := _parse_seconds(ms)) is not None:
        after = parsed / 1000.0
    elif (value := headers.get("retry-after")) is not None:
        after = _parse_seconds(value)
        if after is None:
            after = _parse_http_date(value, time.time() if now is None else now)
    should = headers.get("x-should-retry", "").strip().lower()
    return after, {"true": True, "false": False}.get(should)


def _finite(value: float) -> float | None:
    if math.isnan(value) or math.isinf(value) or value < 0 or value > MAX_RETRY_HINT_S:
        return None
    return value


def _parse_seconds(text: str) -> float | None:
    try:
        return _finite(float(text))
    except ValueError:
        return None


def _parse_http_date(value: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return _finite(max(0.0, when.timestamp() - now))
