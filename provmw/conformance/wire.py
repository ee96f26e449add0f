"""Conformance at the wire: what the call asks for reaches the request body (options, system
prompt), ``extra_body`` never replaces what the call was priced on, and an answer whose fields
have the wrong type is a ``MalformedResponseError``, never a ``TypeError`` or a coerced value."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import attrs
import pytest

from provmw.conformance.base import HELLO, ConformanceBase, leaves
from provmw.errors import ConfigurationError, InvalidRequestError, MalformedResponseError
from provmw.http import HttpClient
from provmw.messages import Message
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider, Fault

__all__ = ["WireTests"]

_OPTIONS = {"temperature": 0.37, "max_tokens": 417, "stop": ["STOP-7f3a"]}
_SYSTEM = "be brief 7f3a"
_VENDOR = {"vendor_field_7f3a": {"mode": "conformance"}}  # a field of the provider's that provmw does not know
_TEXT = "echo: hello world"  # the answer's text to HELLO, wherever a wire puts it
_MODES = pytest.mark.parametrize("streaming", [False, True], ids=["chat", "stream"])


def _counts_as_text(raw: Any, path: str = "usage") -> Iterator[tuple[str, Any]]:
    """Each copy of ``raw`` with one of its counts as text, one more than it was (so a coercion shows)."""
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            for where, changed in _counts_as_text(value, f"{path}.{key}"):
                yield where, {**raw, key: changed}
    elif isinstance(raw, list | tuple):
        for index, value in enumerate(raw):
            for where, changed in _counts_as_text(value, f"{path}[{index}]"):
                yield where, [*raw[:index], changed, *raw[index + 1:]]
    elif type(raw) is int:
        yield path, str(raw + 1)


class WireTests(ConformanceBase):
    """The request carries what the call asked, and the answer is read with its types checked."""

    @_MODES
    async def test_generation_options_reach_the_wire(self, fake: FakeProvider, http: HttpClient,
                                                     streaming: bool) -> None:
        if streaming:
            self.needs("streaming")
        await self.answer(fake, http, ChatRequest(HELLO.messages, options=_OPTIONS), streaming)
        sent = list(leaves(fake.received[-1].body))
        wanted = {"temperature": 0.37, "max_tokens": 417, "stop": "STOP-7f3a"}
        assert [name for name, value in wanted.items()
                if not any(type(leaf) is type(value) and leaf == value for leaf in sent)] == []

    @_MODES
    async def test_the_system_prompt_reaches_the_wire(self, fake: FakeProvider, http: HttpClient,
                                                      streaming: bool) -> None:
        if streaming:
            self.needs("streaming")
        request = ChatRequest((Message.system(_SYSTEM), *HELLO.messages))
        answer = await self.answer(fake, http, request, streaming)
        assert answer.text.strip() == _TEXT  # the user's turn is still the last one
        assert any(isinstance(leaf, str) and _SYSTEM in leaf for leaf in leaves(fake.received[-1].body))

    async def test_max_tokens_cuts_the_answer_with_finish_reason_length(
            self, fake: FakeProvider, http: HttpClient) -> None:
        response = await self.adapter.chat(http, self.config(fake), ChatRequest(HELLO.messages,
                                                                                  options={"max_tokens": 2}))
        assert (response.text.split(), response.finish_reason) == (["echo:", "hello"], "length")

    @_MODES
    async def test_extra_body_fields_reach_the_wire(self, fake: FakeProvider, http: HttpClient,
                                                    streaming: bool) -> None:
        """A vendor field goes into the body as it is: the test below is not passed by dropping extra_body."""
        if streaming:
            self.needs("streaming")
        await self.answer(fake, http, ChatRequest(HELLO.messages, options={"extra_body": _VENDOR}), streaming)
        assert {key: fake.received[-1].body.get(key) for key in _VENDOR} == _VENDOR

    @_MODES
    async def test_extra_body_cannot_replace_what_the_call_was_priced_on(
            self, fake: FakeProvider, http: HttpClient, owned: tuple[str, Mapping[str, Any]], streaming: bool) -> None:
        """Refused before sending, or sent with every field the call writes itself as it was."""
        if streaming:
            self.needs("streaming")
        priced = ChatRequest(HELLO.messages, options={"max_tokens": 50})
        plain = await self.answer(fake, http, priced, streaming)
        first = fake.received[-1]
        extra = attrs.evolve(priced, options={**priced.options, "extra_body": dict(owned[1])})
        try:
            answer = await self.answer(fake, http, extra, streaming)
        except (ConfigurationError, InvalidRequestError):
            assert fake.count() == 1, "refused after sending it"
            return
        sent = fake.received[-1]
        assert sent.model == first.model
        assert {key: sent.body.get(key) for key in first.body} == first.body
        assert answer == plain

    async def test_a_number_in_place_of_the_text_is_a_malformed_response(
            self, fake: FakeProvider, http: HttpClient) -> None:
        fake.script(Fault(replace={_TEXT: 42}))
        with pytest.raises(MalformedResponseError):
            await self.adapter.chat(http, self.config(fake), HELLO)

    async def test_a_null_in_place_of_the_text_is_malformed_or_no_text(
            self, fake: FakeProvider, http: HttpClient) -> None:
        """Some wires document a null content (no text); none means the text "None"."""
        fake.script(Fault(replace={_TEXT: None}))
        try:
            response = await self.adapter.chat(http, self.config(fake), HELLO)
        except MalformedResponseError:
            return
        assert response.text == ""

    @_MODES
    async def test_a_token_count_as_text_is_a_malformed_response(
            self, fake: FakeProvider, http: HttpClient, streaming: bool) -> None:
        """Each count of the wire's usage in turn: refused, or (a count it does not read) no change."""
        if streaming:
            self.needs("streaming")
        raw, expected = self._usage_case()
        coerced = []
        for where, mistyped in _counts_as_text(raw):
            fake.script(Fault(usage=mistyped))
            try:
                answer = await self.answer(fake, http, HELLO, streaming)
            except MalformedResponseError:
                continue
            coerced += [where] if answer.usage != expected else []
        assert coerced == []
