"""The attributes of provmw's spans and metrics: OpenTelemetry's GenAI, server and error
semantic conventions, and provmw's own facts under ``provmw.``.

The names are written out here rather than imported from ``opentelemetry-semantic-conventions``
because the plugin depends on the OpenTelemetry API only; the test suite checks that every
name emitted is a constant of that package (or starts with ``provmw.``), so an upstream
rename fails it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import GuardRefusedError
from provmw.pools import Pool
from provmw.redaction import redact
from provmw.requests import merged_options
from provmw.responses import CompletionResponse, EmbeddingResponse, ProviderResponse
from provmw.streams import StreamEnd

__all__ = [
    "Attributes",
    "attempt_attributes",
    "call_attributes",
    "caller_attributes",
    "error_attributes",
    "metric_attributes",
    "operation_name",
    "output_messages",
    "pool_attributes",
    "response_attributes",
    "served_attributes",
    "server_attributes",
    "span_name",
    "stream_end_attributes",
]

Attributes = dict[str, Any]

OPERATION_NAME = "gen_ai.operation.name"
PROVIDER_NAME = "gen_ai.provider.name"
SYSTEM = "gen_ai.system"  # deprecated for gen_ai.provider.name; still what most backends group by
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
DIMENSION_COUNT = "gen_ai.embeddings.dimension.count"
OUTPUT_TYPE = "gen_ai.output.type"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOKEN_TYPE = "gen_ai.token.type"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

_OPERATIONS = {
    ProviderOperation.CHAT: "chat",
    ProviderOperation.VISION: "chat",
    ProviderOperation.TOOLS: "chat",
    ProviderOperation.COMPLETION: "text_completion",
    ProviderOperation.EMBEDDING: "embeddings",
    ProviderOperation.RESPONSES: "chat",
    # The conventions name no operation for these yet: their own names, as the conventions allow.
    ProviderOperation.IMAGE: "image_generation",
    ProviderOperation.IMAGE_EDIT: "image_edit",
    ProviderOperation.TRANSCRIPTION: "transcription",
    ProviderOperation.SPEECH: "speech",
    ProviderOperation.RERANK: "rerank",
    ProviderOperation.MODERATION: "moderation",
}
# Generation options as the conventions name them; numbers only (a bool is not a temperature).
_NUMBER_OPTIONS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "presence_penalty": "gen_ai.request.presence_penalty",
    "frequency_penalty": "gen_ai.request.frequency_penalty",
    "seed": "gen_ai.request.seed",
    "n": "gen_ai.request.choice.count",
}
_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
_OUTPUT_TYPES = {"json_object": "json", "json_schema": "json", "text": "text"}
# Where an adapter sends a configuration without base_url (each adapter's documented default).
_DEFAULT_SERVERS = {"openai": ("api.openai.com", 443), "anthropic": ("api.anthropic.com", 443)}
_SCHEME_PORTS = {"https": 443, "http": 80}


def operation_name(ctx: ProviderCallContext) -> str:
    """The convention's name of the call's operation: chat, text_completion or embeddings."""
    return _OPERATIONS[ctx.operation]


def span_name(ctx: ProviderCallContext, config: ProviderConfig) -> str:
    """``"{gen_ai.operation.name} {gen_ai.request.model}"``, as the conventions name spans."""
    return f"{_OPERATIONS[ctx.operation]} {config.model}"


def server_attributes(config: ProviderConfig) -> Attributes:
    """``server.address`` and ``server.port`` of where ``config``'s requests go; none when unknown."""
    if config.base_url is None:
        known = _DEFAULT_SERVERS.get(config.provider)
        return {} if known is None else {SERVER_ADDRESS: known[0], SERVER_PORT: known[1]}
    try:  # only the host and port: a base URL may carry credentials in its user part or query
        parts = urlsplit(config.base_url)
        port = parts.port or _SCHEME_PORTS.get(parts.scheme)
    except ValueError:
        return {}
    found: Attributes = {SERVER_ADDRESS: parts.hostname} if parts.hostname else {}
    return found | ({SERVER_PORT: port} if port else {})


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _request_options(options: Mapping[str, Any]) -> Attributes:
    found = {name: options[key] for key, name in _NUMBER_OPTIONS.items() if _number(options.get(key))}
    stop = options.get("stop")
    if isinstance(stop, str) or (isinstance(stop, list | tuple) and all(isinstance(s, str) for s in stop)):
        found[_STOP_SEQUENCES] = [stop] if isinstance(stop, str) else list(stop)
    response_format = options.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, Mapping) else response_format
    if isinstance(kind, str) and kind in _OUTPUT_TYPES:
        found[OUTPUT_TYPE] = _OUTPUT_TYPES[kind]
    return found


def caller_attributes(ctx: ProviderCallContext) -> Attributes:
    """Who the call is for: the call span's, set only when the span is recorded."""
    # Redacted as the call-log plugin's line shows them: an e-mail or phone never leaves.
    found = {"provmw.correlation_id": redact(ctx.correlation_id)}
    if ctx.facts.tenant is not None:
        found["provmw.tenant"] = redact(ctx.facts.tenant)
    if ctx.facts.user is not None:
        found["provmw.user"] = redact(ctx.facts.user)
    return found


