"""OpenAI's ``/moderations``: ``OpenAIAdapter.moderate`` hands its calls here.

The body is ``{model, input}`` with every text in a list, and the ``extra_body`` option's
fields; the answer holds one result per input, in order: ``flagged``, ``categories`` (name to
bool) and ``category_scores`` (name to number).
The API reports no usage (moderation is free); a gateway's ``usage`` is read when it sends one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from provmw._base import serde
from provmw.errors import ConfigurationError, InvalidDataError
from provmw.http import malformed, plain_json
from provmw.operations.moderation import ModerationRequest, ModerationResponse, ModerationResult
from provmw.providers._usage import UsageBody
from provmw.requests import merged_options
from provmw.responses import Usage

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.http import HttpClient
    from provmw.providers.openai import OpenAIAdapter

__all__ = ["moderate"]

# What a malformed answer raises while it is read (a ConfigurationError: a value the result's
# own validators refuse); ``malformed`` turns each into one error.
_SHAPE_ERRORS = (KeyError, IndexError, TypeError, AttributeError, ValueError, ConfigurationError)


async def moderate(adapter: OpenAIAdapter, http: HttpClient, config: ProviderConfig,
                   request: ModerationRequest) -> ModerationResponse:
    """One ``/moderations`` call through ``adapter``'s error table and headers."""
    # Generation options (temperature...) do not apply here: only the provider's own fields are sent.
    extra = merged_options(config, request.options).get("extra_body", {})
    body = {**plain_json(extra), "model": config.model, "input": list(request.inputs)}  # extras replace none
    data, hint = await adapter._post(http, config, "/moderations", body)
    try:
        answer = serde.mapping(data, "response")
        return ModerationResponse(
            provider=adapter.name, model=serde.get(answer, "model", str, "response", default=None) or config.model,
            usage=_usage(answer, adapter.name, config.model), served_by=config.identifier,
            response_id=serde.get(answer, "id", str, "response", default=None), rate_limit=hint,
            results=_results(answer, len(request.inputs)),
        )
    except _SHAPE_ERRORS as exc:
        raise malformed(adapter.name, config.model, exc) from None


def _results(answer: Mapping[str, Any], inputs: int) -> tuple[ModerationResult, ...]:
    rows = serde.get(answer, "results", list, "response")
    if len(rows) != inputs:
        raise InvalidDataError(f"response.results: {len(rows)} results for {inputs} inputs")
    return tuple(_result(serde.mapping(row, f"response.results[{i}]"), f"response.results[{i}]")
                 for i, row in enumerate(rows))


def _result(row: Mapping[str, Any], where: str) -> ModerationResult:
    return ModerationResult(flagged=serde.get(row, "flagged", bool, where),
                            categories=serde.get(row, "categories", dict, where),
                            scores=serde.get(row, "category_scores", dict, where))


def _usage(answer: Mapping[str, Any], provider: str, model: str) -> Usage:
    body = UsageBody.of(answer.get("usage"), provider=provider, model=model)
    return body.usage(input_tokens=body.count("prompt_tokens") or body.count("total_tokens"))
