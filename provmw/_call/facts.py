"""Call facts: what the manager knows about one call, computed in one place.

:func:`call_facts` is pure: it turns the operation, the configuration, the typed request
and the caller's arguments into one frozen :class:`~provmw.context.CallFacts`, and raises
``ConfigurationError`` for caller arguments of the wrong kind. A new built-in fact is a
field of ``CallFacts`` and a line here; the manager only calls this.

Two sizes of a call's input are computed. The estimate (4 characters a token) is cheap and
close, for rate limits and estimate-mode budgets. The bound (ADR 0015) is never below what a
provider can count: byte-level tokenizers emit at least one UTF-8 byte per token, so the
bytes of all text, tool specs and options, plus each provider's fixed allowances for what
it adds around them (:data:`ALLOWANCES`), bound the input tokens; strict budgets reserve it.
"""

from __future__ import annotations

import json
import types
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import CallFacts, FrozenMap, Principal, ProviderOperation
from provmw.errors import ConfigurationError
from provmw.operations import OperationRequest
from provmw.options import did_you_mean
from provmw.pricing import CacheTTL, Price, PriceTable
from provmw.providers import Capabilities
from provmw.requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ProviderRequest,
    is_deterministic,
    merged_options,
    request_digest,
)

__all__ = ["ALLOWANCES", "Allowance", "cache_write_ttl", "call_facts", "call_needs", "estimate_tokens", "output_limit",
           "input_token_bound"]

_IMAGE_CHARS = 340  # an image counts as this much text; what providers charge varies by size


@attrs.frozen
class Allowance:
    """Tokens a provider adds around the text it is sent, each a documented maximum with room to spare."""

    per_request: int  # reply priming and framing of the whole request
    per_message: int  # role markers and separators of one message (or one embedding input)
    per_image: int  # the most one image can count, whatever its size
    per_tool: int  # the wrapping of one tool spec beyond its JSON
    with_tools: int  # the hidden system prompt a request with tools gets


ALLOWANCES: Mapping[str, Allowance] = types.MappingProxyType({
    # 3 tokens prime each reply and about 4 frame each message; gpt-4o-mini counts an image
    # as up to 2,833 + 8 tiles x 5,667 = 48,169 tokens, the most of any OpenAI model.
    "openai": Allowance(per_request=16, per_message=8, per_image=48_200, per_tool=64, with_tools=256),
    # Images are scaled to at most about 1,600 tokens (long edge 1,568 px); high-resolution
    # models go further, so 5,000. Tool use adds a system prompt of up to 530 tokens.
    "anthropic": Allowance(per_request=16, per_message=8, per_image=5_000, per_tool=64, with_tools=600),
})
# A provider provmw has no figures for gets the largest of each.
_UNKNOWN = Allowance(*(max(getattr(a, f.name) for a in ALLOWANCES.values()) for f in attrs.fields(Allowance)))


@attrs.frozen
class _Shape:
    """What a request's size is made of: text bytes, and the things each provider adds tokens for."""

    text_bytes: int
    messages: int
    images: int = 0
    tools: int = 0


def call_facts(operation: ProviderOperation, config: ProviderConfig, request: ProviderRequest, *,
               chain: Sequence[ProviderConfig], prices: PriceTable, known_controls: Collection[str],
               user: str | None = None, tenant: str | None = None, controls: Mapping[str, Any] | None = None,
               idempotency_key: str | None = None, capabilities: Mapping[str, Capabilities] | None = None,
               stream: bool = False, pools: Mapping[str, Sequence[ProviderConfig]] | None = None,
               principal: Principal | None = None) -> CallFacts:
    """The facts of one call on ``config`` whose fallback chain is ``chain``; ``capabilities``
    are the installed adapters' by provider name (an adapter missing from it offers the defaults);
    ``pools`` the deployments of each pool in the chain, by the pool's name."""
    needs = call_needs(operation, config, request, streaming=stream)
    sized: list[tuple[int, int | None]] = []  # both lazy computations below share the sizes
    # What may serve the call: a pool in the chain stands for its deployments (what they cost, lack).
    served = chain if not pools else [m for c in chain for m in pools.get(c.identifier, (c,))]

    def sizes() -> tuple[int, int | None]:
        if not sized:
            sized.append((estimate_tokens(request), _most_output_tokens(served, request)))
        return sized[0]

    def sizes_and_unmet() -> tuple[int, int | None, dict[str, tuple[str, ...]]]:
        offered = capabilities or {}
        unmet = {c.identifier: lacking for c in served
                 if (lacking := offered.get(c.provider, _DEFAULTS).lacking(needs))}
        for pool, members in (pools or {}).items():  # a pool lacks only what every deployment lacks
            lacks = [unmet.get(m.identifier, ()) for m in members]
            if members and all(lacks):
                unmet[pool] = tuple(sorted({need for lacked in lacks for need in lacked}))
        return (*sizes(), unmet)

    def bounds() -> tuple[int, float | None, float | None]:
        max_input, planned = _bound_over(served, request, prices)
        estimated, max_output = sizes()
        return max_input, planned, _planned_cost_usd(served, request, prices, estimated, max_output)

    return CallFacts(
        user=_text("user", user), tenant=_text("tenant", tenant), principal=_principal(principal),
        options=_NO_OPTIONS if isinstance(request, EmbeddingRequest) else request.options,
        controls=_controls(controls, known_controls),
        idempotency_key=_text("idempotency_key", idempotency_key),
        deterministic=is_deterministic(config, request), sizes=sizes_and_unmet, bounds=bounds,
        stream=stream, needs=needs, response_schema=getattr(request, "response_schema", None), chain=tuple(chain),
        unknown_worst_case=_unknown_worst_case(config, request),
        digest=lambda: request_digest(operation, config, request),
        rebuild=lambda changed: call_facts(
            operation, config, changed, chain=chain, prices=prices, known_controls=known_controls, user=user,
            tenant=tenant, controls=controls, idempotency_key=idempotency_key, capabilities=capabilities,
            stream=stream, pools=pools, principal=principal),
    )


