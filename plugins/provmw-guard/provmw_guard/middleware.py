"""The guard middleware: policies on what goes in and comes out, personal data redacted on the way
out and restored on the way back.

At priority 825 it sits inside ``deadline`` (850) and outside ``idempotency`` (805), ``cache``
(800) and every other layer: the cache, the idempotency store, the ledger and the providers only
ever hold the redacted text, and the caller only ever sees it restored.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import ConfigurationError, GuardRefusedError
from provmw.operations.images import ImageResponse
from provmw.operations.responses_api import ResponsesResponse
from provmw.pipeline import Next, R
from provmw.responses import CompletionResponse
from provmw.streams import OpenedStream
from provmw_guard.check import Check, ExternalCheck
from provmw_guard.detect import Analyzer, EntityAnalyzer, Finding, PatternAnalyzer, label, merged
from provmw_guard.options import GuardOptions
from provmw_guard.placeholders import Find, Redaction, reserved_names
from provmw_guard.policy import DenyRules, OutputWindow, size_refusal
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

FindPart = Callable[[str], Iterable[Finding]]


class GuardMiddleware:
    """Redacts personal data and secrets before a call is sent and restores them in its answer;
    refuses (``GuardRefusedError``) what a deny pattern, a size limit, a secret or the external
    check forbids, or only logs it in monitor mode."""

    name = "guard"
    priority = 825

    def __init__(self, options: GuardOptions | None = None, *, analyzers: Sequence[Analyzer] = (),
                 check: Check | None = None, pools: Mapping[str, Sequence[str]] | None = None) -> None:
        self.options = options = options or GuardOptions()
        self._pools = pools or {}  # a pool's deployments, by the pool's name: a call on a pool may reach any
        self.priority = options.priority
        self._entities = EntityAnalyzer(options.entities)
        self._patterns = PatternAnalyzer([(p.name, re.compile(p.regex)) for p in options.patterns])
        self._analyzers = (*(load_analyzer(spec) for spec in options.analyzers), *analyzers)
        self._secrets = SecretScanner()
        self._deny_in, self._deny_out = DenyRules(options.deny, "input"), DenyRules(options.deny, "output")
        self._check = check if check is not None or options.check is None else ExternalCheck(options.check)
        stage = options.check.stage if options.check is not None else "input"
        self._check_in = self._check is not None and stage in ("input", "both")
        self._check_out = self._check is not None and stage in ("output", "both")
        self._every_configuration = "*" in options.configurations
        self._every_tenant = "*" in options.tenants

    async def handle(self, ctx: ProviderCallContext, config: ProviderConfig, next: Next[R]) -> R:
        request = ctx.request
        if request is None:  # a context built without its request: nothing here to guard
            return await next(config)
        texts = request_texts(request)
        refused = self._input_refusals(texts, unredacted_texts(request))
        if self._check_out and ctx.facts.stream:  # a stream's answer cannot be checked before it is read
            refused.append("check:stream_output")
        self._refuse(ctx, "input", refused)
        redaction = Redaction(reserved_names(texts))
        find = self._finder(ctx, config)
        sent = request if find is None else redacted_request(request, redaction, find)
        if redaction.counts and getattr(request, "previous_response_id", None) is not None:
            # The provider holds the earlier turns with their placeholders, numbered by other calls: this
            # call's <EMAIL_1> could name someone else there, and be restored to the wrong value.
            self._refuse(ctx, "input", ["redact:stored_conversation"])
        if redaction.counts and log.isEnabledFor(logging.INFO):
            log.info("guard call %s: redacted %s", _token(ctx.correlation_id), _counts(redaction))
        if self._check_in:
            self._refuse(ctx, "input", await self._ask(request_texts(sent)))
        response = await (next(config) if sent is request else next(config, ctx.with_request(sent)))
        json = answers_json(request)
        if isinstance(response, OpenedStream):
            self._filter(ctx, response, redaction, json)
            return response
        if isinstance(response, CompletionResponse | ResponsesResponse | ImageResponse):
            return await self._answer(ctx, response, redaction, json)  # type: ignore[type-var]
        return response

    async def aclose(self) -> None:
        aclose = getattr(self._check, "aclose", None)
        if aclose is not None:
            await aclose()

    def _input_refusals(self, texts: Sequence[str], unredacted: Sequence[str]) -> list[str]:
        """The rules the request breaks. ``unredacted``: what it sends besides its messages (options, tool
        specs, a schema), which is never rewritten: a secret there is refused whatever ``secrets`` says."""
        refused = [rule for rule in (size_refusal(texts, self.options.max_input_chars, "input"),) if rule]
        if self._deny_in.rules:
            refused += self._deny_in.refusals([*texts, *unredacted])
        secrets = self.options.secrets
        if secrets != "off":
            scan, scanned = self._secrets.find, [*texts, *unredacted] if secrets == "block" else unredacted
            refused += sorted({f"secret:{f.rule}" for text in scanned for f in scan(text)})
        return refused

    def _applies(self, ctx: ProviderCallContext, config: ProviderConfig) -> bool:
        """Whether the redaction is for this call: its tenant, and its configuration or a fallback."""
        options = self.options
        if not self._every_tenant and not any(fnmatchcase(ctx.facts.tenant or "", p) for p in options.tenants):
            return False
        if self._every_configuration:
            return True
        chain = ctx.facts.chain or (config,)
        names = [name for c in chain for name in (c.identifier, *self._pools.get(c.identifier, ()))]
        return any(fnmatchcase(name, p) for name in names for p in options.configurations)

    def _finder(self, ctx: ProviderCallContext, config: ProviderConfig) -> Find | None:
        parts: list[FindPart] = []
        if self._applies(ctx, config):
            parts.append(self._entities.analyze)
            if self._patterns.patterns:
                parts.append(self._patterns.analyze)
            parts += [self._guarded(ctx, a) for a in self._analyzers]
        if self.options.secrets == "redact":
            parts.append(self._secret_findings)
        if not parts:
            return None
        if len(parts) == 1 and parts[0] == self._entities.analyze:
            return self._entities.analyze  # in order and never overlapping already

        def find(text: str) -> list[Finding]:
            found: list[Finding] = []
            for part in parts:
                found += part(text)
            return merged(found, len(text)) if found else found

        return find

    def _secret_findings(self, text: str) -> list[Finding]:
        return [Finding(f.start, f.end, "SECRET") for f in self._secrets.find(text)]

    def _guarded(self, ctx: ProviderCallContext, analyzer: Analyzer) -> FindPart:
        rule = f"analyzer:{type(analyzer).__name__}"

        def analyze(text: str) -> list[Finding]:
            try:  # checked here, so that a wrong span is this analyzer's failure, not a value left in place
                return [Finding(f.start, f.end, label(f.kind)) for f in merged(analyzer.analyze(text), len(text))]
            except Exception:  # what it raised may quote the text: not chained to the refusal
                pass
            self._refuse(ctx, "input", [rule])
            return []

        return analyze

    async def _ask(self, texts: Sequence[str]) -> list[str]:
        assert self._check is not None
        try:
            verdict = await self._check("\n\n".join(text for text in texts if text))
        except Exception as exc:  # a check failing its own way cannot run either: refused, unless monitoring
            log.warning("guard: the external check failed (%s)", type(exc).__name__)  # its message may quote the text
            verdict = "check:unavailable"
        return [] if verdict is None else [verdict]

    async def _answer(self, ctx: ProviderCallContext, response: Answer, redaction: Redaction, json: bool) -> Answer:
        if self._check_out:  # the provider's own text: what it says of a placeholder, never the value
            self._refuse(ctx, "output", await self._ask(answer_texts(response)))
        restored = restored_answer(response, redaction, json=json)
        texts = answer_texts(restored)
        rules = [rule for rule in (size_refusal(texts, self.options.max_output_chars, "output"),) if rule]
        self._refuse(ctx, "output", rules + self._deny_out.refusals(texts))
        return restored

    def _filter(self, ctx: ProviderCallContext, opened: OpenedStream, redaction: Redaction, json: bool) -> None:
        watching = bool(self._deny_out.rules) or self.options.max_output_chars is not None
        if not redaction.values and not watching:
            return
        window = OutputWindow(self._deny_out, self.options.max_output_chars)
        logged: set[str] = set()

        def watch(text: str) -> None:
            rules = [rule for rule in window.refusals(text) if rule not in logged]
            logged.update(rules)
            self._refuse(ctx, "output", rules)

        opened.filter_chunks(StreamRestorer(redaction, json=json, watch=watch if watching else None))

    def _refuse(self, ctx: ProviderCallContext, stage: str, rules: Sequence[str]) -> None:
        """Log each rule broken (its name only), and refuse with the first unless only monitoring."""
        if not rules:
            return
        call = _token(ctx.correlation_id)
        if self.options.monitor:
            for rule in rules:
                log.warning("guard call %s: would refuse (monitor) rule=%s stage=%s", call, rule, stage)
            return
        log.warning("guard call %s: refused rule=%s stage=%s%s", call, rules[0], stage,
                    f" (also {', '.join(rules[1:])})" if rules[1:] else "")
        raise GuardRefusedError(f"the guard refused the call's {stage}: rule {rules[0]}", rule=rules[0], stage=stage)


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


def _counts(redaction: Redaction) -> str:
    return " ".join(f"{kind}={count}" for kind, count in sorted(redaction.counts.items()))


def _token(value: str) -> str:
    """A caller-chosen identifier as one token of a log line."""
    return value if value.isprintable() and " " not in value and value else repr(value)
