"""A call's text, read and rewritten: the request's out (redacted), the answer's in (restored).

Every piece of text a request sends is visited: each message's text parts, the arguments of the
tool calls in its history, a completion's prompt, an embedding's inputs, and what an operation
beyond chat names as its text (``OperationRequest.texts``: a Responses call's input, an image's
prompt, the text to speak, a rerank's query and documents, what to moderate). Answers restored:
chat, completion and Responses answers, and an image answer's revised prompts. Audio and images
sent as bytes are not text: the guard neither reads nor rewrites them. A value nothing changed
is kept as the same object, so an untouched request is the request it was.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from provmw.messages import ContentPart, Message, TextPart, ToolCall
from provmw.operations.images import GeneratedImage, ImageResponse
from provmw.operations.responses_api import FunctionCall, MessageItem, OutputItem, ResponsesResponse
from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest, ProviderRequest
from provmw.responses import CompletionResponse
from provmw_guard.placeholders import Find, Redaction

__all__ = ["Answer", "answer_texts", "answers_json", "redacted_request", "request_texts", "restored_answer",
           "unredacted_texts"]

Rewrite = Callable[[str], str]


def request_texts(request: ProviderRequest) -> list[str]:
    """Every piece of text ``request`` sends."""
    if isinstance(request, CompletionRequest):
        return [request.prompt]
    if isinstance(request, EmbeddingRequest):
        return list(request.inputs)
    if not isinstance(request, ChatRequest):  # an operation beyond chat says what text it sends
        return list(request.texts())
    texts = []
    for message in request.messages:
        texts += [part.text for part in message.content if type(part) is TextPart]
        texts += [call.arguments for call in message.tool_calls]
    return texts


def unredacted_texts(request: ProviderRequest) -> list[str]:
    """What ``request`` sends besides its messages' text: its options, tool specs and response schema,
    as JSON. The guard does not rewrite them; it refuses what they must not carry."""
    parts: list[object] = []
    if not isinstance(request, EmbeddingRequest) and request.options:
        parts.append(dict(request.options))
    if isinstance(request, ChatRequest) or hasattr(request, "tools"):  # a Responses call's too
        parts += [tool.to_dict() for tool in getattr(request, "tools", ())]
        schema = getattr(request, "response_schema", None)
        if schema is not None:
            parts.append(dict(schema))
    return [json.dumps(part, ensure_ascii=False, default=str) for part in parts]


def redacted_request(request: ProviderRequest, redaction: Redaction, find: Find) -> ProviderRequest:
    """``request`` with every value ``find`` finds replaced by ``redaction``'s placeholder."""
    def text(value: str) -> str:
        return redaction.redact(value, find(value))

    def arguments(value: str) -> str:
        return redaction.redact_json(value, find)

    if isinstance(request, CompletionRequest):
        prompt = text(request.prompt)
        return request if prompt == request.prompt else attrs.evolve(request, prompt=prompt)
    if isinstance(request, EmbeddingRequest):
        inputs = tuple(map(text, request.inputs))
        return request if inputs == request.inputs else attrs.evolve(request, inputs=inputs)
    if not isinstance(request, ChatRequest):
        texts = request.texts()
        changed = tuple(map(text, texts))
        return request if changed == texts else request.with_texts(changed)
    messages = tuple(_message(m, text, arguments) for m in request.messages)
    if all(new is old for new, old in zip(messages, request.messages, strict=True)):
        return request
    # The constructor, not attrs.evolve: a third of the cost, on every call that redacts something.
    return ChatRequest(messages, request.tools, request.options, request.response_schema)


def _message(message: Message, text: Rewrite, arguments: Rewrite) -> Message:
    content = message.content
    if len(content) == 1 and type(content[0]) is TextPart and not message.tool_calls:  # most messages
        new = text(content[0].text)
        return message if new == content[0].text else Message(message.role, (TextPart(new),), (),
                                                                 message.tool_call_id)
    content = tuple(_part(part, text) for part in message.content)
    calls = tuple(_call(call, arguments) for call in message.tool_calls)
    if all(new is old for new, old in zip(content, message.content, strict=True)) and \
            all(new is old for new, old in zip(calls, message.tool_calls, strict=True)):
        return message
    return Message(message.role, content, calls, message.tool_call_id)


def _part(part: ContentPart, text: Rewrite) -> ContentPart:
    if type(part) is not TextPart:
        return part
    new = text(part.text)
    return part if new == part.text else TextPart(new)


def _call(call: ToolCall, arguments: Rewrite) -> ToolCall:
    new = arguments(call.arguments)
    return call if new == call.arguments else attrs.evolve(call, arguments=new)


def answers_json(request: ProviderRequest) -> bool:
    """Whether the answer's text is JSON (a response schema, or a ``json_object`` / ``json_schema``
    response format, was asked)."""
    if not isinstance(request, ChatRequest):  # a Responses call asks for JSON by its schema only
        return getattr(request, "response_schema", None) is not None
    asked = request.options.get("response_format")
    return request.response_schema is not None or (isinstance(asked, Mapping) and
                                                    str(asked.get("type", "")).startswith("json"))


Answer = TypeVar("Answer", CompletionResponse, ResponsesResponse, ImageResponse)


def answer_texts(response: CompletionResponse | ResponsesResponse | ImageResponse) -> list[str]:
    """The text of an answer: its text and its tool calls' arguments (an image answer's: the prompts
    the model revised the one it was sent into)."""
    if isinstance(response, ImageResponse):
        return [image.revised_prompt for image in response.images if image.revised_prompt is not None]
    return [response.text, *(call.arguments for call in response.tool_calls)]


def restored_answer(response: Answer, redaction: Redaction, *, json: bool) -> Answer:
    """``response`` with this call's placeholders restored in its text, tool calls and parsed value
    (and a Responses answer's output items, which say the same; an image answer's revised prompts,
    which rewrite the redacted prompt)."""
    if not redaction.values:
        return response
    if isinstance(response, ImageResponse):
        images: dict[str, Any] = {"images": tuple(_image(image, redaction.restore) for image in response.images)}
        return attrs.evolve(response, **images)
    restore = redaction.restore_json if json else redaction.restore
    text = restore(response.text)
    calls = tuple(_call(c, redaction.restore_json) for c in response.tool_calls)
    parsed = None if response.parsed is None else redaction.restore_value(response.parsed)
    unchanged = all(new is old for new, old in zip(calls, response.tool_calls, strict=True))
    if text is response.text and parsed is None and unchanged:
        return response
    changed: dict[str, Any] = {"text": text, "tool_calls": calls, "parsed": parsed}
    if isinstance(response, ResponsesResponse):
        changed["output"] = tuple(_item(item, restore, redaction) for item in response.output)
    return attrs.evolve(response, **changed)


def _image(image: GeneratedImage, text: Rewrite) -> GeneratedImage:
    revised = image.revised_prompt
    return image if revised is None else attrs.evolve(image, revised_prompt=text(revised))


def _item(item: OutputItem, text: Rewrite, redaction: Redaction) -> OutputItem:
    if isinstance(item, MessageItem):
        return attrs.evolve(item, content=tuple(_part(part, text) for part in item.content))
    if isinstance(item, FunctionCall):
        return attrs.evolve(item, arguments=redaction.restore_json(item.arguments))
    return attrs.evolve(item, summary=tuple(map(redaction.restore, item.summary)))
