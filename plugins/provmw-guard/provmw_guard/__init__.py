"""provmw-guard: personal data redacted before a call is sent and restored in its answer, secrets
blocked, deny patterns, size limits and an external check on what goes in and comes out.

Enable by installing; configure under ``[middleware.guard]`` (the README lists every key)::

    [middleware.guard]
    mode = "enforce"                 # or "monitor": log what would be refused, refuse nothing
    entities = ["email", "phone", "card", "iban", "ip"]
    configurations = ["*"]           # the redaction applies to these configurations (fnmatch)...
    tenants = ["*"]                  # ...and these tenants
    secrets = "block"                # or "redact", or "off"

Named policies, ``[middleware.guard.policies.NAME]``, each override some of these fields; a call
picks one with ``controls={"guard_policy": NAME}``.

A refusal is a ``provmw.errors.GuardRefusedError`` naming its rule and stage, never the text;
the log (``provmw.guard``) records rule names and counts, never a value.
"""

from __future__ import annotations

from collections.abc import Iterable

import provmw
from provmw.settings import Settings, options_from
from provmw_guard.check import JUDGE_PROMPT, ExternalCheck
from provmw_guard.detect import ENTITIES, Analyzer, EntityAnalyzer, Finding, PatternAnalyzer
from provmw_guard.middleware import GuardMiddleware, load_analyzer
from provmw_guard.options import CheckOptions, DenyRule, GuardOptions, PatternOption
from provmw_guard.placeholders import PLACEHOLDER, Redaction
from provmw_guard.secrets import SECRET_RULES, SecretScanner
from provmw_guard.stream import StreamRestorer

__all__ = ["ENTITIES", "JUDGE_PROMPT", "PLACEHOLDER", "SECRET_RULES", "Analyzer", "CheckOptions", "DenyRule",
           "EntityAnalyzer", "ExternalCheck", "Finding", "GuardMiddleware", "GuardOptions", "PatternAnalyzer",
           "PatternOption", "Redaction", "SecretScanner", "StreamRestorer", "load_analyzer", "provmw_middleware"]


@provmw.hookimpl
def provmw_middleware(settings: Settings) -> Iterable[GuardMiddleware]:
    options = options_from(GuardOptions, settings.section(GuardMiddleware.name),
                           f"{settings.source}: [middleware.guard]")
    pools = {name: pool.members for name, pool in settings.pools.items()}
    return [GuardMiddleware(options, pools=pools)]
