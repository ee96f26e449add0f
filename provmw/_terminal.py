"""What the manager's terminal uses besides the adapters: the method serving each operation, the
repair turn, the attempt's timeout error, an ad-hoc call's key from the environment, the
answer's output bound, the meters of a stream's attempt, and the ending of streams a call
opened and dropped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from provmw.config import ProviderConfig, Secret
from provmw.context import AttemptMeter, ProviderCallContext, ProviderOperation
from provmw.errors import AttemptTimeoutError, ConfigurationError, MalformedResponseError
from provmw.providers import ProviderAdapter
from provmw.requests import ChatRequest, ProviderRequest
from provmw.responses import ProviderResponse
from provmw.stores.shared import masked_url
from provmw.streams import OpenedStream, StreamEnd
from provmw.structured import repaired

__all__ = ["METHODS", "attempt_timeout", "end_all", "environment_key", "meter_stream", "with_repair",
           "within_output_bound"]


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


def environment_key(adapter: ProviderAdapter, base_url: str | None) -> Secret | None:
    """The key in the adapter's usual variable (``OPENAI_API_KEY``...), for an ad-hoc call given none.

    That key belongs to the provider's own endpoint (``default_base_url``): an ad-hoc call that
    names another ``base_url`` is refused rather than hand the operator's key to the caller's host.
    """
    variable = getattr(adapter, "api_key_env", None)  # optional in the contract (ADR 0014)
    value = os.environ.get(variable) if isinstance(variable, str) else None
    if not value:
        return None
    own = getattr(adapter, "default_base_url", None)
    if base_url is not None and (not isinstance(own, str) or _endpoint(base_url) != _endpoint(own)):
        where = f"its own endpoint, {own}" if isinstance(own, str) else "the endpoints its operator configured"
        raise ConfigurationError(
            f"an ad-hoc {adapter.name} call to base_url {masked_url(base_url)} needs api_key=: {variable} holds the "
            f"key of {where}, and is never sent to another host")
    return Secret(value)


def _endpoint(url: str) -> tuple[str, str, str]:
    parts = urlsplit(url.strip())
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.path.rstrip("/")


def with_repair(request: ProviderRequest, ctx: ProviderCallContext) -> ProviderRequest:
    """The request, followed by the repair turn when the structured_output layer asked for one."""
    note = ctx.repair.note
    return repaired(request, note) if note is not None and isinstance(request, ChatRequest) else request


def attempt_timeout(config: ProviderConfig) -> AttemptTimeoutError:
    return AttemptTimeoutError(f"attempt on {config.identifier!r} exceeded its timeout of {config.timeout_s:g}s",
                               limit_s=config.timeout_s, provider=config.provider, model=config.model)


def within_output_bound(response: ProviderResponse, bound: int | None) -> None:
    """Refuse an answer that reports more output than the call allowed (``max_tokens``): a provider
    stops there, so a larger count is a malformed answer, never a charge to book."""
    output = response.usage.output_tokens
    if bound is not None and output > bound:
        raise MalformedResponseError(f"the answer reports {output} output tokens, above the call's bound of {bound} "
                                     "(max_tokens)", provider=response.provider, model=response.model)


def meter_stream(meters: Sequence[AttemptMeter], config: ProviderConfig, opened: OpenedStream) -> None:
    """Tell ``meters`` of a stream's attempt at its end, with the usage it reported or an estimate."""
    async def ended(end: StreamEnd) -> None:
        for meter in meters:
            await meter.ended(config, "yes", end.response.usage)

    opened.on_end(ended)
