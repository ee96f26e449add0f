"""What a provider adapter needs to write its body and read a wire answer safely, public for plugin adapters.

Every field an adapter reads from a provider's JSON is type-checked on the way in: a wrong
type is an ``InvalidDataError`` naming the field (the adapter turns it into a
``MalformedResponseError`` with ``provmw.http.malformed``), never an answer::

    body = wire.mapping(data, "response")
    text = wire.get(body, "text", str, "response", default="")

``UsageBody`` reads token counts with the bounds every adapter applies (no negative, no
absurd count, a part never above its whole) and builds ``provmw.responses.Usage`` as ADR
0015 defines it. ``with_extra_body`` adds the ``extra_body`` option's vendor fields to a body
without letting one replace what the call was priced on. The built-in adapters use exactly these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provmw._base.serde import finite, get, mapping, sequence
from provmw._base.strict_json import plain_json
from provmw.config import OWNED_BODY_KEYS
from provmw.errors import ConfigurationError
from provmw.providers._usage import MAX_TOKEN_COUNT, UsageBody

__all__ = ["MAX_TOKEN_COUNT", "UsageBody", "finite", "get", "mapping", "sequence", "with_extra_body"]


def with_extra_body(body: dict[str, Any], options: Mapping[str, Any], *, owned: frozenset[str] = OWNED_BODY_KEYS,
                    ) -> dict[str, Any]:
    """``body`` with the fields of the ``extra_body`` option added. A field the adapter wrote, or one
    pricing, budgets and the cache key were computed on (``owned``), is refused with a
    ``ConfigurationError`` naming it: a vendor field may add to a call, never change what it was priced on."""
    extra = options.get("extra_body")
    if not extra:
        return body
    fields: dict[str, Any] = plain_json(extra)
    if taken := sorted(name for name in fields if name in body or name in owned):
        raise ConfigurationError(f"options.extra_body may not set {', '.join(taken)}: provmw sends those itself "
                                 "and priced the call on them")
    body.update(fields)
    return body
