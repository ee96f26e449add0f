"""The fallback walk, against a scripted inner layer."""

from __future__ import annotations

import logging

import pytest

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw.errors import (
    AuthenticationError,
    BudgetExceededError,
    CircuitOpenError,
    ConfigurationError,
    ContentPolicyError,
    ContextLengthExceededError,
    FallbackExhaustedError,
    InvalidRequestError,
    LocalRateLimitError,
    ProviderConnectionError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    UnsupportedOperationError,
)
from provmw.middleware.fallback import FallbackMiddleware
from provmw.testing import ScriptedNext, call_context

CTX = ProviderCallContext(ProviderOperation.CHAT)


def cfg(identifier: str, *fallbacks: str, **fields: object) -> ProviderConfig:
    return ProviderConfig(identifier=identifier, provider="openai", model=f"m-{identifier}",
                          fallbacks=fallbacks, **fields)  # type: ignore[arg-type]


def walk(*configs: ProviderConfig) -> FallbackMiddleware:
    return FallbackMiddleware({c.identifier: c for c in configs})


A, B, C = cfg("a", "b", "c"), cfg("b"), cfg("c")


def tried(inner: ScriptedNext) -> list[str]:
    return [c.identifier for c in inner.calls]


async def test_success_on_the_primary_tries_nothing_else() -> None:
    inner = ScriptedNext()
    response = await walk(A, B, C).handle(CTX, A, inner)
    assert (response.served_by, tried(inner)) == ("a", ["a"])


async def test_an_empty_chain_rethrows_the_error_unchanged() -> None:
    error = ProviderUnavailableError("down", status=503)
    with pytest.raises(ProviderUnavailableError) as caught:
        await walk(B).handle(CTX, B, ScriptedNext(error))
    assert caught.value is error


async def test_the_chain_is_walked_in_order_until_one_answers() -> None:
    inner = ScriptedNext(ProviderUnavailableError("a down"), RateLimitError("b busy"))
    response = await walk(A, B, C).handle(CTX, A, inner)
    assert (response.served_by, tried(inner)) == ("c", ["a", "b", "c"])


async def test_exhaustion_lists_every_attempt_with_the_primary_as_cause() -> None:
    errors = [ProviderUnavailableError("a"), ProviderTimeoutError("b"), ProviderConnectionError("c")]
    with pytest.raises(FallbackExhaustedError) as caught:
        await walk(A, B, C).handle(CTX, A, ScriptedNext(*errors))
    assert [(a.config_id, a.error) for a in caught.value.attempts] == list(zip("abc", errors, strict=True))
    assert caught.value.__cause__ is errors[0]


async def test_exhaustion_message_names_each_configuration_and_error() -> None:
    with pytest.raises(FallbackExhaustedError, match=r"a: ProviderUnavailableError.*b: RateLimitError"):
        await walk(A, B).handle(CTX, cfg("a", "b"), ScriptedNext(ProviderUnavailableError("x"), RateLimitError("y")))


async def test_inactive_fallbacks_are_skipped() -> None:
    inner = ScriptedNext(ProviderUnavailableError("a down"))
    response = await walk(A, cfg("b", active=False), C).handle(CTX, A, inner)
    assert (response.served_by, tried(inner)) == ("c", ["a", "c"])


async def test_an_inactive_primary_starts_at_its_first_active_fallback() -> None:
    inner = ScriptedNext()
    response = await walk(B, C).handle(CTX, cfg("a", "b", "c", active=False), inner)
    assert tried(inner) == ["b"] and response.served_by == "b"


async def test_an_inactive_configuration_with_nothing_active_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="'a' is inactive"):
        await walk().handle(CTX, cfg("a", active=False), ScriptedNext())


async def test_unknown_fallback_identifiers_are_skipped() -> None:
    inner = ScriptedNext(ProviderUnavailableError("a down"))
    response = await walk(C).handle(CTX, cfg("a", "ghost", "c"), inner)
    assert tried(inner) == ["a", "c"] and response.served_by == "c"


async def test_the_configurations_own_identifier_in_its_chain_is_ignored() -> None:
    inner = ScriptedNext(ProviderUnavailableError("a down"))
    await walk(B).handle(CTX, cfg("a", "a", "b", "a"), inner)
    assert tried(inner) == ["a", "b"]


async def test_duplicate_chain_entries_are_tried_once() -> None:
    inner = ScriptedNext(ProviderUnavailableError("a"), ProviderUnavailableError("b"))
    await walk(B, C).handle(CTX, cfg("a", "b", "b", "c"), inner)
    assert tried(inner) == ["a", "b", "c"]


