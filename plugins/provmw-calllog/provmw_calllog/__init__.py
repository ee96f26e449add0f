"""provmw-calllog: one structured log line per logical call, with e-mails and phones redacted.

Enable by installing; configure under ``[middleware.call_log]``::

    [middleware.call_log]
    level = "INFO"          # the logging level of the per-call line
    log_text = false        # also log the answer's text (redacted, truncated)
    max_text_chars = 200

The line carries correlation id, operation, configuration, who served, tokens, latency
and outcome; never the API key (configurations mask it, and only identifiers are logged).
"""

from __future__ import annotations

from collections.abc import Iterable

import provmw
from provmw.settings import Settings, options_from
from provmw_calllog.middleware import CallLogMiddleware, CallLogOptions
from provmw_calllog.redact import redact

__all__ = ["CallLogMiddleware", "CallLogOptions", "provmw_middleware", "redact"]


@provmw.hookimpl
def provmw_middleware(settings: Settings) -> Iterable[CallLogMiddleware]:
    options = options_from(CallLogOptions, settings.section(CallLogMiddleware.name),
                           f"{settings.source}: [middleware.call_log]")
    return [CallLogMiddleware(options)]
