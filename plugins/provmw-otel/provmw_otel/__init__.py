"""provmw-otel: OpenTelemetry GenAI spans and metrics for every provmw call, on when installed.

Only the OpenTelemetry API is used: the application installs and configures the SDK and its
exporters; without them every span and measurement is a no-op. Configure under
``[middleware.otel]``::

    [middleware.otel]
    capture_content = false     # the answer's text (redacted) as gen_ai.output.messages
    traceparent_to = []         # configurations whose requests carry traceparent; "*" = all

``enabled = false`` in that section removes both layers: ``otel`` (950, the call span) and
``otel_attempts`` (100, one span per request that reached a provider).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import provmw
from provmw.errors import ConfigurationError
from provmw.pipeline import Middleware
from provmw.pools import Pool
from provmw.settings import Settings, options_from
from provmw_otel.middleware import OtelAttemptMiddleware, OtelCallMiddleware, Telemetry
from provmw_otel.options import OtelOptions

__all__ = ["OtelAttemptMiddleware", "OtelCallMiddleware", "OtelOptions", "Telemetry", "middleware",
           "provmw_middleware"]


def middleware(options: OtelOptions, telemetry: Telemetry | None = None,
               pools: Mapping[str, Pool] | None = None) -> list[Middleware]:
    """Both layers, sharing one tracer and one meter (the global providers unless given); with
    ``pools`` (the settings'), the call span names the pool and deployment that served."""
    shared = telemetry or Telemetry()
    return [OtelCallMiddleware(options, shared, pools), OtelAttemptMiddleware(options, shared)]


def _options(settings: Settings) -> OtelOptions:
    where = f"{settings.source}: [middleware.otel]"
    options = options_from(OtelOptions, settings.section(OtelCallMiddleware.name), where)
    known = [*settings.configurations, "*"]
    for name in options.traceparent_to:
        if name not in known:
            raise ConfigurationError(f"{where} traceparent_to: {name!r} names no configuration; "
                                     f"known: {', '.join(known)}")
    return options


@provmw.hookimpl
def provmw_middleware(settings: Settings) -> Iterable[Middleware]:
    if not settings.enabled(OtelCallMiddleware.name):
        # The call layer is still handed over, for the host to drop as disabled: a plugin that
        # contributed nothing would leave its own [middleware.otel] section unknown, an error.
        return [OtelCallMiddleware(OtelOptions(), Telemetry())]
    return middleware(_options(settings), pools=settings.pools)
