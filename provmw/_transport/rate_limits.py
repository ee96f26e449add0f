"""Rate-limit headers on answered calls: what is left of a provider's limits, and when it refills.

OpenAI (and Azure OpenAI) send ``x-ratelimit-remaining-requests`` / ``-tokens`` and
``x-ratelimit-reset-requests`` / ``-tokens`` as Go durations (``1s``, ``6m0s``, ``20ms``);
Anthropic sends ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-remaining``
and ``-reset`` as RFC 3339 times. A provider's number is never trusted without bounds: a value
that does not parse, is negative, or is past ``MAX_RATE_LIMIT_COUNT`` / ``MAX_RATE_LIMIT_RESET_S``
is ignored, as if the header were not there.
"""

from __future__ import annotations

import datetime
import math
import re
import time
from collections.abc import Mapping

from provmw.responses import MAX_RATE_LIMIT_COUNT, MAX_RATE_LIMIT_RESET_S, RateLimitHint

__all__ = ["anthropic_rate_limit", "openai_rate_limit"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_ANTHROPIC_TOKENS = ("tokens", "input-tokens", "output-tokens")


def openai_rate_limit(headers: Mapping[str, str]) -> RateLimitHint | None:
    """The hint in OpenAI-style headers, or None when they say nothing usable."""
    if "x-ratelimit-remaining-requests" not in headers and "x-ratelimit-remaining-tokens" not in headers:
        return None  # the usual case on a server without limits: two lookups, nothing built
    return _hint(_count(headers.get("x-ratelimit-remaining-requests")),
                 _count(headers.get("x-ratelimit-remaining-tokens")),
                 _duration(headers.get("x-ratelimit-reset-requests")),
                 _duration(headers.get("x-ratelimit-reset-tokens")))


def anthropic_rate_limit(headers: Mapping[str, str], now: float | None = None) -> RateLimitHint | None:
    """The hint in Anthropic's headers (``now``: wall-clock seconds the resets are measured from).

    Of its token limits (all tokens, input, output), the one with the fewest left counts, with its reset.
    """
    if "anthropic-ratelimit-requests-remaining" not in headers and \
            not any(f"anthropic-ratelimit-{kind}-remaining" in headers for kind in _ANTHROPIC_TOKENS):
        return None
    at = time.time() if now is None else now
    tokens = [(left, _instant(headers.get(f"anthropic-ratelimit-{kind}-reset"), at)) for kind in _ANTHROPIC_TOKENS
              if (left := _count(headers.get(f"anthropic-ratelimit-{kind}-remaining"))) is not None]
    fewest = min(tokens, key=lambda pair: pair[0], default=(None, None))
    return _hint(_count(headers.get("anthropic-ratelimit-requests-remaining")), fewest[0],
                 _instant(headers.get("anthropic-ratelimit-requests-reset"), at), fewest[1])


def _hint(requests: int | None, tokens: int | None, requests_reset_s: float | None,
          tokens_reset_s: float | None) -> RateLimitHint | None:
    if requests is None and tokens is None:
        return None
    return RateLimitHint(remaining_requests=requests, remaining_tokens=tokens,
                         requests_reset_s=requests_reset_s, tokens_reset_s=tokens_reset_s)


def _count(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 11:
        return None
    value = int(text)
    return value if value <= MAX_RATE_LIMIT_COUNT else None


def _seconds(value: float) -> float | None:
    return value if math.isfinite(value) and 0 <= value <= MAX_RATE_LIMIT_RESET_S else None


def _duration(text: str | None) -> float | None:
    """A Go duration (``6m0s``, ``1.5s``, ``20ms``) in seconds; a bare number is seconds."""
    if text is None or not 0 < len(text := text.strip()) <= 40:
        return None
    if text[-1].isdigit():
        try:
            return _seconds(float(text))
        except ValueError:
            return None
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return _seconds(sum(float(number) * _UNIT_S[unit] for number, unit in parts))


def _instant(text: str | None, now: float) -> float | None:
    """The seconds from ``now`` until an RFC 3339 time (0 once it is past)."""
    if text is None or len(text) > 64:
        return None
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return _seconds(max(0.0, when.timestamp() - now))