_DEFAULTS = Capabilities()  # what an adapter that declares nothing offers

_OPERATION_NEEDS = {ProviderOperation.COMPLETION: "completion", ProviderOperation.EMBEDDING: "embeddings"}


def call_needs(operation: ProviderOperation, config: ProviderConfig, request: ProviderRequest, *,
               streaming: bool = False) -> frozenset[str]:
    """The capabilities a call on ``config`` needs of whichever configuration serves it.

    ``response_format`` counts when the call or the named configuration asks for it: a
    fallback that cannot honour it must be skipped, not sent the call without it.
    """
    if isinstance(request, ChatRequest):
        tools, schema = bool(request.tools), request.response_schema is not None
        urls = inline = False
        for message in request.messages:
            for image in message.images:
                urls, inline = urls or image.url is not None, inline or image.url is None
    elif not isinstance(request, CompletionRequest | EmbeddingRequest):
        return request.needs(streaming=streaming)
    else:
        tools = schema = urls = inline = False
    asks_format = not schema and not isinstance(request, EmbeddingRequest) and (
        "response_format" in request.options or "response_format" in config.options)
    key = (operation, streaming, tools, schema, urls or inline, urls, inline, asks_format)
    needs = _NEEDS.get(key)
    if needs is None:
        needs = _NEEDS[key] = frozenset(
            [_OPERATION_NEEDS.get(operation, "chat")]
            + [need for need, wanted in zip(_NEED_NAMES, key[1:], strict=True) if wanted])
    return needs


_NEED_NAMES = ("streaming", "tools", "schema", "vision", "vision_url", "vision_bytes", "response_format")
# Each combination of what a call needs, made once: there are at most a few dozen.
_NEEDS: dict[tuple[ProviderOperation, bool, bool, bool, bool, bool, bool, bool], frozenset[str]] = {}


def estimate_tokens(request: ProviderRequest) -> int:
    """A cheap upper-ish estimate (4 characters a token) for budgets and rate limits."""
    if isinstance(request, EmbeddingRequest):
        chars = sum(len(t) for t in request.inputs)
    elif isinstance(request, CompletionRequest):
        chars = len(request.prompt)
    elif isinstance(request, ChatRequest):
        chars = sum(len(m.text) + _IMAGE_CHARS * len(m.images) for m in request.messages)
    else:
        return request.estimate_tokens()
    return chars // 4 + 1


def input_token_bound(provider: str, request: ProviderRequest, options: Mapping[str, Any]) -> int:
    """The most input tokens ``provider`` can count for ``request`` sent with ``options``."""
    return _bound(_shape(request), ALLOWANCES.get(provider, _UNKNOWN), _json_bytes(options))


def cache_write_ttl(options: Mapping[str, Any]) -> CacheTTL | None:
    """The longest cache TTL any ``cache_control`` in ``options`` asks for ("1h" for one it cannot read)."""
    found: CacheTTL | None = None
    pending: list[Any] = [options]
    while pending:
        item = pending.pop()
        if isinstance(item, Mapping):
            if "cache_control" in item:
                control = item["cache_control"]
                if not isinstance(control, Mapping) or control.get("ttl", "5m") != "5m":
                    return "1h"
                found = "5m"
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return found


