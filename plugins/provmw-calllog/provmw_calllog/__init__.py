"""provmw-calllog: one structured log line per logical call, with e-mails and phones redacted.

Enable by installing; configure under ``[middleware.call_log]``::

    [middleware.call_log]
    level = "INFO"          # the logging level of the per-call line
    log_text = false        # also log the answer's text (redacted, truncated)
    max_text_chars = 200

The line carries correlation id, operation, configuration, user and tenant (e-mails and
phone numbers redacted, like the answer's text), who served, tokens, latency and outcome;
never the API key (configurations mask it, and only identifiers are logged). Every value a
caller or a provider chose is escaped: a newline or control character in it cannot start a
forged line, and a space or ``=`` in it is quoted, so it cannot add a field.
"""

from __future__ import annotations

from collections.abc import Iterable

import provmw
from provmw.settings import Settings, options_from
from provmw_calllog.middleware import CallLogMiddleware, CallLogOptions
from provmw_calllog.redact import escape, field, redact

__all__ = ["CallLogMiddleware", "CallLogOptions", "escape", "field", "provmw_middleware", "redact"]


@provmw.hookimpl
def provmw_middleware(settings: Settings) -> Iterable[CallLogMiddleware]:
    options = options_from(CallLogOptions, settings.section(CallLogMiddleware.name),
                           f"{settings.source}: [middleware.call_log]")
    return [CallLogMiddleware(options)]
