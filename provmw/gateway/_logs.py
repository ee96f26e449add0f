"""What aiohttp's server logs of a request it could not parse, without the request's bytes.

aiohttp logs a malformed request (a header line over ``max_field_size``, say) at ERROR with the
parser's exception, whose message quotes the first 100 bytes of the offending line: for an
``Authorization`` header that is the whole virtual key. The gateway's filter keeps the record
(who, and which error) and drops the quote; any ``pmk_`` key left in a record of that logger
is cut to its public id.
"""

from __future__ import annotations

import logging
import re

from aiohttp.http_exceptions import HttpProcessingError

__all__ = ["hide_request_bytes"]

_KEY = re.compile(r"(pmk_[0-9a-f]{12}_)[A-Za-z0-9_-]+")


class _RequestBytesHidden(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        message = record.getMessage()
        if isinstance(exc, HttpProcessingError):
            message = f"{message}: {type(exc).__name__} ({exc.code})"
            record.exc_info = record.exc_text = None
        record.msg, record.args = _KEY.sub(r"\1***", message), None
        return True


_FILTER = _RequestBytesHidden()


def hide_request_bytes() -> None:
    """Install the filter on ``aiohttp.server`` (once, however many apps are made)."""
    logging.getLogger("aiohttp.server").addFilter(_FILTER)  # a filter already there is not added again
