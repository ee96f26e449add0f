"""What Azure says differently from OpenAI: content-filter verdicts and error bodies.

An answer Azure's content filter withheld is HTTP 200 with ``finish_reason: "content_filter"``
and the verdicts in the choice's ``content_filter_results``; a prompt it refused is HTTP 400
with ``code: "content_filter"`` and the verdicts in ``innererror.content_filter_result`` (an
image prompt: ``inner_error.content_filter_results``). Each becomes a ``ContentPolicyError``
naming the filtered categories. Error bodies come as ``{"error": {"code", "message",
"innererror"}}``, with numeric codes (``"429"``), or from the gateway in front as
``{"statusCode", "message"}``; ``openai_error`` rewrites each in the shape the OpenAI
adapter's error table reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from provmw.errors import ContentPolicyError
from provmw.http import HttpStatusError, decode_json

__all__ = ["filtered_answer", "filtered_categories", "openai_error"]

_POLICY_VIOLATION = "ResponsibleAIPolicyViolation"
_MASK = "***"


def filtered_categories(results: object) -> list[str]:
    """The categories a verdicts object reports as filtered: ``hate (high)``, ``jailbreak``,
    ``custom_blocklists (my-list)``."""
    if not isinstance(results, Mapping):
        return []
    found: list[str] = []
    for name, verdict in results.items():
        if isinstance(verdict, Mapping) and verdict.get("filtered") is True:
            severity = verdict.get("severity")
            found.append(f"{name} ({severity})" if isinstance(severity, str) else str(name))
        elif isinstance(verdict, list):  # custom blocklists: one verdict per list
            lists = [str(b.get("id")) for b in verdict if isinstance(b, Mapping) and b.get("filtered") is True]
            found += [f"{name} ({', '.join(lists)})"] if lists else []
    return found


def _naming(categories: list[str]) -> str:
    return f" (filtered: {', '.join(categories)})" if categories else ""


def filtered_answer(data: Any, *, provider: str, model: str) -> ContentPolicyError | None:
    """The error for an answer (or stream event) whose choice the content filter ended, else None."""
    choices = data.get("choices") if isinstance(data, Mapping) else None
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, Mapping) and choice.get("finish_reason") == "content_filter":
            categories = filtered_categories(choice.get("content_filter_results"))
            return ContentPolicyError(f"Azure's content filter withheld the answer{_naming(categories)}",
                                      provider=provider, model=model, code="content_filter")
    return None


def openai_error(exc: HttpStatusError, *, not_found_hint: str, secrets: Iterable[str]) -> HttpStatusError:
    """``exc`` with its body in the OpenAI shape, the filtered categories and hints in its message,
    and ``secrets`` masked; its URL is dropped, since the message says what a 404 means here."""
    code, message = _code_and_message(exc.body)
    if exc.status == 404:
        message = f"{message}{not_found_hint}"
    for secret in secrets:
        message = message.replace(secret, _MASK)
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return HttpStatusError(exc.status, body, exc.headers)


def _code_and_message(raw: bytes) -> tuple[str | None, str]:
    try:
        body = decode_json(raw)
    except ValueError:
        return None, raw[:200].decode("utf-8", errors="replace").strip() or "no error message"
    error = body.get("error", body) if isinstance(body, Mapping) else {}
    error = error if isinstance(error, Mapping) else {"message": str(error)}
    message = error.get("message")
    message = message if isinstance(message, str) and message else "no error message"
    # Chat's errors say innererror.content_filter_result; image generation's, inner_error.content_filter_results.
    inner = error.get("innererror", error.get("inner_error"))
    inner = inner if isinstance(inner, Mapping) else {}
    code = error.get("code")
    if inner.get("code") == _POLICY_VIOLATION:
        code = "content_filter"
    elif not isinstance(code, str) or code.isdigit():  # "429": the status says as much
        code = None
    results = inner.get("content_filter_result", inner.get("content_filter_results"))
    return code, message + _naming(filtered_categories(results))
