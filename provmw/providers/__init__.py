"""Provider adapters: the typed boundary between provmw and one wire API each.

``ProviderAdapter`` is the whole contract; ``provmw.providers.openai`` and
``provmw.providers.anthropic`` are the built-in adapters, registered through the same
``provmw_providers`` hook a third-party plugin uses. A plugin wraps installed adapters, its
own or another plugin's, by name with a ``ProviderDecorator`` (``provmw_provider_decorators``);
``ForwardingAdapter`` is the wrapper to subclass.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from provmw.errors import UnsupportedOperationError

if TYPE_CHECKING:
    from provmw.config import ProviderConfig
    from provmw.http import HttpClient
    from provmw.requests import ChatRequest, CompletionRequest, EmbeddingRequest
    from provmw.responses import ChatChunk, CompletionResponse, EmbeddingResponse

__all__ = ["ALL_PROVIDERS", "CAPABILITY_NAMES", "OPTIONAL_MEMBERS", "Capabilities", "ForwardingAdapter",
           "ProviderAdapter", "ProviderDecorator", "capabilities_of"]


@attrs.frozen
class Capabilities:
    """What an adapter can serve; the manager and the fallback layer read it before a call.

    An adapter declares it as ``capabilities`` (optional: an adapter without it is taken to
    offer chat, completion, embeddings, streaming, tools and vision, and nothing else).
    ``schema`` means it maps ``ChatRequest.response_schema`` onto its wire so the provider
    constrains the answer; ``response_format`` means it honours the OpenAI-style option.
    ``vision_url`` and ``vision_bytes`` say which images it takes: by URL, or inline bytes
    (``vision`` is either). The operations beyond chat are offered only where declared, each
    served by the adapter method of the same name in ``provmw.operations.OPERATIONS``:
    ``responses`` is the Responses API's own wire (an adapter without it still serves a
    Responses call by translation to its chat wire, ADR 0052), and ``web_search``,
    ``file_search`` and ``code_interpreter`` are the Responses API's built-in tools.
    """

    chat: bool = True
    completion: bool = True
    embeddings: bool = True
    streaming: bool = True
    tools: bool = True
    vision: bool = True
    vision_url: bool = True
    vision_bytes: bool = True
    schema: bool = False
    response_format: bool = False
    responses: bool = False
    web_search: bool = False
    file_search: bool = False
    code_interpreter: bool = False
    images: bool = False
    image_edits: bool = False
    transcription: bool = False
    speech: bool = False
    rerank: bool = False
    moderation: bool = False

    def lacking(self, needs: Collection[str]) -> tuple[str, ...]:
        """The capabilities among ``needs`` (names of fields of this class) it does not offer, sorted."""
        missing = [need for need in needs if not getattr(self, need)]
        return tuple(sorted(missing)) if missing else ()

    def require(self, needs: Collection[str], *, provider: str, configuration: str | None = None) -> None:
        """Raise ``UnsupportedOperationError`` naming what of ``needs`` is lacking, if anything is."""
        if missing := self.lacking(needs):
            raise UnsupportedOperationError(provider, ", ".join(missing), configuration=configuration)


CAPABILITY_NAMES = frozenset(field.name for field in attrs.fields(Capabilities))


def capabilities_of(adapter: object) -> Capabilities:
    """What ``adapter`` declares as ``capabilities``, or the defaults when it declares nothing."""
    declared = getattr(adapter, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else Capabilities()


class ProviderAdapter(Protocol):
    """What a provider plugin implements: four operations over one wire API.

    ``name`` is what a configuration puts in ``provider``; it is unique among installed
    adapters. An adapter may also declare, all optional (read with ``getattr``, hence not
    protocol members, which would make them mandatory for type checkers):

    - ``api_key_env: str | None``, the environment variable its provider's own SDK reads the
      key from (``"OPENAI_API_KEY"``): an ad-hoc call given no ``api_key`` takes the key from
      it (the manager never logs it);
    - ``default_base_url: str | None``, the provider's own endpoint: that key is sent only
      there, and an ad-hoc call naming another ``base_url`` must bring its own key;
    - ``ambient_credentials: bool``, True when the adapter sends credentials of its own for a
      configuration without a key (a token provider, a cloud's credential chain): an ad-hoc call
      naming a ``base_url`` other than its own must then bring ``api_key`` too.

    The manager calls exactly the four methods below and reads ``name`` and those three; every
    type they mention is public (``provmw.http``, ``provmw.config``, ``provmw.requests``,
    ``provmw.responses``, ``provmw.messages``, ``provmw.errors``).

    What an adapter receives, on every call:

    - ``http``: the manager's one ``provmw.http.HttpClient``. Post through it, never open
      a session of your own: the manager owns its lifetime and closes it in ``aclose()``.
      ``post_json`` for a JSON answer, ``post_sse`` for server-sent events, ``post_stream``
      for the raw chunks of a stream in a framing of its own (AWS event streams).
    - ``config``: the ``provmw.config.ProviderConfig`` the pipeline chose for this attempt
      (fallback may hand a different one than the caller named). Read ``model``,
      ``base_url``, ``api_key`` (a ``Secret``: call ``reveal()`` only to build a header),
      ``headers`` and ``options``; ``merged_options(config, request.options)`` gives the
      options in force.
    - ``request``: a frozen ``ChatRequest``, ``CompletionRequest`` or ``EmbeddingRequest``
      from ``provmw.requests``; images travel as ``ImagePart`` inside the messages, tools
      as ``ToolSpec``.

    What it returns: a ``CompletionResponse`` (``text``, ``tool_calls``, ``finish_reason``
    normalised to ``stop``, ``length``, ``tool_calls`` or ``content_filter``), an
    ``EmbeddingResponse`` (one vector per input, in input order), or from ``stream_chat``
    ``ChatChunk``s (below). Responses carry ``provider=self.name``,
    ``served_by=config.identifier`` and the provider's token ``Usage``; the manager adds
    cost and attempts.

    How ``stream_chat`` streams: it asks the provider for its final usage (OpenAI's
    ``stream_options.include_usage``) and yields a chunk per text delta as it arrives; tool
    calls are joined with ``provmw.streams.ToolCallAssembler`` (by call id, then index) and
    yielded whole, each once, in a chunk's ``tool_calls``; the last chunk carries the finish
    reason and the usage. An error event inside the 2xx stream raises
    ``provmw.http.InBandError(event_data)`` inside ``wire_errors``, which maps it to the
    error tree; events that only keep the connection alive yield nothing. The manager, not
    the adapter, bounds the time to the first chunk and between chunks.

    What it raises: only the ``ProviderError`` tree of ``provmw.errors``. Wrap every call
    on ``http`` in ``provmw.http.wire_errors(codes, provider=..., model=...)``, which
    turns error statuses (with the codes in the body and the retry hints in the headers),
    dropped connections, bodies that are not JSON and reads past ``http.limits`` into
    typed errors; decode stream events with ``provmw.http.decode_json`` (strict: no
    ``NaN``, no unbounded nesting), check the type of every field read, raise
    ``provmw.http.malformed(...)`` for JSON that lacks the documented shape, and
    ``UnsupportedOperationError`` before any request for an operation the provider does
    not offer. A stream that ends before its documented end raises; it never passes for a
    short answer.

    What it never does:

    - retry, wait or fall back: the retry and fallback middleware decide, from the error;
    - put a timer on a call: the manager bounds each attempt with ``config.timeout_s``
      (``AttemptTimeoutError``), and a stream's time to its first chunk and between chunks;
    - log or raise anything holding the API key or request headers (the manager also scrubs
      every credential of the configuration out of an adapter's errors, since a provider may
      echo them: that is a backstop, not a licence);
    - keep per-call state on ``self``: one adapter instance serves concurrent calls.

    A new adapter proves itself by subclassing ``provmw.testing.AdapterConformance``::

        class TestAcmeAdapter(AdapterConformance):
            adapter = AcmeAdapter()  # its capabilities decide which tests apply
            usage_with_cache = (raw_usage_body_of_the_wire, Usage(...))

            def config(self, fake, **fields):
                return ProviderConfig(identifier="acme", provider="acme", model="m",
                                      base_url=fake.openai_base_url, **fields)
    """

    name: str

    async def chat(self, http: HttpClient, config: ProviderConfig,
                   request: ChatRequest) -> CompletionResponse:
        """Answer a conversation; images and tools travel in the request."""
        ...

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        """Complete a bare prompt."""
        ...

    async def embed(self, http: HttpClient, config: ProviderConfig,
                    request: EmbeddingRequest) -> EmbeddingResponse:
        """Embed each input, in order."""
        ...

    def stream_chat(self, http: HttpClient, config: ProviderConfig,
                    request: ChatRequest) -> AsyncIterator[ChatChunk]:
        """Stream the answer to a conversation as chunks; the last carries finish reason and usage."""
        ...


ALL_PROVIDERS = "*"
# What an adapter may declare besides its operations (``ProviderAdapter``'s docstring): a wrapper
# must read the same, or an ad-hoc call would send credentials where the adapter never would.
OPTIONAL_MEMBERS = ("api_key_env", "default_base_url", "ambient_credentials")


@attrs.frozen
class ProviderDecorator:
    """Wraps the installed adapter named ``provider`` (``ALL_PROVIDERS``, ``"*"``: every one) as
    ``wrap(adapter)``, once, when the plugin host collects the adapters.

    A plugin returns these from ``provmw_provider_decorators(settings)``; it may name any
    installed adapter, including another plugin's it never imports. ``wrap`` must return an
    adapter with the same ``name``, reading as the wrapped one does for ``api_key_env``,
    ``default_base_url`` and ``ambient_credentials``, and declaring ``capabilities`` when the
    wrapped one does (``capabilities_of`` reads the outermost adapter): subclass
    ``ForwardingAdapter``, which forwards all of them.
    """

    provider: str = attrs.field(validator=attrs.validators.and_(attrs.validators.instance_of(str),
                                                                attrs.validators.min_len(1)))
    wrap: Callable[[ProviderAdapter], ProviderAdapter] = attrs.field(validator=attrs.validators.is_callable())

    def applies_to(self, name: str) -> bool:
        """Whether this decorator wraps the adapter named ``name``."""
        return self.provider in (ALL_PROVIDERS, name)


class ForwardingAdapter:
    """An adapter handing every operation to ``inner`` and reading as it does (``name``,
    ``capabilities`` and every optional member); subclass it and override what a decorator
    changes (a class attribute ``capabilities = Capabilities(...)`` to offer less)."""

    def __init__(self, inner: ProviderAdapter) -> None:
        self.inner = inner
        self.name = inner.name

    def __getattr__(self, member: str) -> Any:
        # Only reached for what neither the instance nor its class has: ``capabilities`` and the
        # optional members, read as the inner adapter's (absent where it has none).
        if member.startswith("__") or member == "inner":
            raise AttributeError(member)
        return getattr(self.inner, member)

    async def chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> CompletionResponse:
        return await self.inner.chat(http, config, request)

    async def complete(self, http: HttpClient, config: ProviderConfig,
                       request: CompletionRequest) -> CompletionResponse:
        return await self.inner.complete(http, config, request)

    async def embed(self, http: HttpClient, config: ProviderConfig, request: EmbeddingRequest) -> EmbeddingResponse:
        return await self.inner.embed(http, config, request)

    def stream_chat(self, http: HttpClient, config: ProviderConfig, request: ChatRequest) -> AsyncIterator[ChatChunk]:
        return self.inner.stream_chat(http, config, request)
