"""The middleware contract and the pipeline that composes it.

A middleware is any object with a ``name``, a ``priority`` and an async ``handle``::

    class LogLatency:
        name = "log_latency"
        priority = 900          # higher is outer

        async def handle(self, ctx, config, next):
            started = time.perf_counter()
            try:
                return await next(config)
            finally:
                log.info("%s took %.3fs", ctx.correlation_id, time.perf_counter() - started)

No base class is needed. Inside ``handle`` a middleware may

* pass through: ``return await next(config)``;
* short-circuit: return a response without calling ``next`` (a cache hit);
* substitute the configuration: ``await next(other_config)`` (a fallback);
* call ``next`` several times (a retry), or wrap it with before/after logic;
* change what is sent: ``await next(config, ctx.with_request(changed))`` (a redaction).

The context ``ctx`` is frozen. A layer that passes it on unchanged (``next(config)``) hands
the very same object down; one that rewrites the request hands a derived context, as a
PSR-15 middleware hands the next handler a changed immutable request, and every layer
below it, and the adapter, sees the rewritten request and the facts computed from it
(ADR 0001). The call's typed request is ``ctx.request``; what a layer needs to know about
the call is in ``ctx.facts`` (typed: ``ctx.facts.tenant``, ``ctx.facts.controls`` ...), and
plugins may pass their own facts in ``ctx.metadata``. Inner layers report outward through
the response (``attrs.evolve``) or the exception they raise.

A terminal is ``await terminal(config)``. One that reads the request (the manager's) has a
``with_context(ctx)`` method giving the terminal for a rewritten context, and takes the
context as a second argument from an innermost layer that rewrote (``terminal(config, ctx)``);
a plain function holds its own request, and a rewrite that reaches it is refused
(``ConfigurationError``) rather than silently not sent.

Two optional companions say what else the host relies on. A middleware that reads
per-call controls declares them (:class:`DeclaresControls`): the manager refuses a control
no installed middleware declares. One that holds resources is closed by the pipeline
(:class:`Closeable`), outermost first, when the manager closes.

``MiddlewarePipeline`` orders its middleware once, at build: the highest ``priority`` is
the outermost layer, ties are broken by ``name``; the input order never matters.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
from typing import Generic, Protocol, TypeVar, runtime_checkable

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, DuplicateMiddlewareError, PluginError
from provmw.responses import ProviderResponse

__all__ = ["Closeable", "DeclaresControls", "Middleware", "MiddlewarePipeline", "Next", "Terminal"]

R = TypeVar("R", bound=ProviderResponse)
R_co = TypeVar("R_co", bound=ProviderResponse, covariant=True)

# The layers below: ``await next(config)``, or ``await next(config, ctx.with_request(changed))``. Typed
# loosely so that a test's plain ``async def next(config)`` still stands in for them.
Next = Callable[..., Awaitable[R]]
Terminal = Callable[[ProviderConfig], Awaitable[R]]


@runtime_checkable
class Middleware(Protocol):
    """One layer of the onion; see the module docstring for what ``handle`` may do."""

    name: str
    priority: int

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        """Produce the response for ``ctx``, usually by awaiting ``next(config)``."""
        ...


@runtime_checkable
class DeclaresControls(Protocol):
    """A middleware that reads per-call controls (``controls={"name": value}``) names them here."""

    controls: frozenset[str]


@runtime_checkable
class Closeable(Protocol):
    """A middleware holding resources (files, connections, tasks) releases them here."""

    async def aclose(self) -> None:
        """Finish outstanding work and release resources; called once, when the manager closes."""
        ...


def _checked(middleware: object) -> Middleware:
    label = getattr(middleware, "name", None) or type(middleware).__name__
    if not isinstance(getattr(middleware, "name", None), str) or not middleware.name:  # type: ignore[attr-defined]
        raise PluginError(f"middleware {label!r} has no string name")
    priority = getattr(middleware, "priority", None)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise PluginError(f"middleware {label!r} has a priority that is not an int: {priority!r}")
    if not inspect.iscoroutinefunction(getattr(middleware, "handle", None)):
        raise PluginError(f"middleware {label!r}: handle must be an async function")
    return middleware  # type: ignore[return-value]


def _resolve(middlewares: Iterable[object]) -> tuple[Middleware, ...]:
    ordered = sorted((_checked(m) for m in middlewares), key=lambda m: (-m.priority, m.name))
    seen: set[str] = set()
    for m in ordered:
        if m.name in seen:
            raise DuplicateMiddlewareError(f"two middleware are named {m.name!r}")
        seen.add(m.name)
    return tuple(ordered)


class MiddlewarePipeline:
    """An ordered stack of middleware around a terminal call, built once, run per call."""

    __slots__ = ("_inner", "_middlewares", "_outer", "controls")

    def __init__(self, middlewares: Iterable[object] = ()) -> None:
        self._middlewares = _resolve(middlewares)
        # Bound methods looked up once; run() only composes them around the terminal: the
        # outermost is called directly, the others (innermost first) through one function each.
        self._outer = self._middlewares[0].handle if self._middlewares else None
        self._inner = tuple(m.handle for m in reversed(self._middlewares[1:]))
        self.controls: frozenset[str] = frozenset().union(
            *(m.controls for m in self._middlewares if isinstance(m, DeclaresControls)))

    @property
    def order(self) -> tuple[str, ...]:
        """Middleware names, outermost first."""
        return tuple(m.name for m in self._middlewares)

    @property
    def middlewares(self) -> tuple[Middleware, ...]:
        """The middleware objects, outermost first."""
        return self._middlewares

    def __repr__(self) -> str:
        layers = ", ".join(f"{m.name}({m.priority})" for m in self._middlewares)
        return f"MiddlewarePipeline([{layers}])"

    async def aclose(self) -> None:
        """Close every middleware that is :class:`Closeable`, outermost first."""
        failures = []
        for middleware in self._middlewares:
            if isinstance(middleware, Closeable):
                try:
                    await middleware.aclose()
                except Exception as exc:  # the others still close; the first failure is raised after
                    failures.append(exc)
        if failures:
            raise failures[0]

    def run(self, ctx: ProviderCallContext, config: ProviderConfig, terminal: Terminal[R]) -> Awaitable[R]:
        """Run the call described by ``ctx`` through every layer down to ``terminal``; await the result."""
        # Not a coroutine function itself, and no helper call per layer: each inner layer is a
        # plain function whose defaults hold what it calls, and the outermost is called as it is,
        # so a call through N layers costs N handler coroutines and N - 1 small functions (a
        # helper building a closure per layer cost 1.7 times hand-nested lambdas,
        # benchmarks/test_bench_pipeline.py).
        if self._outer is None:
            return terminal(config)
        reads = _READS.get(type(terminal))
        if reads is None:
            reads = _READS[type(terminal)] = hasattr(type(terminal), "with_context")
        innermost: _Terminal[R] = terminal if reads else _Plain(terminal)  # type: ignore[assignment]
        return self._outer(ctx, config, self._bound(ctx, innermost, len(self._inner)) if self._inner else innermost)

    def _bound(self, ctx: ProviderCallContext, terminal: _Terminal[R], layers: int) -> Next[R]:
        """The ``next`` of the layer above the innermost ``layers``, each bound to ``ctx``. A layer that
        hands down another context gets the layers below it bound anew to that one: only a rewrite pays."""
        # What a layer's function reads is in its defaults, none in a closure's cell (cells made each
        # function a third dearer to make and to call); what only a rewrite needs is one shared pair.
        call: Next[R] = terminal
        at = (self, terminal)
        for handle in self._inner[:layers] if layers < len(self._inner) else self._inner:
            def call(config: ProviderConfig, new: ProviderCallContext | None = None, /,
                     handle: Callable[..., Awaitable[R]] = handle, inner: Next[R] = call,
                     ctx: ProviderCallContext = ctx,
                     at: tuple[MiddlewarePipeline, _Terminal[R]] = at) -> Awaitable[R]:
                if new is None or new is ctx:
                    return handle(ctx, config, inner)
                pipeline, terminal = at
                return pipeline._bound(new, terminal.with_context(new), pipeline._inner.index(handle) + 1)(config)
        return call


class _Terminal(Protocol[R_co]):
    """The innermost ``next``: sends for its context, or for the one handed to it; ``with_context``
    gives the terminal of a rewritten context."""

    def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None, /) -> Awaitable[R_co]: ...

    def with_context(self, ctx: ProviderCallContext) -> _Terminal[R_co]: ...


class _Plain(Generic[R]):
    """A plain function terminal: it holds its own request, so a rewrite cannot reach it; a rewrite
    handed to it is refused rather than sent as the caller wrote it."""

    __slots__ = ("_send",)

    def __init__(self, send: Terminal[R]) -> None:
        self._send = send

    def __call__(self, config: ProviderConfig, ctx: ProviderCallContext | None = None, /) -> Awaitable[R]:
        if ctx is not None:
            self.with_context(ctx)
        return self._send(config)

    def with_context(self, ctx: ProviderCallContext) -> _Plain[R]:
        raise ConfigurationError(
            "a layer rewrote the request (ctx.with_request), but the pipeline's terminal is a plain function "
            "that sends its own: give the terminal a with_context(ctx) method that reads ctx.request")


_READS: dict[type, bool] = {}  # whether a terminal type reads the request (``with_context``), by type
