from __future__ import annotations

import pickle

import pytest

import provmw.errors as errors
from provmw.errors import (
    AuthenticationError,
    BudgetExceededError,
    CircuitOpenError,
    ContentPolicyError,
    ContextLengthExceededError,
    FallbackAttempt,
    FallbackExhaustedError,
    InvalidRequestError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    RateLimitError,
    disposition,
)


@pytest.mark.parametrize(
    ("error", "retryable", "may_fall_back", "endpoint_failed"),
    [
        (RateLimitError("x"), True, True, True),
        (RateLimitError("x", code="insufficient_quota"), False, True, False),
        (ProviderTimeoutError("x"), True, True, True),
        (ProviderUnavailableError("x"), True, True, True),
        (ProviderConnectionError("x"), True, True, True),
        (AuthenticationError("x"), False, False, False),
        (InvalidRequestError("x"), False, False, False),
        (ContextLengthExceededError("x"), False, False, False),
        (ContentPolicyError("x"), False, False, False),
        (errors.StructuredOutputError("x", problem="p"), False, True, False),
        (errors.UnsupportedOperationError("anthropic", "schema"), False, False, False),
        (CircuitOpenError("b", 1.0), False, True, False),
        (BudgetExceededError("u", limit=1, spent=1, reserved=0, period="day"), False, False, False),
        (TimeoutError(), True, True, True),
        (ValueError(), False, False, False),
    ],
)
def test_disposition_table(error: BaseException, retryable: bool, may_fall_back: bool, endpoint_failed: bool) -> None:
    assert disposition(error) == errors.Disposition(retryable, may_fall_back, endpoint_failed)


def test_should_retry_hint_overrides_the_class() -> None:
    assert not disposition(ProviderUnavailableError("x", should_retry=False)).retryable
    assert disposition(InvalidRequestError("x", should_retry=True)).retryable


def test_every_error_class_is_in_the_docstring_tree() -> None:
    doc = errors.__doc__ or ""
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, errors.ProvmwError)]
    assert len(classes) > 15
    for cls in classes:
        assert cls.__name__ in doc, cls.__name__


def test_provider_error_str_names_provider_model_status() -> None:
    error = RateLimitError("slow down", provider="openai", model="gpt", status=429, retry_after_s=2.0)
    assert str(error) == "openai/gpt (HTTP 429): slow down"


@pytest.mark.parametrize(
    "error",
    [
        RateLimitError("x", provider="p", model="m", status=429, retry_after_s=1.5, code="c"),
        CircuitOpenError("p/m", 3.0),
        BudgetExceededError("user:ada", limit=1.0, spent=0.9, reserved=0.2, period="day", resets_at="t"),
        FallbackExhaustedError([FallbackAttempt("a", ProviderTimeoutError("t"))]),
        errors.UnsupportedOperationError("anthropic", "embedding"),
        errors.UnsupportedOperationError("anthropic", "schema", configuration="an"),
        errors.StructuredOutputError("bad answer", problem="at city: 3 is not a string", provider="p", model="m"),
        FallbackExhaustedError([FallbackAttempt("a", RateLimitError("r")),
                                FallbackAttempt("b", errors.UnsupportedOperationError("x", "tools"), sent=False)]),
        errors.DestinationRefusedError("localhost", "127.0.0.1", "loopback", "allowed only when ..."),
        errors.LocalRateLimitError("rpm", limit="rpm", config_id="oa", retry_after_s=2.0),
        errors.AttemptTimeoutError("slow", limit_s=3.0, provider="p", model="m"),
        errors.FirstChunkTimeoutError("no first chunk", limit_s=0.5, provider="p"),
        errors.StreamInterruptedError("cut", chunks=4, provider="p", model="m", status=200),
        errors.ResponseTooLargeError("big", limit_bytes=10, provider="p"),
        errors.DeadlineExceededError(5.0, 5.2),
        errors.ProviderConnectionError("refused", never_sent=True),
    ],
)
def test_errors_pickle_with_their_facts(error: errors.ProvmwError) -> None:
    restored = pickle.loads(pickle.dumps(error))
    assert type(restored) is type(error)
    assert str(restored) == str(error)
    assert vars(restored) == vars(error) or isinstance(error, FallbackExhaustedError)


def test_fallback_exhausted_lists_every_attempt() -> None:
    attempts = [FallbackAttempt("a", ProviderTimeoutError("t1")), FallbackAttempt("b", RateLimitError("r"))]
    error = FallbackExhaustedError(attempts)
    assert error.attempts == tuple(attempts)
    assert "a: ProviderTimeoutError" in str(error)
    assert "b: RateLimitError" in str(error)


def test_budget_error_names_bucket_limit_spent_reserved_period() -> None:
    error = BudgetExceededError("tenant:acme", limit=1.0, spent=0.75, reserved=0.3, period="month",
                                resets_at="2026-12-01T00:00:00-08:00")
    for fact in ("tenant:acme", "limit 1", "spent 0.75", "reserved 0.3", "month", "2026-12-01"):
        assert fact in str(error)


def test_provider_errors_are_provmw_errors() -> None:
    assert issubclass(ProviderError, errors.ProvmwError)
    assert issubclass(ProviderConnectionError, ProviderUnavailableError)


def test_a_budget_refusal_prints_money_without_an_exponent() -> None:
    error = BudgetExceededError("user:ada", limit=0.02, spent=3e-06, reserved=0, period="day")
    assert "limit 0.02, spent 0.000003, reserved 0" in str(error)
