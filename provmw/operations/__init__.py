"""The operations beyond chat, completion and embeddings: one module each, one table for all.

Each operation has a typed, frozen request and response in its module (``responses_api``:
the Responses API; ``images``: generation and edits; ``audio``: transcription and speech;
``rerank``; ``moderation``) and a row in :data:`OPERATIONS`: the adapter method that serves
it, the capability an adapter declares for it, and whether its answers may be cached when a
call asks (ADR 0054). Its request tells the stack what the call is made of through the
:class:`OperationRequest` protocol, so budgets, limits, the cache and the ledger treat every
operation alike: what it needs of an adapter, the bytes that bound its input tokens, the most
it may be billed in units other than tokens (ADR 0053), and whether it is deterministic.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from provmw._base import serde
from provmw.context import FrozenMap, ProviderOperation
from provmw.responses import ProviderResponse, response_from_dict

__all__ = ["OPERATIONS", "OperationRequest", "OperationSpec", "any_response_from_dict", "response_types"]


class OperationRequest(Protocol):
    """What a request of an operation in :data:`OPERATIONS` tells the stack about itself.

    ``options`` are the call's own wire options (merged over the configuration's, as for chat).
    ``to_dict`` is canonical plain JSON of everything that changes the answer (bytes as their
    SHA-256, never inline), for the cache key. ``needs`` names the ``Capabilities`` a serving
    adapter must have. ``input_bytes`` bounds the input tokens (UTF-8 bytes of all text sent:
    a byte-level tokenizer emits at least one byte a token); ``estimate_tokens`` is the cheap
    estimate (4 characters a token). ``most_output_tokens`` is the most output tokens it may be
    billed for with ``options`` in force (0: none; None: unbounded but for the model's ceiling).
    ``most_units`` is the most it may be billed in units (``image:1024x1024:high``: 2), for the
    budget's worst case. ``deterministic`` says whether the same request gives the same answer.
    ``texts`` is every piece of text it sends that a layer may read and rewrite (a guard's
    redaction: prompts, inputs, a query and its documents), in a fixed order; ``with_texts``
    is the same request with those replaced, given in that order (ADR 0048). What it sends as
    bytes (audio, images) is not text: a guard can neither read nor rewrite it.

    Optional (read with ``getattr``): ``unknown_worst_case(options) -> str | None``, why no bound
    before sending holds what the call may be billed (a stored conversation continued, audio that
    states no duration), which a strict budget's refusal then names.
    """

    @property
    def options(self) -> FrozenMap: ...

    def to_dict(self) -> dict[str, Any]: ...

    def needs(self, *, streaming: bool) -> frozenset[str]: ...

    def input_bytes(self) -> int: ...

    def estimate_tokens(self) -> int: ...

    def most_output_tokens(self, options: Mapping[str, Any]) -> int | None: ...

    def most_units(self, options: Mapping[str, Any]) -> Mapping[str, float]: ...

    def deterministic(self, options: Mapping[str, Any]) -> bool: ...

    def texts(self) -> tuple[str, ...]: ...

    def with_texts(self, texts: Sequence[str]) -> OperationRequest: ...


@attrs.frozen
class OperationSpec:
    """How one operation is served: the adapter method (and its stream form), the capability that
    offers it, its response's type, and whether it makes generated media (ADR 0054)."""

    method: str
    capability: str
    response_type: str  # the ``TYPE`` of its response class (``response_types``)
    generated: bool = False  # generated media: cached only where listed, whatever the request (ADR 0054)
    stream_method: str | None = None


OPERATIONS: Mapping[ProviderOperation, OperationSpec] = types.MappingProxyType({
    ProviderOperation.RESPONSES: OperationSpec("respond", "chat", "responses", stream_method="stream_respond"),
    ProviderOperation.IMAGE: OperationSpec("generate_image", "images", "image", generated=True),
    ProviderOperation.IMAGE_EDIT: OperationSpec("edit_image", "image_edits", "image", generated=True),
    ProviderOperation.TRANSCRIPTION: OperationSpec("transcribe", "transcription", "transcription"),
    ProviderOperation.SPEECH: OperationSpec("speak", "speech", "speech", generated=True),
    ProviderOperation.RERANK: OperationSpec("rerank", "rerank", "rerank"),
    ProviderOperation.MODERATION: OperationSpec("moderate", "moderation", "moderation"),
})


def any_response_from_dict(value: object) -> ProviderResponse:
    """Rebuild any operation's response from its ``to_dict`` output, choosing the class by ``type``."""
    data = serde.mapping(value, "response")
    kind = response_types().get(data.get("type"))  # type: ignore[arg-type]
    return response_from_dict(data) if kind is None else kind.from_dict(data)


def response_types() -> dict[str, type[ProviderResponse]]:
    """The response class of each operation in :data:`OPERATIONS`, by its ``TYPE``."""
    from provmw.operations.audio import SpeechResponse, TranscriptionResponse
    from provmw.operations.images import ImageResponse
    from provmw.operations.moderation import ModerationResponse
    from provmw.operations.rerank import RerankResponse
    from provmw.operations.responses_api import ResponsesResponse

    classes: tuple[type[ProviderResponse], ...] = (ResponsesResponse, ImageResponse, TranscriptionResponse,
                                                   SpeechResponse, RerankResponse, ModerationResponse)
    return {cls.TYPE: cls for cls in classes}
