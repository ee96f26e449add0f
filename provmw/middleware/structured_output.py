"""``structured_output``: check an answer against the call's ``response_schema``, repair it once.

It sits inside ``fallback`` and outside ``retry`` (priority 520, ADR 0024). Inside fallback,
so that an answer that stays invalid moves the call on to the next configuration; outside
retry, so that the retries of each request and the one repair turn never multiply (the
retry layer never sees ``StructuredOutputError``); outside ``usage``, so that the invalid
answer, billed like any other, is recorded before it is judged. The repair turn is a
rewritten request handed down like any other layer's (``ctx.with_request``): the layers below
and the adapter see the longer conversation, and a strict budget reserves for it.
"""

from __future__ import annotations

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import StructuredOutputError
from provmw.pipeline import Next, R
from provmw.requests import ChatRequest
from provmw.responses import CompletionResponse
from provmw.structured import parsed_answer, repaired

__all__ = ["StructuredOutputMiddleware"]


class StructuredOutputMiddleware:
    """Validate the answer of a call with a ``response_schema``; an invalid one gets one repair turn."""

    name = "structured_output"
    priority = 520

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        schema = ctx.facts.response_schema
        response = await next(config)
        if schema is None or not isinstance(response, CompletionResponse):
            # A Responses answer is judged alike; its adapter set ``parsed`` if it follows (no repair turn).
            if schema is not None and ctx.operation is ProviderOperation.RESPONSES and \
                    getattr(response, "parsed", None) is None:
                return parsed_answer(response, schema)  # type: ignore[type-var]
            return response
        try:
            return parsed_answer(response, schema)
        except StructuredOutputError as exc:
            request = ctx.request
            if not isinstance(request, ChatRequest):
                raise
            turn = ctx.with_request(repaired(request, response.text, exc.problem))
        again = await next(config, turn)
        if not isinstance(again, CompletionResponse):
            return again
        return parsed_answer(again, schema, tries=2)
