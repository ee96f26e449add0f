"""The JSON body of a ``generateContent`` call, built from a ``ChatRequest``.

Tool results find their call by id: Gemini's ``functionResponse`` names the function, not
the call, so each result takes the name of the call with its ``tool_call_id`` in an earlier
assistant message, and the results of one turn go out in the order of those calls (the
order Gemini pairs several calls of one function with their results in).
"""

from __future__ import annotations

import json
import logging
import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError
from provmw.http import plain_json
from provmw.messages import ImagePart, Message, TextPart, ToolCall, ToolSpec
from provmw.requests import ChatRequest, merged_options

__all__ = ["SKIP_SIGNATURE", "chat_body", "contents"]

log = logging.getLogger(__name__)

# Gemini 3 refuses a replayed function call without the thought signature it came with, and
# provmw's ToolCall has no place for one (its id must stay short enough for every provider of
# a fallback chain). Gemini documents this value for history it did not sign.
SKIP_SIGNATURE = "skip_thought_signature_validator"

_OPTIONS = {"temperature": "temperature", "top_p": "topP", "top_k": "topK", "seed": "seed",
            "presence_penalty": "presencePenalty", "frequency_penalty": "frequencyPenalty"}
_OUTPUT_BOUNDS = ("max_tokens", "max_completion_tokens")  # read in this order for maxOutputTokens
_HANDLED = frozenset({*_OPTIONS, *_OUTPUT_BOUNDS, "stop", "tool_choice", "response_format", "thinking",
                      "extra_body"})
# What provmw writes itself, and prices, budgets and caches the call on: extra_body may add
# other fields (safetySettings, cachedContent, generationConfig.thinkingConfig), not these.
_OWNED = frozenset({"contents", "systemInstruction", "tools", "toolConfig"})
_OWNED_GENERATION = frozenset({*_OPTIONS.values(), "maxOutputTokens", "stopSequences", "candidateCount",
                               "responseMimeType", "responseSchema", "responseJsonSchema"})
_MODES = {"auto": "AUTO", "none": "NONE", "required": "ANY", "any": "ANY"}


@attrs.frozen
class _Call:
    name: str
    position: int  # its place among the calls of its assistant message


def _calls_by_id(messages: Sequence[Message]) -> dict[str, _Call]:
    return {call.id: _Call(call.name, i) for m in messages for i, call in enumerate(m.tool_calls)}


def _call_of(message: Message, calls: Mapping[str, _Call]) -> _Call:
    call = calls.get(message.tool_call_id or "")
    if call is None:
        raise ConfigurationError(f"a tool message answers call id {message.tool_call_id!r}, which no assistant "
                                 "message of the conversation made: Gemini needs the name of the function called")
    return call


def _in_call_order(messages: Sequence[Message], calls: Mapping[str, _Call]) -> list[Message]:
    """The messages, each run of tool results sorted by the position of the call it answers."""
    out: list[Message] = []
    run: list[Message] = []
    for message in (*messages, None):
        if message is not None and message.role == "tool":
            run.append(message)
            continue
        out += sorted(run, key=lambda m: _call_of(m, calls).position)
        run = []
        if message is not None:
            out.append(message)
    return out


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url is None:
        return {"inlineData": {"mimeType": part.media_type, "data": part.base64}}
    guessed, _ = mimetypes.guess_type(part.url)  # media_type defaults to image/png: the URL knows better
    return {"fileData": {"mimeType": guessed or part.media_type, "fileUri": part.url}}


def _tool_output(text: str) -> dict[str, Any]:
    """A result as the object ``functionResponse.response`` must be: a JSON object as it is,
    anything else under ``output``, the key Gemini reads a function's output from."""
    try:
        value = json.loads(text)
    except ValueError:
        return {"output": text}
    return value if isinstance(value, dict) else {"output": value}


def _function_call(call: ToolCall, first: bool) -> dict[str, Any]:
    part: dict[str, Any] = {"functionCall": {"name": call.name, "args": call.parsed_arguments()}}
    if first:  # Gemini signs the first call of a turn only
        part["thoughtSignature"] = SKIP_SIGNATURE
    return part


def _parts(message: Message, calls: Mapping[str, _Call]) -> list[dict[str, Any]]:
    if message.role == "tool":
        name = _call_of(message, calls).name
        return [{"functionResponse": {"name": name, "response": _tool_output(message.text)}}]
    parts = [{"text": p.text} if isinstance(p, TextPart) else _image(p)
             for p in message.content if not isinstance(p, TextPart) or p.text]
    return parts + [_function_call(c, i == 0) for i, c in enumerate(message.tool_calls)]


def contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Gemini ``contents``: assistant turns as ``model``, tool results as ``user`` turns, and
    turns of one role in a row merged, as Gemini wants roles to alternate."""
    calls = _calls_by_id(messages)
    out: list[dict[str, Any]] = []
    for message in _in_call_order([m for m in messages if m.role != "system"], calls):
        role = "model" if message.role == "assistant" else "user"
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(_parts(message, calls))
        else:
            out.append({"role": role, "parts": _parts(message, calls)})
    return out


def _tool(tool: ToolSpec) -> dict[str, Any]:
    # parametersJsonSchema takes JSON Schema as provmw holds it; ``parameters`` is an OpenAPI subset.
    return {"name": tool.name, "description": tool.description, "parametersJsonSchema": plain_json(tool.parameters)}


def _tool_config(choice: Any) -> dict[str, Any]:
    if isinstance(choice, Mapping):
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise ConfigurationError(f"options.tool_choice names no function: {plain_json(choice)!r}")
        return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
    if choice not in _MODES:
        raise ConfigurationError(f"options.tool_choice must be one of {', '.join(_MODES)} or a function, "
                                 f"got {choice!r}")
    return {"functionCallingConfig": {"mode": _MODES[choice]}}


def _json_output(response_format: Any, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """``responseMimeType`` and ``responseJsonSchema`` from the call's schema, else from an
    OpenAI-style ``response_format`` (``json_object`` or ``json_schema``)."""
    if schema is None and isinstance(response_format, Mapping):
        kind = response_format.get("type")
        schema = (response_format.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
        response_format = kind
    if schema is not None:
        return {"responseMimeType": "application/json", "responseJsonSchema": plain_json(schema)}
    return {"responseMimeType": "application/json"} if response_format == "json_object" else {}


def _thinking(value: Any) -> dict[str, Any]:
    """Anthropic's shape of the ``thinking`` option as Gemini's ``thinkingConfig``."""
    kind = value.get("type")
    if kind == "disabled":
        return {"thinkingBudget": 0}
    if kind == "enabled" and isinstance(budget := value.get("budget_tokens"), int):
        return {"thinkingBudget": budget}
    raise ConfigurationError("options.thinking must be {'type': 'enabled', 'budget_tokens': N} or "
                             f"{{'type': 'disabled'}}, got {plain_json(value)!r}")


def _generation_config(options: Mapping[str, Any], schema: Mapping[str, Any] | None) -> dict[str, Any]:
    config = {wire: plain_json(options[name]) for name, wire in _OPTIONS.items() if name in options}
    bound = next((options[k] for k in _OUTPUT_BOUNDS if k in options), None)
    if bound is not None:
        config["maxOutputTokens"] = bound
    if "stop" in options:
        stop = options["stop"]
        config["stopSequences"] = [stop] if isinstance(stop, str) else list(stop)
    if "thinking" in options:
        config["thinkingConfig"] = _thinking(options["thinking"])
    return config | _json_output(options.get("response_format"), schema)


def _with_extra(body: dict[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = plain_json(given)
    generation = extra.pop("generationConfig", None) or {}
    owned = sorted(_OWNED.intersection(extra) | {f"generationConfig.{k}" for k in _OWNED_GENERATION & set(generation)})
    if owned:
        raise ConfigurationError(f"options.extra_body may not set {', '.join(owned)}: provmw sends those itself "
                                 "from the call's messages, tools and options")
    if generation:
        body["generationConfig"] = {**body.get("generationConfig", {}), **generation}
    return {**body, **extra}


def chat_body(config: ProviderConfig, request: ChatRequest) -> dict[str, Any]:
    """The JSON body of a ``generateContent`` (or ``streamGenerateContent``) call."""
    options = merged_options(config, request.options)
    body: dict[str, Any] = {"contents": contents(request.messages)}
    if system := "\n\n".join(m.text for m in request.messages if m.role == "system"):
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        body["tools"] = [{"functionDeclarations": [_tool(t) for t in request.tools]}]
        if "tool_choice" in options:
            body["toolConfig"] = _tool_config(options["tool_choice"])
    if generation := _generation_config(options, request.response_schema):
        body["generationConfig"] = generation
    if ignored := sorted(set(options) - _HANDLED):
        log.debug("gemini ignores options %s", ignored)
    return _with_extra(body, options.get("extra_body", {}))
