"""The call-log middleware: outermost, so one line describes the whole logical call."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import GuardRefusedError
from provmw.pipeline import Next, R
from provmw.responses import CompletionResponse, ProviderResponse
from provmw.streams import OpenedStream, StreamEnd
from provmw_calllog.redact import escape, field, redact

__all__ = ["CallLogMiddleware", "CallLogOptions"]

log = logging.getLogger("provmw.calls")


def _level(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    level = logging.getLevelName(str(value).upper())
    if not isinstance(level, int):
        raise ValueError(f"level must be a logging level name, got {value!r}")
    return level


@attrs.frozen
class CallLogOptions:
    """Settings of ``[middleware.call_log]``."""

    level: int = attrs.field(default=logging.INFO, converter=_level)
    log_text: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    max_text_chars: int = attrs.field(default=200, validator=attrs.validators.ge(0))


class CallLogMiddleware:
    """Logs one line per logical call: who asked, who answered, tokens, latency, outcome."""

    name = "call_log"
    priority = 900

    def __init__(self, options: CallLogOptions | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.options = options or CallLogOptions()
        self._clock = clock

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        if not log.isEnabledFor(self.options.level):
            return await next(config)
        started = self._clock()
        try:
            response = await next(config)
        except Exception as exc:
            why = f" rule={escape(exc.rule)} stage={escape(exc.stage)}" if isinstance(exc, GuardRefusedError) else ""
            self._emit(ctx, config, started, f"error={type(exc).__name__}{why}")  # the rule, never the text
            raise
        if isinstance(response, OpenedStream):  # one line when the stream ends, with what it streamed
            async def emit_end(end: StreamEnd) -> None:
                outcome = self._describe(end.response) + (f" stream_error={type(end.error).__name__}"
                                                          if end.error is not None else "")
                self._emit(ctx, config, started, outcome + (" abandoned" if end.abandoned else ""))

            response.on_end(emit_end)
            return response
        self._emit(ctx, config, started, self._describe(response))
        return response

    def _describe(self, response: ProviderResponse) -> str:
        usage = response.usage
        # The provider reports model (and a hostile one anything): escaped like the caller's values.
        parts = [f"ok served_by={escape(response.served_by)} provider={escape(response.provider)} "
                 f"model={escape(response.model)} cached={response.cached} "
                 f"tokens_in={usage.input_tokens} tokens_out={usage.output_tokens}"]
        if self.options.log_text and isinstance(response, CompletionResponse):
            parts.append(f"text={redact(response.text)[: self.options.max_text_chars]!r}")
        return " ".join(parts)

    def _emit(self, ctx: ProviderCallContext, config: ProviderConfig, started: float, outcome: str) -> None:
        elapsed_ms = (self._clock() - started) * 1000.0
        # Every value a caller or provider chose is escaped, so none can end the line or add a field.
        log.log(self.options.level, "call %s %s config=%s user=%s tenant=%s %.1fms %s",
                escape(ctx.correlation_id), ctx.operation.value, escape(config.identifier),
                field(ctx.facts.user), field(ctx.facts.tenant), elapsed_ms, outcome)
