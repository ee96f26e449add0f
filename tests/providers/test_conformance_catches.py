"""The conformance suite catches the bugs a mutation study found it blind to.

Each broken copy below is a real adapter with one method overridden to hold one realistic bug.
Each case runs the conformance test that must catch it twice: against the copy, where it must
fail, and against a sound adapter (the real one, or a sound copy where the real one has the bug
itself), where it must pass, so a failure is the bug's and not the harness's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, cast

import attrs
import pytest

import tests.providers.test_anthropic as anthropic_tests
import tests.providers.test_cohere as cohere_tests
import tests.providers.test_openai as openai_tests
from provmw.config import OWNED_BODY_KEYS, ProviderConfig
from provmw.errors import ConfigurationError, InvalidRequestError, MalformedResponseError, UnsupportedOperationError
from provmw.http import HttpClient, SSEEvent
from provmw.providers import ProviderAdapter
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.requests import ChatRequest, EmbeddingRequest
from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse, RateLimitHint
from provmw.testing import AdapterConformance, FakeProvider
from tests.providers.broken_operations import (
    CohereOneBasedIndex,
    CohereResultsInDocumentOrder,
    ModerationUndeclaredStillSent,
    OpenAIImagesBilledAtStandard,
    OpenAIModerationMergesExtraBody,
    OpenAIUploadErrorsAsUnavailable,
    OpenAIWithoutModeration,
)

OPENAI: type[AdapterConformance] = openai_tests.TestOpenAIConformance
ANTHROPIC: type[AdapterConformance] = anthropic_tests.TestAnthropicConformance
COHERE: type[AdapterConformance] = cohere_tests.TestCohereConformance


# 1. Embeddings: every position, not only the middle of three.
class ReversedEmbeddings(OpenAIAdapter):
    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        response = await super().embed(http, config, request)
        return attrs.evolve(response, vectors=response.vectors[::-1])  # rows sorted on the wrong key


class LastEmbeddingTwice(OpenAIAdapter):
    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        response = await super().embed(http, config, request)
        return attrs.evolve(response, vectors=(*response.vectors, response.vectors[-1]))  # a batch joined twice


# 2. A stream that ends cleanly without its final event.
class OpenAIEndOfBodyIsDone(OpenAIAdapter):
    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        try:
            async for chunk in super().stream_chat(http, config, request):
                yield chunk
        except MalformedResponseError as error:
            if "[DONE]" not in str(error):
                raise
            yield ChatChunk(finish_reason="stop")  # the end of the body taken for the end of the answer


class AnthropicFinishIsTheEnd(AnthropicAdapter):
    async def stream_chat(self, http: HttpClient, config: ProviderConfig,
                          request: ChatRequest) -> AsyncIterator[ChatChunk]:
        async for chunk in super().stream_chat(http, config, request):
            yield chunk
            if chunk.finish_reason is not None:
                return  # message_stop never awaited


# 3. Wrongly typed fields of an answer: each copy reads the JSON with one sloppy step before the real
# adapter's checked reading, so all else about it is sound.
def _counts_as_int(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _counts_as_int(item) for key, item in value.items()}
    return int(value) if isinstance(value, str) and value.isdigit() else value


class OpenAITextAsStr(OpenAIAdapter):
    async def _post(self, http: HttpClient, config: ProviderConfig, path: str,
                    body: Mapping[str, Any]) -> tuple[Any, RateLimitHint | None]:
        data, hint = await super()._post(http, config, path, body)
        for choice in data.get("choices", ()):
            if choice.get("message", {}).get("content") is not None:
                choice["message"]["content"] = str(choice["message"]["content"])
        return data, hint


class OpenAICountsAsInt(OpenAIAdapter):
    async def _post(self, http: HttpClient, config: ProviderConfig, path: str,
                    body: Mapping[str, Any]) -> tuple[Any, RateLimitHint | None]:
        data, hint = await super()._post(http, config, path, body)
        return {**data, "usage": _counts_as_int(data["usage"])}, hint


class JSONReadFirst:
    """An ``HttpClient`` whose JSON answers go through ``read`` first: the sloppy step of the copies below."""

    def __init__(self, http: HttpClient, read: Callable[[Any], None]) -> None:
        self._http, self._read = http, read

    async def post_json_with_headers(self, url: str, body: Mapping[str, Any],
                                     headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        data, answered = await self._http.post_json_with_headers(url, body, headers)
        self._read(data)
        return data, answered


def _joined_text(data: Any) -> None:
    data["text"] = "".join(block["text"] for block in data["content"] if block["type"] == "text")  # TypeError on 42


def _text_as_str(data: Any) -> None:
    for block in data["content"]:
        if block["type"] == "text":
            block["text"] = str(block["text"])  # a null text becomes "None"


class AnthropicTextJoinedUnchecked(AnthropicAdapter):
    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        return await super().chat(cast(HttpClient, JSONReadFirst(http, _joined_text)), config, request)


class AnthropicNullTextAsStr(AnthropicAdapter):
    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        return await super().chat(cast(HttpClient, JSONReadFirst(http, _text_as_str)), config, request)


# 4. Options, the system prompt and images on the wire.
class OpenAIWithoutTemperature(OpenAIAdapter):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        body = super().chat_body(config, request)
        body.pop("temperature", None)  # an option table that forgot one
        return body


class AnthropicWithoutSystem(AnthropicAdapter):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        body = super().chat_body(config, request)
        body.pop("system", None)  # system turns skipped from the messages and never put in "system"
        return body


class AnthropicWithoutStop(AnthropicAdapter):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        body = super().chat_body(config, request)
        body.pop("stop_sequences", None)
        return body


class OpenAIEmptyImageData(OpenAIAdapter):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        body = super().chat_body(config, request)
        for message in body["messages"]:
            for part in message["content"] if isinstance(message["content"], list) else ():
                if part["type"] == "image_url" and part["image_url"]["url"].startswith("data:"):
                    part["image_url"]["url"] = part["image_url"]["url"].split(",")[0] + ","  # the data forgotten
        return body


class OpenAIStreamsWithoutImages(OpenAIAdapter):
    def stream_chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        texts = tuple(attrs.evolve(message, content=message.text) for message in request.messages)
        return super().stream_chat(http, config, attrs.evolve(request, messages=texts))  # a text-only stream path


# 5. extra_body and what the call was priced on. The real adapters refuse it (provmw.wire.with_extra_body);
# the broken copies merge it over their own fields, as the adapters once did, guarding too little.
class OpenAIMergesExtraBody(OpenAIAdapter):
    guarded: frozenset[str] = frozenset()

    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        extra = dict({**config.options, **request.options}.get("extra_body") or {})
        if owned := sorted(self.guarded.intersection(self.checked(config, request))):
            raise ConfigurationError(f"options.extra_body may not set {', '.join(owned)}")
        body = super().chat_body(_without_extra(config), _without_extra(request))
        body.update(extra)  # over what it wrote: the bug
        return body

    def checked(self, config: ProviderConfig, request: ChatRequest) -> Mapping[str, Any]:
        return dict({**config.options, **request.options}.get("extra_body") or {})


def _without_extra(value: Any) -> Any:
    return attrs.evolve(value, options={k: v for k, v in value.options.items() if k != "extra_body"})


class GuardForgetsStream(OpenAIMergesExtraBody):
    guarded = OWNED_BODY_KEYS - {"stream", "stream_options"}  # chat never writes them, so none were listed


class GuardReadsTheConfigOnly(OpenAIMergesExtraBody):
    guarded = OWNED_BODY_KEYS

    def checked(self, config: ProviderConfig, request: ChatRequest) -> Mapping[str, Any]:
        return dict(config.options.get("extra_body") or {})  # the call's own extra_body goes unchecked


class OpenAIWithoutExtraBody(OpenAIAdapter):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        return super().chat_body(config, _without_extra(request))  # safe by sending none of it


# 6. Framing split across reads.
class WholeEventsPerRead:
    """An ``HttpClient`` whose SSE reading takes each read for whole events: the bug of the copies below."""

    def __init__(self, http: HttpClient) -> None:
        self._http = http

    def post_sse_with_headers(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str],
                              **_: Any) -> AsyncIterator[SSEEvent]:
        return self._events(url, body, headers)

    async def _events(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str]) -> AsyncIterator[SSEEvent]:
        async for read in self._http.post_stream(url, body, headers):
            for block in read.decode().split("\n\n"):
                fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
                if "data" in fields:
                    yield SSEEvent(fields["data"], fields.get("event", "message"))


class OpenAIEventPerRead(OpenAIAdapter):
    def stream_chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return super().stream_chat(cast(HttpClient, WholeEventsPerRead(http)), config, request)


class AnthropicEventPerRead(AnthropicAdapter):
    def stream_chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return super().stream_chat(cast(HttpClient, WholeEventsPerRead(http)), config, request)


# 7. Images by URL and inline bytes, capabilities apart.
class BytesOnly(OpenAIAdapter):
    """Sound: it takes inline bytes only, and refuses an image by URL before sending."""

    capabilities = attrs.evolve(OpenAIAdapter.capabilities, vision_url=False)

    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        if any(image.url is not None for message in request.messages for image in message.images):
            raise UnsupportedOperationError(self.name, "vision_url", configuration=config.identifier)
        return super().chat_body(config, request)


class BytesOnlySendsURLs(OpenAIAdapter):
    capabilities = attrs.evolve(OpenAIAdapter.capabilities, vision_url=False)  # declared, not enforced


class BytesOnlyRefusesEveryImage(BytesOnly):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        if any(message.images for message in request.messages):
            raise UnsupportedOperationError(self.name, "vision", configuration=config.identifier)
        return super().chat_body(config, request)


class BytesOnlyRefusesAsInvalid(BytesOnly):
    def chat_body(self, config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
        try:
            return super().chat_body(config, request)
        except UnsupportedOperationError:
            raise InvalidRequestError("image URLs are not supported", provider=self.name) from None


@attrs.frozen
class Case:
    """A broken copy, its blind spot, the conformance test (and its arguments) that must catch it,
    and the sound adapter that passes that test (the suite's own by default)."""

    broken: type[ProviderAdapter]
    spot: int
    suite: type[AdapterConformance]
    test: str
    arguments: Mapping[str, Any] = {}
    sound: ProviderAdapter | None = None


_OWNED = dict(OPENAI.owned_extra_body)
_EXTRA = "test_extra_body_cannot_replace_what_the_call_was_priced_on"
_BILLED = "test_an_operation_answers_typed_and_billed_in_its_units"
_RANKED = "test_rerank_ranks_the_best_documents_first_once_each"
CASES = {case.broken.__name__: case for case in (
    Case(ReversedEmbeddings, 1, OPENAI, "test_embeddings_come_in_input_order"),
    Case(LastEmbeddingTwice, 1, OPENAI, "test_embeddings_come_in_input_order"),
    Case(OpenAIEndOfBodyIsDone, 2, OPENAI, "test_a_stream_that_ends_before_its_last_event_raises", {"withheld": 1}),
    Case(AnthropicFinishIsTheEnd, 2, ANTHROPIC, "test_a_stream_that_ends_before_its_last_event_raises",
         {"withheld": 1}),
    Case(OpenAITextAsStr, 3, OPENAI, "test_a_number_in_place_of_the_text_is_a_malformed_response"),
    Case(OpenAICountsAsInt, 3, OPENAI, "test_a_token_count_as_text_is_a_malformed_response", {"streaming": False}),
    Case(AnthropicTextJoinedUnchecked, 3, ANTHROPIC, "test_a_number_in_place_of_the_text_is_a_malformed_response"),
    Case(AnthropicNullTextAsStr, 3, ANTHROPIC, "test_a_null_in_place_of_the_text_is_malformed_or_no_text"),
    Case(OpenAIWithoutTemperature, 4, OPENAI, "test_generation_options_reach_the_wire", {"streaming": False}),
    Case(AnthropicWithoutSystem, 4, ANTHROPIC, "test_the_system_prompt_reaches_the_wire", {"streaming": True}),
    Case(AnthropicWithoutStop, 4, ANTHROPIC, "test_generation_options_reach_the_wire", {"streaming": False}),
    Case(OpenAIEmptyImageData, 4, OPENAI, "test_an_image_reaches_the_wire_whole",
         {"kind": "bytes", "streaming": False}),
    Case(OpenAIStreamsWithoutImages, 4, OPENAI, "test_an_image_reaches_the_wire_whole",
         {"kind": "url", "streaming": True}),
    Case(GuardForgetsStream, 5, OPENAI, _EXTRA, {"owned": ("stream", _OWNED["stream"]), "streaming": False},
         sound=OpenAIAdapter()),
    Case(GuardReadsTheConfigOnly, 5, OPENAI, _EXTRA, {"owned": ("model", _OWNED["model"]), "streaming": False},
         sound=OpenAIAdapter()),
    Case(OpenAIWithoutExtraBody, 5, OPENAI, "test_extra_body_fields_reach_the_wire", {"streaming": False}),
    Case(OpenAIEventPerRead, 6, OPENAI, "test_events_split_across_reads_still_parse"),
    Case(AnthropicEventPerRead, 6, ANTHROPIC, "test_events_split_across_reads_still_parse"),
    Case(BytesOnlySendsURLs, 7, OPENAI, "test_an_image_it_does_not_take_is_refused_before_any_request",
         {"kind": "url"}, sound=BytesOnly()),
    Case(BytesOnlyRefusesEveryImage, 7, OPENAI, "test_an_image_reaches_the_wire_whole",
         {"kind": "bytes", "streaming": False},
         sound=BytesOnly()),
    Case(BytesOnlyRefusesAsInvalid, 7, OPENAI, "test_an_image_it_does_not_take_is_refused_before_any_request",
         {"kind": "url"}, sound=BytesOnly()),
    Case(OpenAIImagesBilledAtStandard, 8, OPENAI, _BILLED, {"operation": "images"}),
    Case(CohereResultsInDocumentOrder, 8, COHERE, _RANKED),
    Case(CohereOneBasedIndex, 8, COHERE, _RANKED),
    Case(OpenAIUploadErrorsAsUnavailable, 8, OPENAI, "test_an_operation_error_status_maps_onto_the_tree",
         {"operation": "transcription", "code": 400}),
    Case(OpenAIModerationMergesExtraBody, 8, OPENAI,
         "test_an_operations_extra_body_cannot_replace_what_it_was_priced_on",
         {"op_owned": ("moderation:input", OPENAI.owned_operation_body["moderation:input"])}),
    Case(ModerationUndeclaredStillSent, 8, OPENAI,
         "test_an_operation_it_does_not_declare_is_refused_before_any_request",
         {"operation": "moderation"}, sound=OpenAIWithoutModeration()),
)}


async def outcome(suite: type[AdapterConformance], adapter: ProviderAdapter, test: str,
                  arguments: Mapping[str, Any]) -> str:
    """How one conformance test ends for ``adapter``: passed, failed or skipped."""
    runner = type(f"Run{suite.__name__}", (suite,), {"adapter": adapter})()
    async with FakeProvider() as fake:
        http = HttpClient()
        try:
            await getattr(runner, test)(fake=fake, http=http, **arguments)
        except pytest.skip.Exception:
            return "skipped"
        except (Exception, pytest.fail.Exception):  # an assertion, a DID NOT RAISE, or an error escaping
            return "failed"
        finally:
            await http.aclose()
    return "passed"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
async def test_the_suite_fails_the_broken_copy(case: Case) -> None:
    assert await outcome(case.suite, case.broken(), case.test, case.arguments) == "failed"


@pytest.mark.parametrize("case", CASES.values(), ids=CASES)
async def test_a_sound_adapter_passes_the_test_that_catches_it(case: Case) -> None:
    sound = case.sound if case.sound is not None else case.suite.adapter
    assert await outcome(case.suite, sound, case.test, case.arguments) == "passed"


def test_every_blind_spot_has_broken_copies() -> None:
    assert sorted({case.spot for case in CASES.values()}) == [1, 2, 3, 4, 5, 6, 7, 8]


class TestABytesOnlyAdapterPassesTheWholeSuite(openai_tests.TestOpenAIConformance):
    """No test of images by bytes is skipped or marked for it: only the URL ones stand aside."""

    adapter = BytesOnly()
