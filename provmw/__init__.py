"""provmw: one ordered, pluggable middleware stack for every LLM provider call.

The light, always-needed names are imported eagerly; the manager, the plugin host and
``hookimpl`` load on first use so that ``import provmw`` stays fast (pluggy is imported
when a manager or plugin needs it, aiohttp when the first request is made).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from provmw.config import ProviderConfig, Secret
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import (
    AttemptTimeoutError,
    AuthenticationError,
    BudgetExceededError,
    BudgetUnavailableError,
    CircuitOpenError,
    ConfigurationError,
    ContentPolicyError,
    ContextLengthExceededError,
    DeadlineExceededError,
    DestinationRefusedError,
    DuplicateMiddlewareError,
    FallbackExhaustedError,
    FirstChunkTimeoutError,
    GuardRefusedError,
    InvalidDataError,
    InvalidRequestError,
    LocalRateLimitError,
    MalformedResponseError,
    PluginError,
    PluginLoadError,
    PoolUnavailableError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    ProvmwError,
    RateLimitError,
    ResponseTooLargeError,
    StreamInterruptedError,
    StreamTooLargeError,
    StructuredOutputError,
    UnknownArgumentError,
    UnsupportedOperationError,
    UsageLedgerUnavailableError,
)
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.pipeline import Middleware, MiddlewarePipeline
from provmw.responses import (
    ChatChunk,
    CompletionResponse,
    EmbeddingResponse,
    ProviderResponse,
    RateLimitHint,
    Usage,
    VisionResponse,
)

if TYPE_CHECKING:
    from provmw.hookspecs import hookimpl
    from provmw.manager import ServiceManager
    from provmw.plugins import PluginHost
    from provmw.settings import Settings, load_settings
    from provmw.sync import SyncServiceManager

__version__ = "0.1.0"

__all__ = [
    "AttemptTimeoutError",
    "AuthenticationError",
    "BudgetExceededError",
    "BudgetUnavailableError",
    "ChatChunk",
    "CircuitOpenError",
    "CompletionResponse",
    "ConfigurationError",
    "ContentPolicyError",
    "ContextLengthExceededError",
    "DeadlineExceededError",
    "DestinationRefusedError",
    "DuplicateMiddlewareError",
    "EmbeddingResponse",
    "FallbackExhaustedError",
    "FirstChunkTimeoutError",
    "GuardRefusedError",
    "ImagePart",
    "InvalidDataError",
    "InvalidRequestError",
    "LocalRateLimitError",
    "MalformedResponseError",
    "Message",
    "Middleware",
    "MiddlewarePipeline",
    "PluginError",
    "PluginHost",
    "PluginLoadError",
    "PoolUnavailableError",
    "ProviderCallContext",
    "ProviderConfig",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderOperation",
    "ProviderResponse",
    "ProviderTimeoutError",
    "ProviderUnavailableError",
    "ProvmwError",
    "RateLimitError",
    "ResponseTooLargeError",
    "Secret",
    "ServiceManager",
    "Settings",
    "StreamInterruptedError",
    "StreamTooLargeError",
    "StructuredOutputError",
    "SyncServiceManager",
    "TextPart",
    "ToolCall",
    "ToolSpec",
    "UnknownArgumentError",
    "UnsupportedOperationError",
    "RateLimitHint",
    "Usage",
    "UsageLedgerUnavailableError",
    "VisionResponse",
    "hookimpl",
    "load_settings",
]

_LAZY = {
    "ServiceManager": "provmw.manager",
    "SyncServiceManager": "provmw.sync",
    "PluginHost": "provmw.plugins",
    "hookimpl": "provmw.hookspecs",
    "Settings": "provmw.settings",
    "load_settings": "provmw.settings",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'provmw' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