def _bound_over(chain: Sequence[ProviderConfig], request: ProviderRequest,
                prices: PriceTable) -> tuple[int, float | None]:
    """The largest input bound over the chain, and the most any configuration in it may cost
    (None when one of them has no price or no output bound)."""
    shape = _shape(request)
    most = 0
    worst: float | None = 0.0
    for config in chain:
        fixed = _fixed(config, request, prices)
        tokens = _bound(shape, fixed.allowance, fixed.option_bytes)
        most = max(most, tokens)
        cost = None if worst is None else fixed.cost_usd(tokens, fixed.output, fixed.cache_ttl)
        worst = None if cost is None or worst is None else max(worst, cost)
    return most, worst


@attrs.frozen
class _Fixed:
    """What a configuration adds to a call's bound: the same for every call that gives no options."""

    option_bytes: int
    allowance: Allowance
    price: Price | None
    output: int | None  # the output bound: 0 for embeddings, None when nothing bounds it
    cache_ttl: CacheTTL | None
    # For a price without tiers: the highest input rate (with and without the cache writes the
    # options ask for) and the output rate, so that a worst case is two products.
    flat: tuple[float, float, float] | None
    # The most the call may cost in units other than tokens (ADR 0053); None: a unit has no price.
    units_usd: float | None = 0.0

    def cost_usd(self, input_tokens: int, output: int | None, cache_ttl: CacheTTL | None) -> float | None:
        """``Price.worst_case_usd``, from the rates worked out once, and the units' worst."""
        price, units_usd = self.price, self.units_usd
        if price is None or units_usd is None:
            return None
        if output is None:
            output = price.max_output_tokens
        if self.flat is None or output is None:
            tokens = price.worst_case_usd(input_tokens, output, cache_write_ttl=cache_ttl)
            return None if tokens is None else tokens + units_usd
        input_rate = self.flat[0] if cache_ttl is None else self.flat[1]
        return (input_tokens * input_rate + output * self.flat[2]) / 1e6 + units_usd


_FIXED_KEPT = 256
# (id(config), id(prices), embedding) -> (config, prices, fixed): both kept alive, so no id is reused meanwhile.
_fixed_by_config: dict[tuple[int, int, bool], tuple[ProviderConfig, PriceTable, _Fixed]] = {}


def _fixed(config: ProviderConfig, request: ProviderRequest, prices: PriceTable) -> _Fixed:
    """``config``'s part of the bound of ``request``; computed once per configuration for requests without
    options of their own (most calls: their options are the configuration's)."""
    own = getattr(request, "options", _NO_OPTIONS)
    if not isinstance(request, ChatRequest | CompletionRequest | EmbeddingRequest):
        return _operation_fixed(config, request, prices)
    embedding = isinstance(request, EmbeddingRequest)
    key = (id(config), id(prices), embedding)
    if not own:
        kept = _fixed_by_config.get(key)
        if kept is not None and kept[0] is config and kept[1] is prices:
            return kept[2]
    options = merged_options(config, own)
    price = prices.price_for(config)
    ttl = cache_write_ttl(options)
    rates = price.rates() if price is not None and not price.tiers else None
    flat = None if rates is None else (rates.highest_input(None), rates.highest_input(ttl), rates.output)
    fixed = _Fixed(_json_bytes(options), ALLOWANCES.get(config.provider, _UNKNOWN), price,
                   0 if embedding else output_limit(config, request), ttl, flat)
    if not own:
        if len(_fixed_by_config) >= _FIXED_KEPT:
            _fixed_by_config.clear()
        _fixed_by_config[key] = (config, prices, fixed)
    return fixed


def _operation_fixed(config: ProviderConfig, request: OperationRequest, prices: PriceTable) -> _Fixed:
    """``_fixed`` for an operation beyond chat: its output and units come from the request (its
    images, its audio), so nothing is kept per configuration."""
    options = merged_options(config, request.options)
    price = prices.price_for(config)
    units = request.most_units(options)
    units_usd = None if price is None else price.most_units_usd(units)
    return _Fixed(_json_bytes(options), ALLOWANCES.get(config.provider, _UNKNOWN), price,
                  request.most_output_tokens(options), None, None, units_usd)


def _planned_cost_usd(chain: Sequence[ProviderConfig], request: ProviderRequest, prices: PriceTable,
                      input_tokens: int, max_output_tokens: int | None) -> float | None:
    """``PriceTable.planned_cost_usd`` over the chain, from each configuration's fixed part."""
    worst = 0.0
    for config in chain:
        cost = _fixed(config, request, prices).cost_usd(input_tokens, max_output_tokens, None)
        if cost is None:
            return None
        worst = max(worst, cost)
    return worst


