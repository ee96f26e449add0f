"""``AzureWire``: Azure OpenAI's wire for ``provmw.testing.FakeProvider``.

It answers as the OpenAI wire does, on Azure's deployment routes (the deployment is the
path's ``{model}``), with Azure's additions: ``prompt_filter_results`` and per-choice
``content_filter_results`` verdicts, a first stream event that carries only the prompt's
verdicts, Azure's error bodies, and its content filter. The filter withholds any answer to a
last user message holding one of ``filtered_words`` (HTTP 200, ``finish_reason:
"content_filter"``, ``violence`` filtered); ``Fault(status=400, code="content_filter")``
is a refused prompt, with its verdicts in ``innererror`` (``inner_error`` on the images
route, as Azure's image generation words it). The media routes (images made and
edited, transcription, speech) answer as OpenAI's (``provmw.testing.wire_media``), an image
with Azure's verdicts on it::

    async with FakeProvider(wires=[AzureWire(filtered_words=("kaboom",))]) as fake:
        config = ProviderConfig(identifier="a", provider="azure", model="gpt-4o-prod",
                                base_url=fake.url, api_key="k")
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from provmw.testing import OpenAIWire, Tokenizer, sse
from provmw.testing.wire_media import FakeBinary, OpenAIMediaWire
from provmw.testing.wire_responses import ResponsesWire

__all__ = ["AzureWire", "verdicts"]

_DEPLOYMENT = "/openai/deployments/{model}"
_OPENAI_ROUTES = {"azure_chat": "chat", "azure_completion": "completion", "azure_embedding": "embedding"}
# Each media route of Azure's and the OpenAI media wire's route that answers it.
_MEDIA_ROUTES = {"azure_images": "images", "azure_image_edits": "image_edits",
                 "azure_transcriptions": "transcriptions", "azure_speech": "speech"}
_CATEGORIES = ("hate", "self_harm", "sexual", "violence")


def verdicts(filtered: Iterable[str] = ()) -> dict[str, Any]:
    """Azure's verdicts object: every category ``safe`` but those ``filtered`` (severity high)."""
    chosen = set(filtered)
    return {name: {"filtered": True, "severity": "high"} if name in chosen else {"filtered": False, "severity": "safe"}
            for name in _CATEGORIES}


class AzureWire(OpenAIWire):
    """Azure OpenAI's deployment routes for chat completions, completions, embeddings and media."""

    routes: Mapping[str, str] = {"azure_chat": f"{_DEPLOYMENT}/chat/completions",
                                 "azure_completion": f"{_DEPLOYMENT}/completions",
                                 "azure_embedding": f"{_DEPLOYMENT}/embeddings",
                                 "azure_responses": "/openai/v1/responses",
                                 "azure_images": f"{_DEPLOYMENT}/images/generations",
                                 "azure_image_edits": f"{_DEPLOYMENT}/images/edits",
                                 "azure_transcriptions": f"{_DEPLOYMENT}/audio/transcriptions",
                                 "azure_speech": f"{_DEPLOYMENT}/audio/speech"}

    def __init__(self, filtered_words: Iterable[str] = ()) -> None:
        self._filtered_words = tuple(w.lower() for w in filtered_words)
        self._responses = ResponsesWire()  # the v1 Responses route answers as OpenAI's, the deployment in the body
        self._media = OpenAIMediaWire()  # the media routes answer as OpenAI's, on the deployment's path

    def streams(self, route: str, body: Mapping[str, Any]) -> bool:
        return route not in _MEDIA_ROUTES and super().streams(route, body)

    def model(self, route: str, path_model: str | None, body: Mapping[str, Any]) -> str:
        return path_model or str(body.get("model", ""))

    def answer(self, route: str, body: Mapping[str, Any], count: Tokenizer) -> Any:
        """JSON, or a ``FakeBinary`` (speech; a transcript asked for as text)."""
        if route == "azure_responses":
            return self._responses.answer("responses", body, count)
        if route in _MEDIA_ROUTES:
            return _with_image_verdicts(self._media.answer(_MEDIA_ROUTES[route], body, count))
        payload = super().answer(_OPENAI_ROUTES[route], body, count)
        if route == "azure_embedding":
            return payload
        blocked = self._blocked(body)
        for choice in payload["choices"]:
            choice["content_filter_results"] = verdicts(["violence"] if blocked else ())
            if blocked:
                choice["finish_reason"] = "content_filter"
                if "message" in choice:
                    choice["message"] = {"role": "assistant", "content": None}
                else:
                    choice["text"] = ""
        return {**payload, "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": verdicts()}]}

    def with_usage(self, payload: Any, usage: Mapping[str, Any]) -> Any:
        """A fault's usage replaces a JSON answer's; bytes carry none."""
        return payload if isinstance(payload, FakeBinary) else super().with_usage(payload, usage)

    def frames(self, route: str, body: Mapping[str, Any], payload: Mapping[str, Any]) -> list[bytes]:
        if route == "azure_responses":
            return self._responses.frames("responses", body, payload)
        prompt = {"choices": [], "prompt_filter_results": payload["prompt_filter_results"]}
        annotated = [sse(json.dumps(prompt))]
        for frame in super().frames(route, body, payload):
            annotated.append(_with_verdicts(frame, payload["choices"][0]["content_filter_results"]))
        return annotated

    def error_body(self, route: str, status: int, code: str | None, message: str) -> dict[str, Any]:
        error: dict[str, Any] = {"code": code or str(status), "message": message, "param": None, "type": None,
                                 "status": status}
        if code == "content_filter" and route == "azure_images":
            # Image generation words its refusals as the OpenAI images API does, its verdicts apart.
            error.update(code="content_policy_violation", inner_error={
                "code": "ResponsibleAIPolicyViolation", "content_filter_results": verdicts(["hate"])})
        elif code == "content_filter":
            error.update(param="prompt", innererror={"code": "ResponsibleAIPolicyViolation",
                                                     "content_filter_result": verdicts(["hate"])})
        return {"error": error}

    def error_frame(self, route: str, code: str | None, message: str) -> bytes:
        if route == "azure_responses":
            return self._responses.error_frame("responses", code, message)
        return sse(json.dumps(self.error_body(route, 500, code or "server_error", message)))

    def _blocked(self, body: Mapping[str, Any]) -> bool:
        text = json.dumps(body.get("messages", [])[-1:] or body.get("prompt", "")).lower()
        return any(word in text for word in self._filtered_words)


def _with_image_verdicts(payload: Any) -> Any:
    """An images answer with each image's and its prompt's verdicts, as Azure sends them; others as they are."""
    if not (isinstance(payload, dict) and isinstance(payload.get("data"), list)):
        return payload
    safe = {"content_filter_results": verdicts(), "prompt_filter_results": verdicts()}
    return {**payload, "data": [{**row, **safe} for row in payload["data"]]}


def _with_verdicts(frame: bytes, results: Mapping[str, Any]) -> bytes:
    """A chat chunk event with each choice's verdicts, as Azure sends them; others as they are."""
    data = frame.decode().removeprefix("data: ").strip()
    if not data.startswith("{"):
        return frame
    event = json.loads(data)
    for choice in event.get("choices", []):
        choice["content_filter_results"] = dict(results)
    return sse(json.dumps(event))
