"""One INFO line per attempt that reached a provider, so ``-v`` shows a call as it happens.

The manager's terminal asks ``start()`` once per attempt; with INFO off that is the only
cost (one ``isEnabledFor`` check), and nothing is timed or formatted.
"""

from __future__ import annotations

import logging
import time

from provmw.config import ProviderConfig

__all__ = ["log", "log_attempt", "start"]

log = logging.getLogger("provmw.attempts")


def start() -> float | None:
    """The attempt's start time when attempts are logged, else None."""
    return time.perf_counter() if log.isEnabledFor(logging.INFO) else None


def log_attempt(config: ProviderConfig, started: float, error: BaseException | None = None) -> None:
    """Log one attempt: configuration, provider/model, outcome (error type and status) and time."""
    elapsed_s = time.perf_counter() - started
    if error is None:
        outcome = "ok"
    else:
        status = getattr(error, "status", None)
        outcome = type(error).__name__ + ("" if status is None else f" (status {status})")
    log.info("attempt: configuration=%s provider=%s model=%s %s in %.3fs",
             config.identifier, config.provider, config.model, outcome, elapsed_s)
