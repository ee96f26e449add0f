"""Conformance of the answers: chat, completion, tools, images, schemas, usage and embeddings,
and the refusal, before any request, of what the adapter does not offer."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable

import attrs
import pytest

from provmw.conformance.base import HELLO, TWO_CITIES, WEATHER, ConformanceBase, leaves
from provmw.errors import UnsupportedOperationError
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart
from provmw.providers import Capabilities
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
from provmw.testing import FakeProvider, Fault

__all__ = ["AnswerTests"]

_FORECAST = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
             "required": ["city", "days"], "additionalProperties": False}
_IMAGE_BYTES = b"\x89PNG conformance 7f3a"


class AnswerTests(ConformanceBase):
    """Each operation the adapter offers answers as documented; each it does not is refused."""

    def test_the_adapter_declares_its_capabilities(self) -> None:
        declared = getattr(self.adapter, "capabilities", None)
        assert isinstance(declared, Capabilities), f"capabilities must be a Capabilities, not {declared!r}"
        flags = attrs.asdict(declared)
        assert [name for name, value in flags.items() if type(value) is not bool] == []  # yes or no, never 1 or None
        assert declared.chat
        assert declared.vision == (declared.vision_url or declared.vision_bytes), "vision means by URL or bytes"

    async def test_chat_answers_text_and_usage(self, fake: FakeProvider, http: HttpClient) -> None:
        config = self.config(fake)
        response = await self.adapter.chat(http, config, HELLO)
        assert (response.text, response.finish_reason) == ("echo: hello world", "stop")
        assert (response.provider, response.served_by) == (self.adapter.name, config.identifier)
        assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 3)

    async def test_completion_answers_a_bare_prompt(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("completion")
        response = await self.adapter.complete(http, self.config(fake), CompletionRequest("once upon"))
        assert response.text == "echo: once upon"

    async def test_several_calls_of_one_tool_come_in_one_turn(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("tools")
        response = await self.adapter.chat(http, self.config(fake), TWO_CITIES)
        # the argument's name is the fake's choice (the declared "city", or a plugin fake's "query")
        assert [(c.name, list(json.loads(c.arguments).values())) for c in response.tool_calls] == [
            ("weather", ["Paris"]), ("weather", ["London"])]
        assert len({c.id for c in response.tool_calls}) == 2
        assert response.finish_reason == "tool_calls"

    async def test_tool_result_goes_back_for_an_answer(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("tools")
        config = self.config(fake)
        first = await self.adapter.chat(http, config, ChatRequest((Message.user("Paris"),), tools=(WEATHER,)))
        call = first.tool_calls[0]
        history = (Message.user("Paris"), Message.assistant(tool_calls=[call]), Message.tool(call.id, "sunny"))
        response = await self.adapter.chat(http, config, ChatRequest(history, tools=(WEATHER,)))
        assert (response.tool_calls, response.finish_reason) == ((), "stop")
        assert response.text.startswith("echo:")

    async def test_image_parts_reach_the_wire(self, fake: FakeProvider, http: HttpClient) -> None:
        if not (self.takes_images("url") and self.takes_images("bytes")):
            pytest.skip(f"{self.adapter.name} takes images one way only: the tests of each way apply")
        parts = (TextPart("what?"), ImagePart(url=self.image_url), ImagePart(data=b"abc"))
        response = await self.adapter.chat(http, self.config(fake), ChatRequest((Message.user(parts),)))
        assert response.text == "I see 2 images. echo: what?"

    @pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])
    @pytest.mark.parametrize("kind", ["url", "bytes"])
    async def test_an_image_reaches_the_wire_whole(self, fake: FakeProvider, http: HttpClient, kind: str,
                                                   streaming: bool) -> None:
        if not self.takes_images(kind):
            pytest.skip(f"{self.adapter.name} takes no image by {kind}: it must refuse one")
        if streaming:
            self.needs("streaming")
        image, sent = self._image(kind)
        answer = await self.answer(fake, http, ChatRequest((Message.user((TextPart("what?"), image)),)), streaming)
        assert answer.text.strip() == "I see 1 image. echo: what?"
        assert any(isinstance(leaf, str) and sent in leaf for leaf in leaves(fake.received[-1].body)), \
            f"the image's {kind} is nowhere in the body sent"

    @pytest.mark.parametrize("kind", ["url", "bytes"])
    async def test_an_image_it_does_not_take_is_refused_before_any_request(
            self, fake: FakeProvider, http: HttpClient, kind: str) -> None:
        if self.takes_images(kind):
            pytest.skip(f"{self.adapter.name} takes images by {kind}: there is nothing to refuse")
        image, _ = self._image(kind)
        with pytest.raises(UnsupportedOperationError, match="vision"):
            await self.adapter.chat(http, self.config(fake), ChatRequest((Message.user((TextPart("what?"), image)),)))
        assert fake.count() == 0

    async def test_a_response_schema_gets_a_json_answer_that_follows_it(
            self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("schema")
        request = ChatRequest((Message.user("Paris"),), response_schema=_FORECAST)
        response = await self.adapter.chat(http, self.config(fake), request)
        answer = json.loads(response.text)
        assert (set(answer), type(answer["city"]), type(answer["days"])) == ({"city", "days"}, str, int)
        assert (response.tool_calls, response.finish_reason) == ((), "stop")

    async def test_usage_counts_the_cache(self, fake: FakeProvider, http: HttpClient) -> None:
        raw, expected = self._usage_case()
        fake.script(Fault(usage=raw))
        assert (await self.adapter.chat(http, self.config(fake), HELLO)).usage == expected

    async def test_embeddings_come_in_input_order(self, fake: FakeProvider, http: HttpClient) -> None:
        self.needs("embeddings")
        config = self.config(fake)
        batch = await self.adapter.embed(http, config, EmbeddingRequest(("a", "b", "c")))
        alone = [(await self.adapter.embed(http, config, EmbeddingRequest((text,)))).vectors[0] for text in "abc"]
        assert len(set(alone)) == 3
        assert list(batch.vectors) == alone  # each at its input's place: none moved, dropped or repeated

    @pytest.mark.parametrize("operation", ["completion", "embeddings", "streaming"])
    async def test_an_operation_it_does_not_offer_raises_before_any_request(
            self, fake: FakeProvider, http: HttpClient, operation: str) -> None:
        if getattr(self.offers, operation):
            pytest.skip(f"{self.adapter.name} offers {operation}: there is nothing to refuse")
        config = self.config(fake)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "completion": lambda: self.adapter.complete(http, config, CompletionRequest("x")),
            "embeddings": lambda: self.adapter.embed(http, config, EmbeddingRequest(("x",))),
            "streaming": lambda: anext(self.adapter.stream_chat(http, config, HELLO))}
        with pytest.raises(UnsupportedOperationError, match=operation.removesuffix("s")):
            await calls[operation]()
        assert fake.count() == 0

    def _image(self, kind: str) -> tuple[ImagePart, str]:
        """An image by ``url`` or as ``bytes``, and the text of it the body must carry."""
        if kind == "url":
            return ImagePart(url=self.image_url), self.image_url
        return ImagePart(data=_IMAGE_BYTES), base64.b64encode(_IMAGE_BYTES).decode()
