"""What the manager's terminal uses besides the adapters: the method serving each operation, the
repair turn, the attempt's timeout error, an ad-hoc call's key from the environment, the
answer's output bound, the meters of a stream's attempt, and the ending of streams a call
opened and dropped."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import TypeVar
from urllib.parse import urlsplit

import attrs

from provmw._redact import Scrubber
from provmw.config import ProviderConfig, Secret
from provmw.context import AttemptMeter, ProviderCallContext, ProviderOperation
from provmw.errors import AttemptTimeoutError, ConfigurationError, MalformedResponseError
from provmw.pricing import Price
from provmw.providers import ProviderAdapter
from provmw.requests import ChatRequest, ProviderRequest
from provmw.responses import ProviderResponse, Usage
from provmw.stores.shared import masked_url
from provmw.stores.usage import Billed
from provmw.streams import OpenedStream, StreamEnd
from provmw.structured import repaired

__all__ = ["METHODS", "answered", "attempt_timeout", "end_all", "environment_key", "meter_stream", "output_bound",
           "tell_ended", "tell_sending", "with_repair", "within_output_bound"]

R = TypeVar("R", bound=ProviderResponse)


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

    The operator's credentials belong to the provider's own endpoint (``default_base_url``): an
    ad-hoc call that names another ``base_url`` and no key is refused when the adapter would
    otherwise send one, from its variable or from credentials of its own (``ambient_credentials``:
    an Entra ID token provider, AWS's credential chain), rather than hand them to the caller's host.
    """
    variable = getattr(adapter, "api_key_env", None)  # optional in the contract (ADR 0014)
    value = os.environ.get(variable) if isinstance(variable, str) else None
    own = getattr(adapter, "default_base_url", None)
    if base_url is not None and (not isinstance(own, str) or _endpoint(base_url) != _endpoint(own)):
        ambient = getattr(adapter, "ambient_credentials", False) is True
        if value or ambient:
            held = f"{variable} holds" if value else f"the {adapter.name} adapter signs with"
            where = f"its own endpoint, {own}" if isinstance(own, str) else "the endpoints its operator configured"
            raise ConfigurationError(
                f"an ad-hoc {adapter.name} call to base_url {masked_url(base_url)} needs api_key=: {held} the "
                f"credentials of {where}, and they are never sent to another host")
    return Secret(value) if value else None


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port if parts.port is not None else {"https": 443, "http": 80}.get(scheme)
    except ValueError:  # out of range: no endpoint of anyone's (the configuration refuses it next)
        port = -1
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def with_repair(request: ProviderRequest, ctx: ProviderCallContext) -> ProviderRequest:
    """The request, followed by the repair turn when the structured_output layer asked for one."""
    note = ctx.repair.note
    return repaired(request, note) if note is not None and isinstance(request, ChatRequest) else request


def attempt_timeout(config: ProviderConfig) -> AttemptTimeoutError:
    return AttemptTimeoutError(f"attempt on {config.identifier!r} exceeded its timeout of {config.timeout_s:g}s",
                               limit_s=config.timeout_s, provider=config.provider, model=config.model)


def answered(response: ProviderResponse, response_type: type[R], config: ProviderConfig, price: Price | None,
             max_output_tokens: int | None) -> R:
    """An adapter's answer as the call returns it: typed as asked (vision is a chat whose answer is
    typed apart), a key echoed in its names scrubbed, its output within the call's bound (None: a
    stream, bounded at its end), priced."""
    response = Scrubber.for_config(config).answer(response)
    if type(response) is not response_type:
        response = response_type(**{f.name: getattr(response, f.name) for f in attrs.fields(type(response))})
    if max_output_tokens is not None or price is not None:
        within_output_bound(response, output_bound(max_output_tokens, price))
    usage = response.usage
    if price is not None and usage.cost_usd is None:
        return attrs.evolve(response, usage=attrs.evolve(usage, cost_usd=price.cost_usd(usage)))
    return response


def output_bound(max_output_tokens: int | None, price: Price | None) -> int | None:
    """The most output an answer may report: the call's ``max_tokens``, else the model's ceiling."""
    return max_output_tokens if max_output_tokens is not None or price is None else price.max_output_tokens


def within_output_bound(response: ProviderResponse, bound: int | None) -> None:
    """Refuse an answer that reports more output than the call allowed: a provider stops at
    ``max_tokens`` (or the model's ceiling), so a larger count is a malformed answer, never a
    charge to book."""
    output = response.usage.output_tokens
    if bound is not None and output > bound:
        raise MalformedResponseError(f"the answer reports {output} output tokens, above the call's bound of {bound} "
                                     "(max_tokens, or the model's ceiling)", provider=response.provider,
                                     model=response.model)


async def tell_sending(meters: Sequence[AttemptMeter], config: ProviderConfig) -> None:
    """Tell each meter an attempt is leaving; when one refuses, those already told hear it never left."""
    for told, meter in enumerate(meters):
        try:
            await meter.sending(config)
        except BaseException:
            await tell_ended(meters[:told], config, "no", None)
            raise


async def tell_ended(meters: Sequence[AttemptMeter], config: ProviderConfig, billed: Billed,
                     usage: Usage | None) -> None:
    for meter in meters:
        await meter.ended(config, billed, usage)


def meter_stream(meters: Sequence[AttemptMeter], config: ProviderConfig, opened: OpenedStream) -> None:
    """Tell ``meters`` of a stream's attempt at its end, with the usage it reported or an estimate."""
    async def ended(end: StreamEnd) -> None:
        await tell_ended(meters, config, "yes", end.response.usage)

    opened.on_end(ended)
