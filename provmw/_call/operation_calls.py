"""The ServiceManager's methods for the operations beyond chat (``provmw.operations``).

Each operation's module is imported by its first call, so ``import provmw`` pays for none of them.

Each builds its typed request and runs the pipeline once through the manager's ``_run``, as
``chat`` does; every one takes the same call keywords (:class:`CallKeywords`). A Responses call
naming a previous response goes to the configuration that made it (ADR 0052): the manager
remembers which configuration served each response it returned, a bounded number of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from provmw._base.bounded import MAX_NAMES, KeepingLRU
from provmw._call.arguments import CallArguments
from provmw.config import Secret
from provmw.context import Principal, ProviderOperation
from provmw.errors import UnknownArgumentError
from provmw.messages import ImagePart, ToolSpec
from provmw.responses import ChatChunk, ProviderResponse
from provmw.structured import schema_of

if TYPE_CHECKING:
    from provmw.operations.audio import SpeechResponse, TranscriptionResponse
    from provmw.operations.images import ImageResponse
    from provmw.operations.moderation import ModerationResponse
    from provmw.operations.rerank import RerankResponse
    from provmw.operations.responses_api import ResponsesResponse
    from provmw.requests import ProviderRequest
    from provmw.settings import Settings
    from provmw.streams import OpenedStream

__all__ = ["CallKeywords", "OperationCalls"]

R = TypeVar("R", bound=ProviderResponse)


class CallKeywords(TypedDict, total=False):
    """The keywords every call method takes, as ``chat`` does (``ServiceManager``'s docstring)."""

    configuration: str | None
    user: str | None
    tenant: str | None
    controls: Mapping[str, Any] | None
    idempotency_key: str | None
    correlation_id: str | None
    provider: str | None
    model: str | None
    base_url: str | None
    api_key: str | Secret | None
    timeout_s: float | None
    principal: Principal | None


def call_arguments(method: str, call: Mapping[str, Any]) -> CallArguments:
    """``call`` as ``CallArguments``; a keyword the method does not take is named, not a TypeError."""
    for name in call:
        if name not in CallArguments._fields:
            raise UnknownArgumentError(f"{method}: unknown argument {name!r}; it takes the call keywords "
                                       f"{', '.join(CallArguments._fields)} and its own arguments")
    return CallArguments(**call)


class OperationCalls:
    """Mixed into ``ServiceManager``: the calls of the operations in ``provmw.operations``."""

    _homes: KeepingLRU[str, str]  # a response's id -> the configuration that made it
    settings: Settings

    if TYPE_CHECKING:  # what the ServiceManager this is mixed into provides
        async def _run(self, operation: ProviderOperation, request: ProviderRequest, response_type: type[R],
                       call: CallArguments, *, streams: list[OpenedStream] | None = None) -> R: ...

        def _open_stream(self, operation: ProviderOperation, request: ProviderRequest,
                         call: CallArguments) -> AsyncGenerator[ChatChunk, None]: ...

    async def respond(self, /, input: str | Sequence[Any], *, instructions: str | None = None,
                      tools: Sequence[ToolSpec | Mapping[str, Any]] = (), builtin_tools: Sequence[str] = (),
                      previous_response_id: str | None = None, store: bool = False,
                      response_schema: Mapping[str, Any] | type | None = None,
                      options: Mapping[str, Any] | None = None, **call: Unpack[CallKeywords]) -> ResponsesResponse:
        """A Responses API call: native on adapters with its wire, translated to chat on the others
        (ADR 0052); one naming ``previous_response_id`` goes to the configuration that made that response."""
        from provmw.operations.responses_api import ResponsesRequest, ResponsesResponse

        request = ResponsesRequest(input=input, instructions=instructions, tools=tools, builtin_tools=builtin_tools,
                                   previous_response_id=previous_response_id, store=store,
                                   response_schema=schema_of(response_schema), options=options or {})
        arguments = self._home_of(previous_response_id, call_arguments("respond", call))
        response = await self._run(ProviderOperation.RESPONSES, request, ResponsesResponse, arguments)
        if response.response_id is not None and response.served_by:
            self._homes[response.response_id] = response.served_by
        return response

    async def stream_respond(self, /, input: str | Sequence[Any], *, instructions: str | None = None,
                             tools: Sequence[ToolSpec | Mapping[str, Any]] = (), builtin_tools: Sequence[str] = (),
                             previous_response_id: str | None = None, store: bool = False,
                             response_schema: Mapping[str, Any] | type | None = None,
                             options: Mapping[str, Any] | None = None,
                             **call: Unpack[CallKeywords]) -> AsyncGenerator[ChatChunk, None]:
        """``respond``, streamed as chunks (as ``stream_chat``'s: its opening goes through the pipeline)."""
        from provmw.operations.responses_api import ResponsesRequest

        request = ResponsesRequest(input=input, instructions=instructions, tools=tools, builtin_tools=builtin_tools,
                                   previous_response_id=previous_response_id, store=store,
                                   response_schema=schema_of(response_schema), options=options or {})
        arguments = self._home_of(previous_response_id, call_arguments("stream_respond", call))
        async with contextlib.aclosing(self._open_stream(ProviderOperation.RESPONSES, request, arguments)) as chunks:
            async for chunk in chunks:
                if chunk.response_id is not None and chunk.served_by:
                    self._homes[chunk.response_id] = chunk.served_by
                yield chunk

    async def generate_image(self, /, prompt: str, *, size: str | None = None, quality: str | None = None,
                             n: int = 1, options: Mapping[str, Any] | None = None,
                             **call: Unpack[CallKeywords]) -> ImageResponse:
        """Generate ``n`` images from ``prompt``, priced per image by size and quality."""
        from provmw.operations.images import ImageRequest, ImageResponse

        request = ImageRequest(prompt=prompt, size=size, quality=quality, n=n, options=options or {})
        return await self._run(ProviderOperation.IMAGE, request, ImageResponse,
                               call_arguments("generate_image", call))

    async def edit_image(self, /, prompt: str, image: bytes | ImagePart, *, mask: bytes | ImagePart | None = None,
                         size: str | None = None, quality: str | None = None, n: int = 1,
                         options: Mapping[str, Any] | None = None, **call: Unpack[CallKeywords]) -> ImageResponse:
        """Edit ``image`` (bytes, or an ``ImagePart`` holding them) as ``prompt`` says, within ``mask`` if given."""
        from provmw.operations.images import ImageEditRequest, ImageResponse

        request = ImageEditRequest(prompt=prompt, image=_image(image), mask=None if mask is None else _image(mask),
                                   size=size, quality=quality, n=n, options=options or {})
        return await self._run(ProviderOperation.IMAGE_EDIT, request, ImageResponse, call_arguments("edit_image", call))

    async def transcribe(self, /, audio: bytes, *, filename: str = "audio.wav", language: str | None = None,
                         prompt: str | None = None, options: Mapping[str, Any] | None = None,
                         **call: Unpack[CallKeywords]) -> TranscriptionResponse:
        """The text spoken in ``audio`` (the file's bytes; ``filename`` tells its format)."""
        from provmw.operations.audio import TranscriptionRequest, TranscriptionResponse

        request = TranscriptionRequest(audio=audio, filename=filename, language=language, prompt=prompt,
                                       options=options or {})
        return await self._run(ProviderOperation.TRANSCRIPTION, request, TranscriptionResponse,
                               call_arguments("transcribe", call))

    async def speak(self, /, text: str, *, voice: str = "alloy", audio_format: str = "mp3",
                    options: Mapping[str, Any] | None = None, **call: Unpack[CallKeywords]) -> SpeechResponse:
        """``text`` spoken in ``voice``, as audio in ``audio_format``."""
        from provmw.operations.audio import SpeechRequest, SpeechResponse

        request = SpeechRequest(text=text, voice=voice, audio_format=audio_format, options=options or {})
        return await self._run(ProviderOperation.SPEECH, request, SpeechResponse, call_arguments("speak", call))

    async def rerank(self, /, query: str, documents: Sequence[str], *, top_n: int | None = None,
                     **call: Unpack[CallKeywords]) -> RerankResponse:
        """``documents`` ranked by relevance to ``query``, most relevant first (the ``top_n`` first only, if given)."""
        from provmw.operations.rerank import RerankRequest, RerankResponse

        request = RerankRequest(query=query, documents=documents, top_n=top_n)
        return await self._run(ProviderOperation.RERANK, request, RerankResponse, call_arguments("rerank", call))

    async def moderate(self, /, inputs: str | Sequence[str], **call: Unpack[CallKeywords]) -> ModerationResponse:
        """Whether each input breaks the provider's content policy, by category, in input order."""
        from provmw.operations.moderation import ModerationRequest, ModerationResponse

        request = ModerationRequest(inputs=(inputs,) if isinstance(inputs, str) else inputs)
        return await self._run(ProviderOperation.MODERATION, request, ModerationResponse,
                               call_arguments("moderate", call))

    def _home_of(self, previous_response_id: str | None, call: CallArguments) -> CallArguments:
        """``call`` kept on the deployment that made ``previous_response_id``, when this manager returned
        that response and the call names the pool holding it (ADR 0052): the pool's own limits and layers
        still apply. A call is never moved to another configuration than it names: that one's key would
        continue someone else's stored conversation."""
        home = None if previous_response_id is None or call.provider is not None else \
            self._homes.get(previous_response_id)
        if home is None or (call.controls and "deployment" in call.controls):
            return call
        pool = self.settings.pools.get(self.settings.named(call.configuration).identifier)
        if pool is None or home not in pool.members:
            return call
        return call._replace(controls={**(call.controls or {}), "deployment": home})


def _image(value: bytes | ImagePart) -> ImagePart:
    return value if isinstance(value, ImagePart) else ImagePart(data=value)


def new_homes() -> KeepingLRU[str, str]:
    """Where each returned response was made, for the manager's ``_homes``: the most recent ones."""
    return KeepingLRU(MAX_NAMES)
