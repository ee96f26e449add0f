"""What goes on the wire: system instruction, images, generationConfig, schema, extra_body, the key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provmw_gemini import GeminiAdapter

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.http import HttpClient
from provmw.messages import ImagePart, Message, TextPart
from provmw.requests import ChatRequest
from provmw.testing import FakeProvider

ADAPTER = GeminiAdapter()
HELLO = (Message.system("Be brief."), Message.user("hello world"))


async def sent(fake: FakeProvider, config: ProviderConfig, client: HttpClient, request: ChatRequest) -> Any:
    await ADAPTER.chat(client, config, request)
    return fake.received[-1].body


async def test_system_messages_become_the_system_instruction(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    body = await sent(gemini_fake, gemini, client, ChatRequest(HELLO))
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hello world"}]}]


async def test_options_map_onto_the_generation_config(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    options = {"temperature": 0.2, "max_tokens": 50, "top_p": 0.9, "stop": "END", "seed": 7}
    body = await sent(gemini_fake, gemini, client, ChatRequest(HELLO, options=options))
    assert body["generationConfig"] == {"temperature": 0.2, "maxOutputTokens": 50, "topP": 0.9,
                                        "stopSequences": ["END"], "seed": 7}


async def test_a_max_tokens_cut_finishes_with_length(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    response = await ADAPTER.chat(client, gemini, ChatRequest(HELLO, options={"max_tokens": 2}))
    assert (response.text, response.finish_reason) == ("echo: hello", "length")


async def test_images_go_inline_with_their_type_or_as_file_data(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    parts = (TextPart("what?"), ImagePart(data=b"abc", media_type="image/webp"), ImagePart(url="https://x.test/a.jpg"))
    body = await sent(gemini_fake, gemini, client, ChatRequest((Message.user(parts),)))
    assert body["contents"][0]["parts"] == [
        {"text": "what?"}, {"inlineData": {"mimeType": "image/webp", "data": "YWJj"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x.test/a.jpg"}}]


async def test_a_response_schema_asks_for_json_that_follows_it(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
              "required": ["city", "days"], "additionalProperties": False}
    response = await ADAPTER.chat(client, gemini, ChatRequest(HELLO, response_schema=schema))
    generation = gemini_fake.received[-1].body["generationConfig"]
    assert generation == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    assert json.loads(response.text) == {"city": "echo: hello world", "days": 0}


async def test_an_openai_json_object_response_format_asks_for_json(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    body = await sent(gemini_fake, gemini, client, ChatRequest(HELLO, options={"response_format": "json_object"}))
    assert body["generationConfig"] == {"responseMimeType": "application/json"}


async def test_thinking_becomes_the_thinking_budget(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    options = {"thinking": {"type": "enabled", "budget_tokens": 1024}}
    body = await sent(gemini_fake, gemini, client, ChatRequest(HELLO, options=options))
    assert body["generationConfig"] == {"thinkingConfig": {"thinkingBudget": 1024}}


async def test_extra_body_adds_what_provmw_does_not_send(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    extra = {"safetySettings": safety, "generationConfig": {"thinkingConfig": {"includeThoughts": True}}}
    body = await sent(gemini_fake, gemini, client, ChatRequest(HELLO, options={"extra_body": extra}))
    assert body["safetySettings"] == safety
    assert body["generationConfig"] == {"thinkingConfig": {"includeThoughts": True}}


@pytest.mark.parametrize("extra", [{"contents": []}, {"generationConfig": {"maxOutputTokens": 99999}},
                                   {"generationConfig": {"candidateCount": 4}}])
async def test_extra_body_may_not_override_what_the_call_is_priced_on(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient, extra: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="extra_body may not set"):
        await ADAPTER.chat(client, gemini, ChatRequest(HELLO, options={"extra_body": extra}))
    assert gemini_fake.count() == 0


async def test_the_key_travels_in_the_goog_api_key_header(
        gemini_fake: FakeProvider, gemini: ProviderConfig, client: HttpClient) -> None:
    keyed = ProviderConfig(identifier="k", provider="gemini", model="models/gemini-2.5-flash",
                           base_url=gemini.base_url, api_key="AIza-test-key")
    await ADAPTER.chat(client, keyed, ChatRequest(HELLO))
    received = gemini_fake.received[-1]
    assert received.headers["x-goog-api-key"] == "AIza-test-key"
    assert (received.route, received.model) == ("gemini_generate", "gemini-2.5-flash")
