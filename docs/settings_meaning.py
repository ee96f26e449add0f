"""What each settings key means, by section: the one hand-written part of the configuration reference.

Keys, types, defaults and allowed values are generated from the code (``docs/gen_settings.py``);
``tests/test_docs.py`` fails when a key the code accepts has no entry here, or an entry names a key
the code no longer has. The key ``"(section)"`` replaces a section's introduction.
"""

from __future__ import annotations

__all__ = ["MEANING"]

_ENABLED = "`false` leaves this layer out of the stack (it is never constructed)."

MEANING: dict[str, dict[str, str]] = {
    "top": {
        "default": "The configuration a call uses when it names none (with one configuration, that one).",
        "configurations": "Named configurations, one table each.",
        "pools": "Deployment pools, one table each: a name over several configurations, one chosen per attempt.",
        "aliases": "Public names for configurations or pools (`gpt4 = \"gpt-4o\"`).",
        "middleware": "One table per middleware name, built-in or from a plugin.",
        "plugins": "Which installed plugins may load.",
        "state": "Shared state across processes and hosts, served by a plugin.",
        "security": "Where a call's own `base_url` may take a key.",
        "http": "How much of an answer is read.",
    },
    "pools": {
        "members": "The deployments: configuration names (inline `deployments` join them).",
        "strategy": "How one is chosen among those that may take the call: `order`, `weighted`, `least_busy`, "
                    "`latency`, `headroom` or `affinity` (ADR 0051).",
        "weights": "`weighted`: a deployment's weight (1 when not listed).",
        "rpm": "A deployment's requests a minute: past it, the pool sends elsewhere (unlimited when not listed).",
        "tpm": "A deployment's tokens a minute (the call's estimate and output bound), as `rpm`.",
        "affinity": "`affinity`: what keeps a call with its deployment, the first the call has: the `session` "
                    "control, the call's `user`, the `prefix` of its prompt.",
        "then": "`affinity`: the strategy for a key not seen yet.",
        "explore": "`latency`: the share of choices made at random, so a recovered deployment is measured again.",
        "affinity_ttl_s": "`affinity`: how long a key stays with its deployment after its last call.",
        "fallbacks": "The pool's fallback chain, as a configuration's.",
        "deployments": "Inline deployments, `[pools.NAME.deployments.DEP]`: the configuration `NAME/DEP`, its "
                       "`base` configuration with the keys it changes (`base_url`, `api_key_env`, `model`...).",
    },
    "plugins": {
        "autoload": "`false` loads no installed plugin (as `PROVMW_DISABLE_PLUGIN_AUTOLOAD=1`).",
        "allow": "Only these plugins load: entry-point names (`redis`) or `distribution:name`; "
                 "`PROVMW_PLUGINS` overrides it.",
        "block": "These plugins never load; `PROVMW_BLOCKED_PLUGINS` adds to it.",
    },
    "configurations": {
        "provider": "An installed provider adapter: `openai`, `anthropic`, or a plugin's.",
        "model": "The model name the provider knows.",
        "base_url": "Where requests go; unset is the provider's public API. Any OpenAI-compatible "
                    "server works with `provider = \"openai\"`.",
        "api_key_env": "The environment variable holding the key, read when the configuration is first used. "
                       "Keys never go in the file.",
        "options": "Generation options sent with every call (`temperature`, `max_tokens`, ...; see "
                   "[per-call controls](../controls.md)).",
        "fallbacks": "Configurations tried in order when this one fails with a fallback-eligible error.",
        "timeout_s": "The time limit of each attempt, in seconds.",
        "first_chunk_timeout_s": "A streamed attempt's limit to its first content chunk, in seconds "
                                 "(unset: `timeout_s`); past it the stream is retried or failed over.",
        "stream_idle_timeout_s": "A stream's limit between chunks after the first, in seconds (unset: "
                                 "`timeout_s`); past it the stream raises `StreamInterruptedError`.",
        "active": "`false` skips this configuration, as a call's first choice and in fallback chains.",
        "headers": "Extra HTTP headers sent with every request.",
        "headers_env": "Headers whose values are read from environment variables "
                       "(`{ \"api-key\" = \"AZURE_OPENAI_KEY\" }`), like `api_key_env`.",
        "context_window": "The model's context in tokens: on a context-length error, fallback skips "
                          "configurations whose window is not larger.",
        "price": "This configuration's price, instead of the bundled price table's.",
    },
    "price": {
        "input_usd_per_mtok": "USD per million input tokens.",
        "output_usd_per_mtok": "USD per million output tokens.",
        "cached_input_usd_per_mtok": "USD per million input tokens read from the provider's prompt cache "
                                     "(unset: the input rate).",
        "cache_write_5m_usd_per_mtok": "USD per million tokens written to a 5-minute prompt cache "
                                       "(unset: 1.25 x the input rate).",
        "cache_write_1h_usd_per_mtok": "USD per million tokens written to a 1-hour prompt cache "
                                       "(unset: 2 x the input rate).",
        "max_output_tokens": "The model's output ceiling: a strict budget reserves it when a call sets no "
                             "`max_tokens`.",
        "tiers": "Long-context rates, each replacing every rate above a number of input tokens.",
        "units": "USD per unit of what is billed by other measures than tokens (`image:1024x1024:high`, "
                 "`audio_second`, `character`, `search_unit`; ADR 0053).",
    },
    "price.tiers": {
        "above_input_tokens": "The tier applies to calls whose input tokens exceed this (tiers rise).",
        "input_usd_per_mtok": "USD per million input tokens in this tier.",
        "output_usd_per_mtok": "USD per million output tokens in this tier.",
        "cached_input_usd_per_mtok": "Cache reads in this tier (unset: the tier's input rate).",
        "cache_write_5m_usd_per_mtok": "5-minute cache writes in this tier (unset: 1.25 x its input rate).",
        "cache_write_1h_usd_per_mtok": "1-hour cache writes in this tier (unset: 2 x its input rate).",
    },
    "state": {
        "url": "The state server; its scheme picks the plugin that serves it (`redis://`: provmw-redis). "
               "Every other key in `[state]` is that plugin's.",
        "shared": "The concerns kept in the shared state; the others stay in this process.",
    },
    "security": {
        "ad_hoc_destinations": "The classes of address a call's own `base_url` may reach: `public`, "
                               "`private`, `loopback`. Link-local and cloud metadata addresses never are.",
    },
    "http": {
        "max_body_bytes": "The largest answer body read; a larger one is a `ResponseTooLargeError`.",
        "max_event_bytes": "The largest line or event of a stream.",
        "max_stream_bytes": "The most bytes one stream may send, every event together; past it the stream "
                            "ends with a `StreamTooLargeError` (after its first chunk, as the cause of a "
                            "`StreamInterruptedError`), its end settled on what was seen.",
        "stream_idle_s": "A stream with no event (keepalives aside) this long is a timeout.",
    },
    "middleware.deadline": {
        "enabled": _ENABLED,
        "default_s": "The time limit of a whole call, across retries and fallbacks, when the call sets no "
                     "`deadline_s` control.",
    },
    "middleware.usage_hits": {"enabled": _ENABLED},
    "middleware.idempotency": {
        "enabled": _ENABLED,
        "window_s": "How long a call's `idempotency_key` is remembered.",
        "lock_s": "How long a first call's claim on its key holds, if its process dies.",
        "max_entries": "First answers this process keeps, at most.",
        "max_bytes": "Bytes of first answers this process keeps, at most.",
    },
    "middleware.cache": {
        "enabled": _ENABLED,
        "operations": "Operations whose answers are cached: `embedding`, `chat`, `completion`, `vision`, "
                      "`tools`. Chat-like ones only when deterministic (temperature 0 or a seed).",
        "ttl_s": "How long an answer is served from the cache.",
        "max_entries": "Entries the in-process cache keeps, at most.",
        "max_bytes": "Bytes the in-process cache keeps, at most (answers counted by what they hold in memory).",
        "shared_namespaces": "Cache namespaces whose entries every tenant may share.",
        "lock_s": "Across processes, how long one process's claim on a missed key holds.",
    },
    "middleware.budget": {
        "enabled": _ENABLED,
        "limits": "The budgets, one `[[middleware.budget.limits]]` table each.",
        "mode": "`strict` reserves a true worst case before each call; `estimate` reserves an estimate.",
        "timezone": "Where days, weeks and months roll over (an IANA name).",
        "lease_s": "How long a reservation outlives a process that died holding it.",
        "store": "Where spend is kept: `sqlite` (the file at `path`) or `memory`.",
        "path": "The SQLite file: relative to the settings file; with no settings file, in the user's "
                "data folder.",
        "busy_timeout_s": "How long a write waits for another process's lock on the file.",
        "synchronous": "`\"full\"`: each reservation and settle is on disk before the call goes on "
                       "(survives power loss; slower); `\"normal\"` survives a crash of the process.",
        "calls_per_block": "At `\"normal\"`: how many calls' worth of room a process reserves in one "
                           "transaction (a block never holds more than 1/16 of a limit); `1` reserves each call "
                           "on its own (as at `\"full\"` and on a shared store).",
        "failure_policy": "When the store fails: `fail_closed` refuses calls before sending, `fail_open` "
                          "lets them go uncounted.",
    },
    "middleware.budget.limits": {
        "scope": "Whose bucket: `user`, `tenant`, `configuration` or `global`.",
        "period": "When the bucket empties: `day`, `week`, `month` or never (`total`).",
        "match": "Which subject: `*` gives each its own bucket, a name limits that one only.",
        "max_cost_usd": "The most the bucket may spend in a period, in USD.",
        "max_tokens": "The most tokens in a period.",
        "max_requests": "The most requests in a period.",
    },
    "middleware.fallback": {"enabled": _ENABLED},
    "middleware.rate_limit": {
        "enabled": _ENABLED,
        "max_wait_s": "How long a call may wait for admission before `LocalRateLimitError`.",
        "limits": "Limits per configuration identifier (`*`: every other one).",
    },
    "middleware.rate_limit.limits": {
        "requests_per_minute": "Requests per minute (unset: unlimited).",
        "tokens_per_minute": "Tokens per minute, estimated before the call and corrected after.",
        "max_concurrency": "Calls in flight at once.",
    },
    "middleware.retry": {
        "(section)": "Retry the same configuration on retryable errors, with full-jitter backoff, "
                     "honouring Retry-After, within a retry budget.",
        "enabled": _ENABLED,
        "max_attempts": "Attempts per configuration, the first included.",
        "base_s": "The backoff's scale: retry n waits a random time up to `base_s` x 2^(n-1), capped by "
                  "`max_wait_s` (full jitter).",
        "max_wait_s": "The longest wait; a longer Retry-After skips retrying, so the fallback answers.",
        "budget_share": "Retries add at most this share on top of first attempts.",
        "budget_initial": "Retries allowed before any first attempt has saved some up.",
        "budget_max": "The most retries that can be saved up.",
    },
    "middleware.circuit_breaker": {
        "enabled": _ENABLED,
        "window_size": "The last calls a breaker judges by.",
        "min_calls": "Calls in the window before a breaker may open.",
        "failure_rate": "The share of failed calls that opens the breaker.",
        "slow_call_s": "A call longer than this counts as slow (unset: none is).",
        "slow_call_rate": "The share of slow calls that opens the breaker.",
        "open_s": "How long an open breaker refuses before it probes.",
        "half_open_probes": "Probe calls let through while half open.",
    },
    "middleware.usage": {
        "enabled": _ENABLED,
        "store": "Where records go: `sqlite` (the file at `path`), `memory` (kept nowhere), or a URL a "
                 "plugin serves (`postgresql://...`).",
        "path": "The SQLite ledger: relative to the settings file; with no settings file, in the user's "
                "data folder (`provmw check` prints where).",
        "failure_policy": "When the store fails: `fail_open` spills records to `<path>.spill` and goes on; "
                          "`fail_closed` refuses calls while records wait outside the store.",
        "max_journal_records": "Records waiting outside a failing store before `fail_closed` refuses calls.",
        "synchronous": "`normal`: a record survives the process being killed; `full`: a power loss too.",
        "busy_timeout_s": "How long a write waits for another process's lock on the file.",
    },
    "middleware.timeout": {"enabled": _ENABLED},
    "middleware.pool": {"enabled": "`false` takes the layer out: a call on a pool is then refused (the layer "
                                  "chooses its deployment). Present only where the settings declare pools."},
    "middleware.structured_output": {"enabled": _ENABLED},
    "plugin.call_log": {
        "enabled": _ENABLED,
        "level": "The logging level of the per-call line (`\"INFO\"`, `\"DEBUG\"` or a number).",
        "log_text": "Also log the answer's text, redacted and cut.",
        "max_text_chars": "How much of the text is logged.",
    },
    "plugin.guard": {
        "enabled": _ENABLED,
        "mode": "`enforce` refuses what a rule forbids; `monitor` logs what it would refuse and sends the call.",
        "entities": "The kinds of personal data redacted: `email`, `phone`, `card` (Luhn-checked), `iban` "
                    "(mod-97-checked), `ip`.",
        "configurations": "The redaction applies to calls on these configurations, or with one of them in the "
                          "fallback chain (fnmatch patterns; `[\"*\"]`: every call).",
        "tenants": "...and from these tenants (fnmatch patterns; `[\"*\"]` includes calls without one).",
        "secrets": "Provider and cloud keys, tokens and private key blocks in a request: `block` refuses the call, "
                   "`redact` sends `<SECRET_1>`, `off` lets them through.",
        "patterns": "Custom kinds to redact, one `[[middleware.guard.patterns]]` table each.",
        "deny": "Patterns that refuse the call where they match, one `[[middleware.guard.deny]]` table each.",
        "max_input_chars": "Refuse a request whose text is longer than this (unset: no limit).",
        "max_output_chars": "Refuse an answer (or end a stream) longer than this (unset: no limit).",
        "check": "An external check, `[middleware.guard.check]`; fails closed unless `mode = \"monitor\"`.",
        "analyzers": "Extra detectors, `\"module:attr\"`: an object with `analyze(text)` giving spans to redact.",
        "policies": "Named policies, one `[middleware.guard.policies.NAME]` table each, holding any of `mode`, "
                    "`entities`, `configurations`, `tenants`, `secrets`, `patterns`, `deny`, `max_input_chars`, "
                    "`max_output_chars`, `check`; a field it does not give is the top-level one. A call picks one "
                    "with `controls={\"guard_policy\": NAME}` (a gateway key with `--guard NAME`).",
        "priority": "Its place in the stack (ADR 0048): 825 is inside `deadline` and above every layer that stores "
                    "or sends; above 950 the call log's and spans' content capture hold only redacted text too, "
                    "but the deadline no longer bounds the external check.",
    },
    "plugin.guard.patterns": {
        "name": "The label of its placeholders: `EMPLOYEE_ID` gives `<EMPLOYEE_ID_1>`.",
        "regex": "What to redact (a Python regular expression).",
    },
    "plugin.guard.deny": {
        "rule": "The rule's name, in the refusal (`deny:<rule>`) and the log; never the matched text.",
        "regex": "Where it matches, the call is refused (a Python regular expression).",
        "stage": "`input` (the caller's request), `output` (the restored answer) or `both`.",
    },
    "plugin.guard.check": {
        "base_url": "The endpoint: `{base_url}/moderations` or `{base_url}/chat/completions`.",
        "kind": "`moderation` (OpenAI's shape) or `judge` (a chat model answering ALLOW or DENY).",
        "model": "The model the check asks.",
        "api_key_env": "The environment variable holding its key, read when the check runs.",
        "timeout_s": "A check slower than this refuses the call (`check:timeout`).",
        "stage": "What is checked: `input` (the redacted request), `output` (the answer) or `both`.",
    },
    "plugin.otel": {
        "enabled": _ENABLED,
        "capture_content": "`true` records the answer's text, redacted, on the call span.",
        "traceparent_to": "The configurations whose requests carry a W3C `traceparent` header (`[\"*\"]`: all).",
    },
    "plugin.azure": {},
    "plugin.bedrock": {
        "(section)": "Amazon Bedrock's Converse API. `base_url` is the endpoint, and its host names the region; "
                     "unset, the region is botocore's (`AWS_DEFAULT_REGION` or the profile's). A configuration "
                     "with a key (`api_key_env`; ad-hoc calls read `AWS_BEARER_TOKEN_BEDROCK`) sends it as a "
                     "Bedrock API key; one without is signed with AWS SigV4 from botocore's credential chain.",
    },
    "plugin.gemini": {},
    "plugin.redis": {
        "key_prefix": "The prefix of every Redis key provmw writes.",
        "timeout_s": "How long one Redis command may take before the server counts as down.",
        "retry_s": "How long a down server is skipped before trying it again.",
        "signing_key_env": "The variable holding the cache signing key (default `PROVMW_CACHE_SIGNING_KEY`).",
        "unsigned_cache": "`true` shares the cache without signing it (see SECURITY.md).",
        "slot_lease_s": "A dead worker's concurrency slot frees after this.",
        "probe_lease_s": "Half-open probes silent this long are presumed dead.",
        "max_connections": "Connections in each process's pool, at most.",
    },
    "plugin.postgres": {
        "table": "The table the records go to (created if missing).",
        "schema": "The table's schema.",
        "connect_timeout_s": "How long connecting may take before the store counts as down.",
        "statement_timeout_s": "How long one statement may take.",
        "write_timeout_s": "How long a write may go unanswered, on this side of the wire, before the store "
                           "counts as down and the records spill (a server that accepted and went silent).",
    },
}