def _bound(shape: _Shape, allowance: Allowance, option_bytes: int) -> int:
    tools = allowance.with_tools + allowance.per_tool * shape.tools if shape.tools else 0
    return (shape.text_bytes + option_bytes + allowance.per_request + allowance.per_message * shape.messages
            + allowance.per_image * shape.images + tools)


def _shape(request: ProviderRequest) -> _Shape:
    if isinstance(request, EmbeddingRequest):
        return _Shape(sum(_utf8(text) for text in request.inputs), len(request.inputs))
    if isinstance(request, CompletionRequest):
        return _Shape(_utf8(request.prompt), 1)
    if isinstance(request, ChatRequest):
        return _chat_shape(request)
    return _Shape(request.input_bytes(), 1)


def _chat_shape(request: ChatRequest) -> _Shape:
    text = 0
    for message in request.messages:
        text += _utf8(message.text) + _utf8(message.tool_call_id or "")
        text += sum(_utf8(call.id) + _utf8(call.name) + _utf8(call.arguments) for call in message.tool_calls)
    text += sum(_json_bytes(tool.to_dict()) for tool in request.tools)
    images = sum(len(message.images) for message in request.messages)
    # A schema travels as a tool on some wires (Anthropic's forced tool): count it as one.
    schema = request.response_schema
    text += _json_bytes(schema) if schema is not None else 0
    return _Shape(text, len(request.messages), images, len(request.tools) + (schema is not None))


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def _json_bytes(value: Mapping[str, Any]) -> int:
    return _utf8(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_plain)) if value else 0


def _plain(value: object) -> object:
    # What the adapter would send; anything else is counted by its text, which is no shorter.
    return dict(value) if isinstance(value, Mapping) else str(value)


def _most_output_tokens(chain: Sequence[ProviderConfig], request: ProviderRequest) -> int | None:
    """The largest ``max_tokens`` over the fallback chain, or None when one of them sets none
    (a fallback may answer at length; a strict token limit must reserve for it)."""
    bounds = [output_limit(config, request) for config in chain]
    return None if not bounds or None in bounds else max(b for b in bounds if b is not None)


def output_limit(config: ProviderConfig, request: ProviderRequest) -> int | None:
    """The most output ``config`` may answer ``request`` with: its ``max_tokens`` (or the call's)."""
    # Either name bounds the answer (max_completion_tokens is OpenAI's for reasoning models);
    # with both set, the larger, so that a reservation is never short of what may be billed.
    # The call's option overrides the configuration's (merged_options), read without merging.
    if not isinstance(request, ChatRequest | CompletionRequest | EmbeddingRequest):
        return request.most_output_tokens(merged_options(config, request.options))
    call, own = getattr(request, "options", _NO_OPTIONS), config.options
    bounds = [value for name in ("max_tokens", "max_completion_tokens")
              if isinstance(value := call[name] if name in call else own.get(name), int)]
    return max(bounds) if bounds else None


_NO_OPTIONS = FrozenMap()  # immutable, so every call without options (controls, unmet needs) shares it


def _text(name: str, value: object) -> str | None:
    # An int user id would otherwise make a budget bucket nobody matches, and a fail-open
    # budget would let the call through uncounted.
    if value is not None and not isinstance(value, str):
        raise ConfigurationError(f"{name} must be a string, got {type(value).__name__} {value!r}")
    return value


def _unknown_worst_case(config: ProviderConfig, request: ProviderRequest) -> str | None:
    if isinstance(request, ChatRequest | CompletionRequest | EmbeddingRequest):
        return None
    says = getattr(request, "unknown_worst_case", None)
    return None if says is None else says(merged_options(config, request.options))


def _principal(value: object) -> Principal | None:
    if value is not None and not isinstance(value, Principal):
        raise ConfigurationError(f"principal must be a provmw.context.Principal, got {type(value).__name__}")
    return value


def _controls(controls: Mapping[str, Any] | None, known: Collection[str]) -> FrozenMap:
    if controls is None:
        return _NO_OPTIONS
    if not isinstance(controls, Mapping):
        raise ConfigurationError(f"controls must be a mapping of control names to values, got {controls!r}")
    for name in controls:
        if name not in known:
            names = sorted(known)
            raise ConfigurationError(f"controls: no installed middleware reads {name!r}"
                                     f"{did_you_mean(str(name), names)}; known: {', '.join(names) or 'none'}")
    return FrozenMap(controls)