def call_attributes(ctx: ProviderCallContext, config: ProviderConfig) -> Attributes:
    """A call span's attributes at its start: the operation, and the configuration asked.

    The request parameters and the deprecated ``gen_ai.system`` are each attempt's only; the
    server is the call span's only once an attempt served (or failed last): a failover's call
    has no one server until then."""
    return {OPERATION_NAME: _OPERATIONS[ctx.operation], PROVIDER_NAME: config.provider, REQUEST_MODEL: config.model,
            "provmw.configuration": config.identifier}


def attempt_attributes(ctx: ProviderCallContext, config: ProviderConfig) -> Attributes:
    """An attempt span's attributes at its start: the call span's, with the server this request
    goes to and the generation options it asks with."""
    # An embedding sends no generation options, whatever its configuration holds.
    asked = {} if ctx.operation is ProviderOperation.EMBEDDING else merged_options(config, ctx.facts.options)
    return {**call_attributes(ctx, config), SYSTEM: config.provider, **server_attributes(config),
            **_request_options(asked)}


def _add_usage(found: Attributes, response: ProviderResponse) -> None:
    usage = response.usage
    found[INPUT_TOKENS] = usage.input_tokens
    if not isinstance(response, EmbeddingResponse):
        found[OUTPUT_TOKENS] = usage.output_tokens
    if usage.cached_input_tokens:
        found[CACHE_READ_TOKENS] = usage.cached_input_tokens
    if written := usage.cache_write_5m_tokens + usage.cache_write_1h_tokens:
        found[CACHE_CREATION_TOKENS] = written
    if usage.reasoning_tokens:
        found[REASONING_TOKENS] = usage.reasoning_tokens


def response_attributes(response: ProviderResponse, *, usage: bool = True) -> Attributes:
    """What the answer says: its model, id, finish reason, and (unless cached) the tokens it took."""
    found: Attributes = {RESPONSE_MODEL: response.model}
    if response.response_id is not None:
        found[RESPONSE_ID] = response.response_id
    if isinstance(response, CompletionResponse):
        if response.finish_reason is not None:
            found[FINISH_REASONS] = [response.finish_reason]
    elif isinstance(response, EmbeddingResponse) and response.vectors:
        found[DIMENSION_COUNT] = len(response.vectors[0])
    if response.usage.cost_usd is not None:
        found["provmw.cost_usd"] = response.usage.cost_usd
    if usage and not response.cached:
        _add_usage(found, response)
    return found


def served_attributes(response: ProviderResponse) -> Attributes:
    """Who served the call and whether from the cache: the call span's (an attempt is never
    cached, and what served it is its own configuration)."""
    return {"provmw.served_by": response.served_by, "provmw.cached": response.cached}


def pool_attributes(config: ProviderConfig, served_by: str, pools: Mapping[str, Pool]) -> Attributes:
    """``provmw.pool`` and ``provmw.deployment`` when a deployment of a pool served: the pool asked,
    or one in its fallback chain (the call span's ``provmw.served_by`` is that deployment too)."""
    for name in (config.identifier, *config.fallbacks):
        pool = pools.get(name)
        if pool is not None and served_by in pool.members:
            return {"provmw.pool": name, "provmw.deployment": served_by}
    return {}


def stream_end_attributes(end: StreamEnd) -> Attributes:
    """What a stream's end says: its assembled answer, with tokens only when the provider
    reported them (provmw's own estimate is marked, never passed off as the provider's)."""
    found = response_attributes(end.response, usage=not end.usage_estimated)
    if end.usage_estimated:
        found["provmw.usage_estimated"] = True
    if end.abandoned:
        found["provmw.stream_abandoned"] = True
    return found


def error_attributes(error: BaseException) -> Attributes:
    """``error.type`` (the provmw error class) and, when a provider answered, its HTTP status; a guard's
    refusal adds the rule and stage that refused (never the text it matched)."""
    status = getattr(error, "status", None)
    found: Attributes = {ERROR_TYPE: type(error).__name__}
    if isinstance(error, GuardRefusedError):
        found |= {"provmw.guard.rule": error.rule, "provmw.guard.stage": error.stage}
    return found | ({"provmw.status_code": status} if isinstance(status, int) else {})


def metric_attributes(span_attributes: Mapping[str, Any]) -> Attributes:
    """The low-cardinality subset of a span's attributes the conventions put on metrics."""
    return {k: span_attributes[k] for k in _METRIC_KEYS if k in span_attributes}


_METRIC_KEYS = (OPERATION_NAME, PROVIDER_NAME, SYSTEM, REQUEST_MODEL, RESPONSE_MODEL, SERVER_ADDRESS, SERVER_PORT,
                ERROR_TYPE)


def output_messages(response: ProviderResponse) -> str | None:
    """The answer as ``gen_ai.output.messages`` JSON, its text redacted; None for a vector answer."""
    if not isinstance(response, CompletionResponse):
        return None
    message = {"role": "assistant", "parts": [{"type": "text", "content": redact(response.text)}],
               "finish_reason": response.finish_reason or "stop"}
    return json.dumps([message], ensure_ascii=False)
