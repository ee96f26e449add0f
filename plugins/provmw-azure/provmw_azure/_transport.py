"""The manager's HTTP client as the OpenAI adapter sees it when it speaks to Azure.

The OpenAI adapter builds the bodies, reads the answers and streams; this client, handed to
it for one call, adds what Azure's wire needs around them: the ``api-version`` query on each
URL (JSON bodies, multipart uploads, binary answers and streams alike), Azure's error bodies
rewritten in OpenAI's shape (``provmw_azure._wire``), and answers or stream events the
content filter ended raised as ``ContentPolicyError``. It sends through the manager's own
client: it opens no session and closes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from provmw.http import Body, FormFile, HttpClient, HttpStatusError, SSEEvent, Url, decode_json
from provmw.scrubbing import Scrubber
from provmw_azure._deployment import Deployment
from provmw_azure._wire import filtered_answer, openai_error

if TYPE_CHECKING:
    import aiohttp

__all__ = ["AzureTransport"]

# Every event carries "content_filter_results"; only one the filter ended holds this, quoted.
_FILTER_FINISH = '"content_filter"'


class AzureTransport(HttpClient):
    """``inner`` for one call on ``deployment``; ``secrets`` (a bearer token, the ``api-key``) are
    masked in errors, by ``scrubber``: the adapter scrubs every error of the call with it."""

    def __init__(self, inner: HttpClient, deployment: Deployment, *, provider: str, model: str,
                 secrets: tuple[str, ...] = (), versioned: bool = True) -> None:
        super().__init__(limits=inner.limits)
        self._versioned = versioned  # the v1 routes (the Responses API's) take no api-version
        self._inner = inner
        self._deployment = deployment
        self._provider, self._model = provider, model
        self._secrets = secrets
        self.scrubber = Scrubber.of(secrets)

    @property
    def session(self) -> aiohttp.ClientSession:
        return self._inner.session

    async def aclose(self) -> None:
        """Nothing to close: the manager owns the client underneath."""

    async def post_json(self, url: Url, body: Body, headers: Mapping[str, str]) -> Any:
        return (await self.post_json_with_headers(url, body, headers))[0]

    async def post_json_with_headers(self, url: Url, body: Body,
                                     headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        # Azure's answers carry OpenAI's x-ratelimit-* headers: the adapter reads them as OpenAI's.
        try:
            data, answered = await self._inner.post_json_with_headers(self._url(url), body, headers)
        except HttpStatusError as exc:
            raise self._error(exc) from None
        self._unfiltered(data)
        return data, answered

    async def post_form(self, url: Url, fields: Mapping[str, str], files: Mapping[str, FormFile],
                        headers: Mapping[str, str]) -> tuple[Any, Mapping[str, str]]:
        """An upload (an image to edit, audio to transcribe), as ``post_json_with_headers`` is sent."""
        try:
            data, answered = await self._inner.post_form(self._url(url), fields, files, headers)
        except HttpStatusError as exc:
            raise self._error(exc) from None
        self._unfiltered(data)
        return data, answered

    async def post_bytes(self, url: Url, body: Body,
                         headers: Mapping[str, str]) -> tuple[bytes, str, Mapping[str, str]]:
        """A binary answer (speech): no verdicts to read in it, only the errors to rewrite."""
        try:
            return await self._inner.post_bytes(self._url(url), body, headers)
        except HttpStatusError as exc:
            raise self._error(exc) from None

    def post_sse(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                 read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        return self._checked(self._inner.post_sse(self._url(url), body, headers, read_timeout_s=read_timeout_s))

    def post_sse_with_headers(self, url: str, body: Mapping[str, Any], headers: Mapping[str, str], *,
                              on_headers: Callable[[Mapping[str, str]], None],
                              read_timeout_s: float | None = None) -> AsyncIterator[SSEEvent]:
        return self._checked(self._inner.post_sse_with_headers(self._url(url), body, headers, on_headers=on_headers,
                                                               read_timeout_s=read_timeout_s))

    async def _checked(self, events: AsyncIterator[SSEEvent]) -> AsyncIterator[SSEEvent]:
        try:
            async for event in events:
                self._check(event)
                yield event
        except HttpStatusError as exc:
            raise self._error(exc) from None

    def _url(self, url: Url) -> str:
        return f"{url}?{self._deployment.query}" if self._versioned else str(url)

    def _unfiltered(self, data: Any) -> None:
        """Raise the ``ContentPolicyError`` of an answer the content filter ended."""
        if (filtered := filtered_answer(data, provider=self._provider, model=self._model)) is not None:
            raise filtered

    def _check(self, event: SSEEvent) -> None:
        if _FILTER_FINISH not in event.data:
            return
        try:
            data = decode_json(event.data)
        except ValueError:
            return  # the adapter reads the event next and names what is wrong with it
        self._unfiltered(data)

    def _error(self, exc: HttpStatusError) -> HttpStatusError:
        self.scrubber.error(exc)  # before its body is cut and re-wrapped: a cut secret is past finding
        hint = (f" (is {self._deployment.name!r} a deployment of {self._deployment.host}, and "
                f"api-version {self._deployment.api_version} one it serves?)")
        return openai_error(exc, not_found_hint=hint, secrets=self._secrets)
