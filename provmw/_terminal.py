"""What the manager's terminal uses besides the adapters: the method serving each operation, the
repair turn, the attempt's timeout error, an ad-hoc call's key from the environment, and the
ending of streams a call opened and dropped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence

from provmw.config import ProviderConfig, Secret
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import AttemptTimeoutError
from provmw.providers import ProviderAdapter
from provmw.requests import ChatRequest, ProviderRequest
from provmw.streams import OpenedStream
from provmw.structured import repaired

__all__ = ["METHODS", "attempt_timeout", "end_all", "environment_key", "with_repair"]


# The adapter method that serves each operation (ProviderAdapter documents them).
METHODS: Mapping[ProviderOperation, str] = {
    ProviderOperation.CHAT: "chat",
    ProviderOperation.TOOLS: "chat",
    ProviderOperation.VISION: "chat",
    ProviderOperation.COMPLETION: "complete",
    ProviderOperation.EMBEDDING: "embed",
}


async def end_all(streams: Sequence[OpenedStream]) -> None:
    """End each stream unread (a no-op for one already ended), all of them even if cancelled."""
    if streams:
        await asyncio.shield(asyncio.gather(*(s.aclose() for s in streams)))


def environment_key(adapter: ProviderAdapter) -> Secret | None:
    """The key in the adapter's usual variable (``OPENAI_API_KEY``...), for an ad-hoc call given none."""
    variable = getattr(adapter, "api_key_env", None)  # optional in the contract (ADR 0014)
    value = os.environ.get(variable) if isinstance(variable, str) else None
    return Secret(value) if value else None


def with_repair(request: ProviderRequest, ctx: ProviderCallContext) -> ProviderRequest:
    """The request, followed by the repair turn when the structured_output layer asked for one."""
    note = ctx.repair.note
    return repaired(request, note) if note is not None and isinstance(request, ChatRequest) else request


def attempt_timeout(config: ProviderConfig) -> AttemptTimeoutError:
    return AttemptTimeoutError(f"attempt on {config.identifier!r} exceeded its timeout of {config.timeout_s:g}s",
                               limit_s=config.timeout_s, provider=config.provider, model=config.model)
