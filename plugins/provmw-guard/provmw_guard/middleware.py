"""The guard middleware: policies on what goes in and comes out, personal data redacted on the way
out and restored on the way back.

At priority 825 it sits inside ``deadline`` (850) and outside ``idempotency`` (805), ``cache``
(800) and every other layer: the cache, the idempotency store, the ledger and the providers only
ever hold the redacted text, and the caller only ever sees it restored.
"""

from __future__ import annotations

import importlib
import logging
import reprlib
from collections.abc import Mapping, Sequence

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, GuardRefusedError
from provmw.operations.images import ImageResponse
from provmw.operations.responses_api import ResponsesResponse
from provmw.pipeline import Next, R
from provmw.responses import CompletionResponse
from provmw.streams import OpenedStream
from provmw_guard.check import Check, ExternalCheck
from provmw_guard.detect import Analyzer
from provmw_guard.options import GuardOptions
from provmw_guard.placeholders import Redaction, reserved_names
from provmw_guard.policy import GuardPolicy, OutputWindow, call_token, size_refusal
from provmw_guard.rewrite import (
    Answer,
    answer_texts,
    answers_json,
    redacted_request,
    request_texts,
    restored_answer,
    unredacted_texts,
)
from provmw_guard.secrets import SecretScanner
from provmw_guard.stream import StreamRestorer

__all__ = ["GuardMiddleware", "load_analyzer"]

log = logging.getLogger("provmw.guard")


class GuardMiddleware:
    """Redacts personal data and secrets before a call is sent and restores them in its answer;
    refuses (``GuardRefusedError``) what a deny pattern, a size limit, a secret or the external
    check forbids, or only logs it in monitor mode.

    Per-call control: ``guard_policy`` names one of ``[middleware.guard.policies]`` to guard the call
    by instead of the top-level settings; a name that is not there refuses the call unsent
    (rule ``policy:unknown``), whatever the mode."""

    name = "guard"
    priority = 825
    controls = frozenset({"guard_policy"})

    def __init__(self, options: GuardOptions | None = None, *, analyzers: Sequence[Analyzer] = (),
                 check: Check | None = None, pools: Mapping[str, Sequence[str]] | None = None) -> None:
        self.options = options = options or GuardOptions()
        self.priority = options.priority
        analyzers = (*(load_analyzer(spec) for spec in options.analyzers), *analyzers)
        secrets = SecretScanner()

        def compiled(chosen: GuardOptions, its_check: Check | None) -> GuardPolicy:
            return GuardPolicy(chosen, check=its_check, analyzers=analyzers, pools=pools, secrets=secrets)

        top = check if check is not None or options.check is None else ExternalCheck(options.check)
        self._default = compiled(options, top)
        self._policies: dict[str, GuardPolicy] = {}
        for name, table in options.policies.items():
            chosen = options.policy(name)
            self._policies[name] = compiled(chosen, _own_check(table, chosen, top))

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        policy = self._policy(ctx)
        request = ctx.request
        if request is None:  # a context built without its request: nothing here to guard
            return await next(config)
        texts = request_texts(request)
        refused = policy.input_refusals(texts, unredacted_texts(request))
        if policy.check_out and ctx.facts.stream:  # a stream's answer cannot be checked before it is read
            refused.append("check:stream_output")
        policy.refuse(ctx, "input", refused)
        redaction = Redaction(reserved_names(texts))
        find = policy.finder(ctx, config)
        sent = request if find is None else redacted_request(request, redaction, find)
        if redaction.counts and getattr(request, "previous_response_id", None) is not None:
            # The provider holds the earlier turns with their placeholders, numbered by other calls: this
            # call's <EMAIL_1> could name someone else there, and be restored to the wrong value.
            policy.refuse(ctx, "input", ["redact:stored_conversation"])
        if redaction.counts and log.isEnabledFor(logging.INFO):
            log.info("guard call %s: redacted %s", call_token(ctx), _counts(redaction))
        if policy.check_in:
            policy.refuse(ctx, "input", await policy.ask(request_texts(sent)))
        response = await (next(config) if sent is request else next(config, ctx.with_request(sent)))
        json = answers_json(request)
        if isinstance(response, OpenedStream):
            _filter(ctx, policy, response, redaction, json)
            return response
        if isinstance(response, CompletionResponse | ResponsesResponse | ImageResponse):
            return await _answer(ctx, policy, response, redaction, json)  # type: ignore[type-var]
        return response

    async def aclose(self) -> None:
        checks = dict.fromkeys(p.check for p in (self._default, *self._policies.values()) if p.check is not None)
        for check in checks:
            aclose = getattr(check, "aclose", None)
            if aclose is not None:
                await aclose()

    def _policy(self, ctx: ProviderCallContext) -> GuardPolicy:
        """The policy the call asks for (``controls={"guard_policy": name}``), else the top-level one."""
        name = ctx.facts.controls.get("guard_policy")
        if name is None:
            return self._default
        policy = self._policies.get(name) if isinstance(name, str) else None
        if policy is None:
            # The operator's settings lack what the caller was promised: refused unsent, even when monitoring.
            known = ", ".join(sorted(self._policies)) or "none"
            log.warning("guard call %s: refused rule=policy:unknown stage=input (no policy %s)", call_token(ctx),
                        reprlib.repr(name))
            raise GuardRefusedError(f"the guard refused the call's input: rule policy:unknown (guard policy "
                                    f"{reprlib.repr(name)} is not one of [middleware.guard.policies]: {known})",
                                    rule="policy:unknown", stage="input")
        return policy


