"""Policies on a call's text: deny patterns and size limits, each refusal named by its rule, and
:class:`GuardPolicy`, one policy's rules compiled once (the top-level settings, or a named policy's).

What a policy finds is named, never shown: a refusal and a log line carry the rule's name
(``deny:no-ssn``, ``size:input``, ``secret:aws_access_key_id``), never the text that matched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from fnmatch import fnmatchcase

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext
from provmw.errors import GuardRefusedError
from provmw_guard.check import Check
from provmw_guard.detect import Analyzer, EntityAnalyzer, Finding, PatternAnalyzer, label, merged
from provmw_guard.options import DenyRule, GuardOptions
from provmw_guard.placeholders import Find
from provmw_guard.secrets import SecretScanner

__all__ = ["DenyRules", "GuardPolicy", "OutputWindow", "call_token", "size_refusal"]

log = logging.getLogger("provmw.guard")

FindPart = Callable[[str], Iterable[Finding]]

# A deny pattern is searched across stream chunks in the last this-many characters and the new text.
_STREAM_OVERLAP_CHARS = 256


class DenyRules:
    """The deny patterns of one stage, compiled once."""

    def __init__(self, rules: Iterable[DenyRule], stage: str) -> None:
        self.rules = tuple((f"deny:{r.rule}", re.compile(r.regex)) for r in rules if r.stage in (stage, "both"))

    def refusals(self, texts: Sequence[str]) -> list[str]:
        """The rules that match any of ``texts``, in their order."""
        return [rule for rule, pattern in self.rules if any(pattern.search(text) for text in texts)]


def size_refusal(texts: Sequence[str], limit: int | None, stage: str) -> str | None:
    """``size:<stage>`` when the texts hold more characters than ``limit`` together."""
    if limit is None or sum(map(len, texts)) <= limit:
        return None
    return f"size:{stage}"


class OutputWindow:
    """Output policies over a stream: the characters so far, and the deny patterns across chunk edges."""

    def __init__(self, deny: DenyRules, limit: int | None) -> None:
        self._deny, self._limit = deny, limit
        self._seen, self._tail = 0, ""

    def refusals(self, text: str) -> list[str]:
        """The rules the stream breaks with ``text`` added to what it already said."""
        self._seen += len(text)
        refused = [] if self._limit is None or self._seen <= self._limit else ["size:output"]
        if self._deny.rules and text:
            window = self._tail + text
            refused += self._deny.refusals([window])
            self._tail = window[-_STREAM_OVERLAP_CHARS:]
        return refused


class GuardPolicy:
    """One policy's rules, compiled once: what it refuses, what it redacts and for which calls, its check.

    ``analyzers`` and ``pools`` are the layer's, the same for every policy; ``check`` is the top-level
    one unless the policy names its own. A refusal is logged by its rule and raised, unless monitoring."""

    def __init__(self, options: GuardOptions, *, check: Check | None = None, analyzers: Sequence[Analyzer] = (),
                 pools: Mapping[str, Sequence[str]] | None = None, secrets: SecretScanner | None = None) -> None:
        self.options, self.check = options, check
        self._pools = pools or {}  # a pool's deployments, by the pool's name: a call on a pool may reach any
        self._entities = EntityAnalyzer(options.entities)
        self._patterns = PatternAnalyzer([(p.name, re.compile(p.regex)) for p in options.patterns])
        self._analyzers = tuple(analyzers)
        self._secrets = secrets or SecretScanner()
        self.deny_in, self.deny_out = DenyRules(options.deny, "input"), DenyRules(options.deny, "output")
        stage = options.check.stage if options.check is not None else "input"
        self.check_in = check is not None and stage in ("input", "both")
        self.check_out = check is not None and stage in ("output", "both")
        self._every_configuration = "*" in options.configurations
        self._every_tenant = "*" in options.tenants

    def input_refusals(self, texts: Sequence[str], unredacted: Sequence[str]) -> list[str]:
        """The rules the request breaks. ``unredacted``: what it sends besides its messages (options, tool
        specs, a schema), which is never rewritten: a secret there is refused whatever ``secrets`` says."""
        refused = [rule for rule in (size_refusal(texts, self.options.max_input_chars, "input"),) if rule]
        if self.deny_in.rules:
            refused += self.deny_in.refusals([*texts, *unredacted])
        secrets = self.options.secrets
        if secrets != "off":
            scan, scanned = self._secrets.find, [*texts, *unredacted] if secrets == "block" else unredacted
            refused += sorted({f"secret:{f.rule}" for text in scanned for f in scan(text)})
        return refused

    def applies(self, ctx: ProviderCallContext, config: ProviderConfig) -> bool:
        """Whether the redaction is for this call: its tenant, and its configuration or a fallback."""
        options = self.options
        if not self._every_tenant and not any(fnmatchcase(ctx.facts.tenant or "", p) for p in options.tenants):
            return False
        if self._every_configuration:
            return True
        chain = ctx.facts.chain or (config,)
        names = [name for c in chain for name in (c.identifier, *self._pools.get(c.identifier, ()))]
        return any(fnmatchcase(name, p) for name in names for p in options.configurations)

    def finder(self, ctx: ProviderCallContext, config: ProviderConfig) -> Find | None:
        """What finds the values to redact in this call's texts; None when nothing is redacted."""
        parts: list[FindPart] = []
        if self.applies(ctx, config):
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
            self.refuse(ctx, "input", [rule])
            return []

        return analyze

    async def ask(self, texts: Sequence[str]) -> list[str]:
        """The external check's verdict on ``texts``: no rule, or the one it refuses by."""
        assert self.check is not None
        try:
            verdict = await self.check("\n\n".join(text for text in texts if text))
        except Exception as exc:  # a check failing its own way cannot run either: refused, unless monitoring
            log.warning("guard: the external check failed (%s)", type(exc).__name__)  # its message may quote the text
            verdict = "check:unavailable"
        return [] if verdict is None else [verdict]

    def refuse(self, ctx: ProviderCallContext, stage: str, rules: Sequence[str]) -> None:
        """Log each rule broken (its name only), and refuse with the first unless only monitoring."""
        if not rules:
            return
        call = call_token(ctx)
        if self.options.monitor:
            for rule in rules:
                log.warning("guard call %s: would refuse (monitor) rule=%s stage=%s", call, rule, stage)
            return
        log.warning("guard call %s: refused rule=%s stage=%s%s", call, rules[0], stage,
                    f" (also {', '.join(rules[1:])})" if rules[1:] else "")
        raise GuardRefusedError(f"the guard refused the call's {stage}: rule {rules[0]}", rule=rules[0], stage=stage)


def call_token(ctx: ProviderCallContext) -> str:
    """The call's caller-chosen identifier as one token of a log line."""
    value = ctx.correlation_id
    return value if value.isprintable() and " " not in value and value else repr(value)
