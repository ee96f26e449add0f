"""What a provider adapter needs to read a wire answer safely, public for plugin adapters.

Every field an adapter reads from a provider's JSON is type-checked on the way in: a wrong
type is an ``InvalidDataError`` naming the field (the adapter turns it into a
``MalformedResponseError`` with ``provmw.http.malformed``), never an answer::

    body = wire.mapping(data, "response")
    text = wire.get(body, "text", str, "response", default="")

``UsageBody`` reads token counts with the bounds every adapter applies (no negative, no
absurd count, a part never above its whole) and builds ``provmw.responses.Usage`` as ADR
0015 defines it. The built-in adapters use exactly these.
"""

from __future__ import annotations

from provmw._base.serde import finite, get, mapping, sequence
from provmw.providers._usage import MAX_TOKEN_COUNT, UsageBody

__all__ = ["MAX_TOKEN_COUNT", "UsageBody", "finite", "get", "mapping", "sequence"]