async def _answer(ctx: ProviderCallContext, policy: GuardPolicy, response: Answer, redaction: Redaction,
                  json: bool) -> Answer:
    if policy.check_out:  # the provider's own text: what it says of a placeholder, never the value
        policy.refuse(ctx, "output", await policy.ask(answer_texts(response)))
    restored = restored_answer(response, redaction, json=json)
    texts = answer_texts(restored)
    rules = [rule for rule in (size_refusal(texts, policy.options.max_output_chars, "output"),) if rule]
    policy.refuse(ctx, "output", rules + policy.deny_out.refusals(texts))
    return restored


def _filter(ctx: ProviderCallContext, policy: GuardPolicy, opened: OpenedStream, redaction: Redaction,
            json: bool) -> None:
    limit = policy.options.max_output_chars
    watching = bool(policy.deny_out.rules) or limit is not None
    if not redaction.values and not watching:
        return
    window = OutputWindow(policy.deny_out, limit)
    logged: set[str] = set()

    def watch(text: str) -> None:
        rules = [rule for rule in window.refusals(text) if rule not in logged]
        logged.update(rules)
        policy.refuse(ctx, "output", rules)

    opened.filter_chunks(StreamRestorer(redaction, json=json, watch=watch if watching else None))


def load_analyzer(spec: str) -> Analyzer:
    """The analyzer a setting names, ``module:attr``: an object with ``analyze``, or a factory of one."""
    module_name, _, attribute = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigurationError(f"analyzers: cannot load {spec!r} (module:attr): {exc}") from None
    analyzer = found if hasattr(found, "analyze") else found() if callable(found) else None
    if not isinstance(analyzer, Analyzer):
        raise ConfigurationError(f"analyzers: {spec!r} is not an analyzer (an object with analyze(text))")
    return analyzer


def _own_check(table: Mapping[str, object], chosen: GuardOptions, inherited: Check | None) -> Check | None:
    """A policy's check: its own client when its table names one, else the top-level check, shared."""
    if "check" not in table:
        return inherited
    return ExternalCheck(chosen.check) if chosen.check is not None else None


def _counts(redaction: Redaction) -> str:
    return " ".join(f"{kind}={count}" for kind, count in sorted(redaction.counts.items()))
