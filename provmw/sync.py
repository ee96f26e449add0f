"""``SyncServiceManager``: the blocking twin for scripts and threaded host code.

It owns one event loop in a background thread and submits each call to it, so every
method is the async manager's own code; several threads may call it at once.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Generator, Iterable
from concurrent.futures import Future
from typing import Any, Concatenate, ParamSpec, TypeVar

from provmw.http import HttpClient
from provmw.manager import ServiceManager
from provmw.pipeline import Middleware
from provmw.plugins import PluginHost
from provmw.responses import ChatChunk
from provmw.settings import Settings, load_settings

__all__ = ["SyncServiceManager"]

P = ParamSpec("P")
R = TypeVar("R")


def _blocking(
    method: Callable[Concatenate[ServiceManager, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[SyncServiceManager, P], R]:
    @functools.wraps(method)  # the same signature, for help() and IDEs; ParamSpec keeps it for mypy
    def call(self: SyncServiceManager, /, *args: P.args, **kwargs: P.kwargs) -> R:
        self._check_open()  # before the coroutine exists: a closed manager must not leave one unawaited
        return self._wait(method(self.manager, *args, **kwargs))

    call.__doc__ = f"Blocking ``ServiceManager.{method.__name__}``. {method.__doc__ or ''}"
    return call


def _blocking_stream(
    method: Callable[Concatenate[ServiceManager, P], AsyncGenerator[ChatChunk, None]],
) -> Callable[Concatenate[SyncServiceManager, P], Generator[ChatChunk, None, None]]:
    @functools.wraps(method)
    def stream(self: SyncServiceManager, /, *args: P.args, **kwargs: P.kwargs) -> Generator[ChatChunk, None, None]:
        self._check_open()
        chunks = method(self.manager, *args, **kwargs)
        try:
            while True:
                try:
                    yield self._wait(chunks.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if not self._closed:  # closing the manager already ended the stream
                self._wait(chunks.aclose())

    stream.__doc__ = f"Blocking ``ServiceManager.{method.__name__}``: yields chunks as they arrive."
    return stream


async def _awaited(awaitable: Awaitable[R]) -> R:
    return await awaitable


class SyncServiceManager:
    """The same methods as ``ServiceManager``, blocking; close with ``close()`` or ``with``."""

    def __init__(self, settings: Settings | None = None, *, host: PluginHost | None = None,
                 middleware: Iterable[Middleware] = (), http: HttpClient | None = None) -> None:
        self.manager = ServiceManager(settings, host=host, middleware=middleware, http=http)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="provmw-sync", daemon=True)
        self._thread.start()
        self._closed = False

    @classmethod
    def from_file(cls, path: str | os.PathLike[str] | None = None, *, host: PluginHost | None = None,
                  middleware: Iterable[Middleware] = (), http: HttpClient | None = None) -> SyncServiceManager:
        """Build from the settings file (see ``provmw.settings`` for the search order)."""
        return cls(load_settings(path), host=host, middleware=middleware, http=http)

    chat = _blocking(ServiceManager.chat)
    complete = _blocking(ServiceManager.complete)
    embed = _blocking(ServiceManager.embed)
    vision = _blocking(ServiceManager.vision)
    chat_with_tools = _blocking(ServiceManager.chat_with_tools)
    stream_chat = _blocking_stream(ServiceManager.stream_chat)
    stream_chat_with_tools = _blocking_stream(ServiceManager.stream_chat_with_tools)
    respond = _blocking(ServiceManager.respond)
    stream_respond = _blocking_stream(ServiceManager.stream_respond)
    generate_image = _blocking(ServiceManager.generate_image)
    edit_image = _blocking(ServiceManager.edit_image)
    transcribe = _blocking(ServiceManager.transcribe)
    speak = _blocking(ServiceManager.speak)
    rerank = _blocking(ServiceManager.rerank)
    moderate = _blocking(ServiceManager.moderate)

    def close(self) -> None:
        """Close the manager and stop the loop thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._wait(self.manager.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SyncServiceManager:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("SyncServiceManager is closed; build a new one")

    def _wait(self, coro: Awaitable[R]) -> R:
        if self._loop.is_closed():
            raise RuntimeError("SyncServiceManager is closed")
        future: Future[R] = asyncio.run_coroutine_threadsafe(_awaited(coro), self._loop)
        return future.result()