@pytest.mark.parametrize("error", [
    AuthenticationError("bad key", status=401),
    InvalidRequestError("bad body", status=400),
    ContentPolicyError("refused", status=400),
    BudgetExceededError("user:ada", limit=1, spent=1, reserved=0, period="day"),
    ValueError("a bug in some layer"),
], ids=lambda e: type(e).__name__)
async def test_non_eligible_errors_propagate_unchanged_at_once(error: Exception) -> None:
    inner = ScriptedNext(error)
    with pytest.raises(type(error)) as caught:
        await walk(A, B, C).handle(CTX, A, inner)
    assert caught.value is error and tried(inner) == ["a"]


@pytest.mark.parametrize("error", [
    RateLimitError("429"), ProviderTimeoutError("slow"), ProviderUnavailableError("503"),
    ProviderConnectionError("refused"), CircuitOpenError("openai||m-a", 3.0),
    LocalRateLimitError("local", limit="requests_per_minute", config_id="a"), TimeoutError(),
], ids=lambda e: type(e).__name__)
async def test_fallback_eligible_errors_move_to_the_next_configuration(error: Exception) -> None:
    inner = ScriptedNext(error)
    assert (await walk(A, B).handle(CTX, cfg("a", "b"), inner)).served_by == "b"


async def test_a_non_eligible_error_from_a_fallback_propagates_unchanged() -> None:
    error = AuthenticationError("backup key revoked", status=401)
    with pytest.raises(AuthenticationError) as caught:
        await walk(A, B, C).handle(CTX, A, ScriptedNext(ProviderUnavailableError("a"), error))
    assert caught.value is error


async def test_context_length_moves_only_to_a_larger_window() -> None:
    small, same, larger = cfg("s", "same", "big", context_window=8000), cfg("same", context_window=8000), \
        cfg("big", context_window=128000)
    inner = ScriptedNext(ContextLengthExceededError("too long"))
    response = await walk(small, same, larger).handle(CTX, small, inner)
    assert tried(inner) == ["s", "big"] and response.served_by == "big"


async def test_context_length_with_an_unknown_window_does_not_fall_back() -> None:
    error = ContextLengthExceededError("too long")
    inner = ScriptedNext(error)
    with pytest.raises(ContextLengthExceededError):
        await walk(A, cfg("b", context_window=10**6)).handle(CTX, cfg("a", "b"), inner)
    assert tried(inner) == ["a"]


async def test_after_a_context_length_error_later_candidates_still_need_a_larger_window() -> None:
    small, big, tiny = (cfg("s", "big", "tiny", context_window=8000), cfg("big", context_window=128000),
                        cfg("tiny", context_window=4000))
    inner = ScriptedNext(ContextLengthExceededError("too long"), ProviderUnavailableError("big down"))
    with pytest.raises(FallbackExhaustedError):
        await walk(small, big, tiny).handle(CTX, small, inner)
    assert tried(inner) == ["s", "big"]


async def test_each_move_is_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="provmw.middleware.fallback")
    await walk(A, B).handle(CTX, cfg("a", "b", api_key="sk-hidden"), ScriptedNext(ProviderUnavailableError("x")))
    assert "a failed with ProviderUnavailableError" in caplog.text and "sk-hidden" not in caplog.text


async def test_a_configuration_that_cannot_honour_the_call_is_skipped_unsent() -> None:
    ctx = call_context(needs=frozenset({"chat", "schema"}), unmet={"b": ("schema",)})
    inner = ScriptedNext(ProviderUnavailableError("down", status=503))
    response = await walk(A, B, C).handle(ctx, A, inner)
    assert (response.served_by, tried(inner)) == ("c", ["a", "c"])


async def test_exhaustion_names_the_skipped_configuration_and_why() -> None:
    ctx = call_context(needs=frozenset({"chat", "response_format"}), unmet={"b": ("response_format",)})
    with pytest.raises(FallbackExhaustedError) as caught:
        await walk(cfg("a", "b"), B).handle(ctx, cfg("a", "b"), ScriptedNext(RateLimitError("slow", status=429)))
    first, skipped = caught.value.attempts
    assert (first.sent, skipped.sent, skipped.config_id) == (True, False, "b")
    assert isinstance(skipped.error, UnsupportedOperationError) and skipped.error.operation == "response_format"
    assert "b: skipped, UnsupportedOperationError" in str(caught.value)
