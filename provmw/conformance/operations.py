"""Conformance of the operations beyond chat: Responses, images made and edited, transcription,
speech, rerank and moderation, each as its capability says.

An operation the adapter does not declare is refused before any request (or, where the adapter
lacks its method, the case says so and stands aside: the terminal never calls an undeclared
operation). One it declares answers a typed response, billed in the operation's units, maps its
route's error statuses onto the tree as chat does, refuses a body that is not JSON or holds a
mistyped field, and keeps ``extra_body`` from replacing what the call was priced on.

A subclass points each operation at its fake: ``operation_routes`` (the fake's route names, for
faults), ``operation_models`` (the model each is called with, through ``operation_config``), and
extends ``operation_mistyped`` and ``owned_operation_body`` with what its wire documents.
"""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs
import pytest

from provmw.config import ProviderConfig
from provmw.conformance.base import HELLO, ConformanceBase
from provmw.errors import (
    ConfigurationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.http import HttpClient
from provmw.operations import response_types
from provmw.operations.audio import SpeechRequest, TranscriptionRequest
from provmw.operations.images import ImageEditRequest, ImageRequest
from provmw.operations.moderation import ModerationRequest
from provmw.operations.rerank import RerankRequest
from provmw.operations.responses_api import ResponsesRequest
from provmw.testing import FakeProvider, Fault
from provmw.testing.wire_media import PNG_1X1

__all__ = ["METHODS", "OperationTests"]

# Each operation's capability, the adapter method that serves it, and its response's TYPE.
METHODS: Mapping[str, tuple[str, str]] = {
    "responses": ("respond", "responses"), "images": ("generate_image", "image"),
    "image_edits": ("edit_image", "image"), "transcription": ("transcribe", "transcription"),
    "speech": ("speak", "speech"), "rerank": ("rerank", "rerank"), "moderation": ("moderate", "moderation"),
}
_EACH = pytest.mark.parametrize("operation", list(METHODS))


def _silence(seconds: int, rate: int = 8000) -> bytes:
    """A mono 16-bit WAV file of ``seconds`` of silence."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(bytes(2 * rate * seconds))
    return buffer.getvalue()


_AUDIO = _silence(2)
_SPOKEN = "hello world"
# The query's best document is not the first given: a ranking in input order shows.
_DOCUMENTS = ("apple pie", "green pear", "a red apple")
_TRANSCRIPT = f"fake transcript of {len(_AUDIO)} bytes"  # what the fake hears in _AUDIO
REQUESTS: Mapping[str, Any] = {
    "responses": ResponsesRequest(input=HELLO.messages[-1].text),
    "images": ImageRequest(prompt="a red apple", size="1536x1024", quality="medium", n=2),
    "image_edits": ImageEditRequest(prompt="make it red", image=PNG_1X1, size="1536x1024", quality="medium", n=2),
    "transcription": TranscriptionRequest(audio=_AUDIO, filename="clip.wav"),
    "speech": SpeechRequest(text=_SPOKEN, audio_format="wav"),
    "rerank": RerankRequest(query="red apple", documents=_DOCUMENTS, top_n=2),
    "moderation": ModerationRequest(("hello there", "I will kill it")),
}
# What each answer to REQUESTS says, and the units it is billed in (the fake's deterministic answers).
_SAID: Mapping[str, tuple[Callable[[Any], Any], Any]] = {
    "responses": (lambda r: (r.text, r.finish_reason, r.usage.input_tokens, r.usage.output_tokens),
                  ("echo: hello world", "stop", 2, 3)),
    "images": (lambda r: [image.data or image.url for image in r.images], [PNG_1X1, PNG_1X1]),
    "image_edits": (lambda r: [image.data or image.url for image in r.images], [PNG_1X1, PNG_1X1]),
    "transcription": (lambda r: r.text, _TRANSCRIPT),
    "speech": (lambda r: (r.media_type, r.audio[:4]), ("audio/wav", b"RIFF")),
    "rerank": (lambda r: r.indexes, (2, 0)),
    "moderation": (lambda r: [result.flagged for result in r.results], [False, True]),
}
_UNITS: Mapping[str, Mapping[str, float]] = {
    "responses": {}, "images": {"image:1536x1024:medium": 2}, "image_edits": {"image:1536x1024:medium": 2},
    "transcription": {"audio_second": 2}, "speech": {"character": len(_SPOKEN)}, "rerank": {"search_unit": 1},
    "moderation": {},  # free
}
_STATUSES = pytest.mark.parametrize("code", [400, 401, 429, 500])


def _owned(operation: str, **fields: Any) -> dict[str, tuple[str, Mapping[str, Any]]]:
    return {f"{operation}:{name}": (operation, {name: value}) for name, value in fields.items()}


class OperationTests(ConformanceBase):
    """Each operation beyond chat as the adapter's capabilities declare it."""

    # The fake's route of each operation (the key of its faults and counts).
    operation_routes: ClassVar[Mapping[str, str]] = {
        "responses": "responses", "images": "images", "image_edits": "image_edits",
        "transcription": "transcriptions", "speech": "speech", "rerank": "rerank", "moderation": "moderations"}
    # The model each operation is called with (none: the configuration's own).
    operation_models: ClassVar[Mapping[str, str]] = {
        "images": "gpt-image-1", "image_edits": "gpt-image-1", "transcription": "whisper-1", "speech": "tts-1",
        "rerank": "rerank-v3.5", "moderation": "omni-moderation-latest"}
    # The prefix of the response_id each wire gives (none: the wire gives no id).
    operation_ids: ClassVar[Mapping[str, str]] = {"responses": "resp_", "rerank": "rerank-fake",
                                                  "moderation": "modr-fake"}
    # A fault each that mistypes a field of the answer the adapter reads (none: the answer is bytes).
    operation_mistyped: ClassVar[Mapping[str, Fault | None]] = {
        "responses": Fault(replace={"echo: hello world": 42}),
        "images": Fault(replace={base64.b64encode(PNG_1X1).decode(): 42}),
        "image_edits": Fault(replace={base64.b64encode(PNG_1X1).decode(): 42}),
        "transcription": Fault(replace={_TRANSCRIPT: 42}),
        "speech": None,
        "rerank": Fault(usage={"search_units": "1"}),
        "moderation": Fault(replace={"modr-fake": 42}),
    }
    # An extra_body each that names a field the operation's call was priced on.
    owned_operation_body: ClassVar[Mapping[str, tuple[str, Mapping[str, Any]]]] = {
        **_owned("responses", model="not-the-priced-model", input="not what was priced", max_output_tokens=77_777),
        **_owned("images", model="not-the-priced-model", size="1024x1024", quality="high", n=10),
        **_owned("image_edits", model="not-the-priced-model", size="1024x1024", quality="high", n=10),
        **_owned("transcription", model="not-the-priced-model"),
        **_owned("speech", model="not-the-priced-model", input="not what was priced " * 100),
        **_owned("rerank", model="not-the-priced-model", query="not what was priced",
                 documents=["not", "what", "was", "priced"], top_n=4),
        **_owned("moderation", model="not-the-priced-model", input=["not what was", "priced"]),  # as many inputs
    }

    def operation_config(self, fake: FakeProvider, operation: str) -> ProviderConfig:
        """The configuration ``operation`` is called on: ``config(fake)`` with its model."""
        config = self.config(fake)
        model = self.operation_models.get(operation)
        return config if model is None else attrs.evolve(config, model=model)

    async def call(self, fake: FakeProvider, http: HttpClient, operation: str, **options: Any) -> Any:
        """The adapter's answer to ``operation``'s request (with ``options``), on its configuration."""
        request = REQUESTS[operation]
        if options:
            request = attrs.evolve(request, options=options)
        method = getattr(self.adapter, METHODS[operation][0])
        return await method(http, self.operation_config(fake, operation), request)

    def serves(self, operation: str) -> None:
        """Skip unless the adapter declares ``operation``; fail if it declares it without the method."""
        self.needs(operation)
        assert callable(getattr(self.adapter, METHODS[operation][0], None)), \
            f"{self.adapter.name} declares {operation} but has no {METHODS[operation][0]}"

    def test_each_operation_it_declares_is_a_method_it_has(self) -> None:
        declared = self.offers
        assert [name for name in METHODS if type(getattr(declared, name)) is not bool] == []
        assert [name for name, (method, _) in METHODS.items()
                if getattr(declared, name) and not callable(getattr(self.adapter, method, None))] == []
        assert declared.chat or any(getattr(declared, name) for name in METHODS), "it declares no operation"

    async def test_chat_it_does_not_offer_is_refused_before_any_request(
            self, fake: FakeProvider, http: HttpClient) -> None:
        if self.offers.chat:
            pytest.skip(f"{self.adapter.name} offers chat: the chat cases test it")
        config = self.config(fake)
        with pytest.raises(UnsupportedOperationError, match="chat"):
            await self.adapter.chat(http, config, HELLO)
        with pytest.raises(UnsupportedOperationError, match="chat"):
            await anext(self.adapter.stream_chat(http, config, HELLO))
        assert fake.count() == 0

    @_EACH
    async def test_an_operation_it_does_not_declare_is_refused_before_any_request(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        if getattr(self.offers, operation):
            pytest.skip(f"{self.adapter.name} declares {operation}: there is nothing to refuse")
        if not callable(getattr(self.adapter, METHODS[operation][0], None)):
            pytest.skip(f"{self.adapter.name} neither declares {operation} nor has {METHODS[operation][0]}: "
                        "the terminal never calls it")
        with pytest.raises(UnsupportedOperationError):
            await self.call(fake, http, operation)
        assert fake.count() == 0

    @_EACH
    async def test_an_operation_answers_typed_and_billed_in_its_units(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        self.serves(operation)
        config = self.operation_config(fake, operation)
        response = await self.call(fake, http, operation)
        assert type(response) is response_types()[METHODS[operation][1]]
        assert (response.provider, response.model, response.served_by) == (
            self.adapter.name, config.model, config.identifier)
        said, expected = _SAID[operation]
        assert said(response) == expected
        assert dict(response.usage.units) == _UNITS[operation]
        prefix = self.operation_ids.get(operation)
        assert prefix is None or str(response.response_id).startswith(prefix), response.response_id

    async def test_a_responses_stream_gives_text_then_a_last_chunk_with_finish_and_usage(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.serves("responses")
        config = self.operation_config(fake, "responses")
        stream = getattr(self.adapter, "stream_respond", None)
        assert callable(stream), f"{self.adapter.name} declares responses but has no stream_respond"
        chunks = [chunk async for chunk in stream(http, config, REQUESTS["responses"])]
        assert "".join(chunk.text for chunk in chunks) == "echo: hello world"
        last = chunks[-1]
        assert last.finish_reason == "stop"
        assert last.usage is not None
        assert (last.usage.input_tokens, last.usage.output_tokens) == (2, 3)

    async def test_rerank_ranks_the_best_documents_first_once_each(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.serves("rerank")
        results = (await self.call(fake, http, "rerank")).results
        scores = [result.relevance_score for result in results]
        assert scores == sorted(scores, reverse=True), "not best first"
        indexes = [result.index for result in results]
        assert len(set(indexes)) == len(indexes), f"a document ranked twice: {indexes}"
        assert [i for i in indexes if not 0 <= i < len(_DOCUMENTS)] == [], "an index outside the documents"
        assert [_DOCUMENTS[i] for i in indexes] == ["a red apple", "apple pie"], "not the query's best documents"

    @_STATUSES
    @_EACH
    async def test_an_operation_error_status_maps_onto_the_tree(
            self, fake: FakeProvider, http: HttpClient, operation: str, code: int) -> None:
        self.serves(operation)
        expected = {400: InvalidRequestError, **self.status_errors}[code]
        fake.script(Fault(status=code, message=f"boom {code}"), route=self.operation_routes[operation])
        with pytest.raises(ProviderError) as caught:
            await self.call(fake, http, operation)
        assert type(caught.value) is expected
        assert (caught.value.status, caught.value.provider) == (code, self.adapter.name)
        assert f"boom {code}" in str(caught.value)

    @_EACH
    async def test_an_operation_429_carries_its_retry_after(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        self.serves(operation)
        fake.script(Fault(status=429, headers={"retry-after": "4"}), route=self.operation_routes[operation])
        with pytest.raises(RateLimitError) as caught:
            await self.call(fake, http, operation)
        assert caught.value.retry_after_s == 4.0

    @_EACH
    async def test_an_operation_body_that_is_not_json_is_a_malformed_response(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        self.serves(operation)
        fake.script(Fault(malformed_json=True), route=self.operation_routes[operation])
        with pytest.raises(MalformedResponseError):
            await self.call(fake, http, operation)

    @_EACH
    async def test_an_operation_answer_with_a_mistyped_field_is_malformed_or_unread(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        """Refused, or (a field the adapter does not read) the same answer as without the fault."""
        self.serves(operation)
        fault = self.operation_mistyped.get(operation)
        if fault is None:
            pytest.skip(f"{operation}'s answer is bytes: it has no field to mistype")
        plain = await self.call(fake, http, operation)
        fake.script(fault, route=self.operation_routes[operation])
        try:
            response = await self.call(fake, http, operation)
        except MalformedResponseError:
            return
        assert response == plain, "a mistyped field was read as another value"

    async def test_an_operations_extra_body_cannot_replace_what_it_was_priced_on(
            self, fake: FakeProvider, http: HttpClient, op_owned: tuple[str, tuple[str, Mapping[str, Any]]]) -> None:
        """Refused before sending, or sent with every field the call writes itself as it was."""
        _, (operation, extra) = op_owned
        self.serves(operation)
        priced = {"max_tokens": 50} if operation == "responses" else {}
        plain = await self.call(fake, http, operation, **priced)
        first = fake.received[-1]
        try:
            response = await self.call(fake, http, operation, **priced, extra_body=dict(extra))
        except ConfigurationError:
            assert fake.count() == 1, "refused after sending it"
            return
        sent = fake.received[-1]
        assert sent.model == first.model
        assert {key: sent.body.get(key) for key in first.body} == first.body
        assert response == plain
