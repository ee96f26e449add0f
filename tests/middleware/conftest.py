from __future__ import annotations

from collections.abc import Iterable

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.pipeline import MiddlewarePipeline
from provmw.providers import ProviderAdapter
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse

CTX = ProviderCallContext(ProviderOperation.CHAT)
ADAPTERS: dict[str, ProviderAdapter] = {"openai": OpenAIAdapter(), "anthropic": AnthropicAdapter()}


async def chat_through(middlewares: Iterable[object], http: HttpClient, config: ProviderConfig,
                       ctx: ProviderCallContext = CTX, text: str = "hi") -> CompletionResponse:
    """One chat call through ``middlewares`` over real HTTP, as the manager would make it."""
    request = ChatRequest((Message.user(text),))

    async def terminal(chosen: ProviderConfig) -> CompletionResponse:
        return await ADAPTERS[chosen.provider].chat(http, chosen, request)

    return await MiddlewarePipeline(middlewares).run(ctx, config, terminal)
