"""The external check against a real loopback endpoint: its verdicts, and every way it cannot give one."""

from __future__ import annotations

import pytest
from provmw_guard import CheckOptions, ExternalCheck

from .conftest import CheckServer


async def verdict(options: CheckOptions, text: str = "hello", environ: dict[str, str] | None = None) -> str | None:
    check = ExternalCheck(options, environ=environ or {})
    try:
        return await check(text)
    finally:
        await check.aclose()


async def test_a_moderation_that_flags_nothing_allows(check_server: CheckServer) -> None:
    assert await verdict(CheckOptions(base_url=check_server.url)) is None
    assert check_server.bodies == [{"model": "omni-moderation-latest", "input": "hello"}]


async def test_a_flag_names_the_category_never_the_text(check_server: CheckServer) -> None:
    check_server.answer = {"results": [{"flagged": True, "categories": {"violence": True, "hate": False}}]}
    assert await verdict(CheckOptions(base_url=check_server.url)) == "check:flagged:violence"


@pytest.mark.parametrize(("content", "expected"), [("ALLOW", None), ("deny.", "check:denied"),
                                                   ("I think it is fine", "check:invalid_answer")])
async def test_a_judge_answers_allow_or_deny(check_server: CheckServer, content: str, expected: str | None) -> None:
    check_server.answer = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    assert await verdict(CheckOptions(base_url=check_server.url, kind="judge", model="judge-1")) == expected
    assert check_server.bodies[0]["messages"][-1] == {"role": "user", "content": "hello"}


@pytest.mark.parametrize("answer", ["{broken", {"results": []}, {"results": [{"flagged": "no"}]}, [1, 2]])
async def test_an_answer_that_does_not_parse_refuses(check_server: CheckServer, answer: object) -> None:
    check_server.answer = answer
    assert await verdict(CheckOptions(base_url=check_server.url)) == "check:invalid_answer"


async def test_an_error_status_refuses(check_server: CheckServer) -> None:
    check_server.status = 503
    assert await verdict(CheckOptions(base_url=check_server.url)) == "check:unavailable"


async def test_a_check_slower_than_its_limit_refuses(check_server: CheckServer) -> None:
    check_server.answer = None  # the endpoint holds the request
    assert await verdict(CheckOptions(base_url=check_server.url, timeout_s=0.05)) == "check:timeout"


async def test_a_check_that_is_down_refuses(closed_port_url: str) -> None:
    assert await verdict(CheckOptions(base_url=closed_port_url)) == "check:unavailable"


async def test_the_key_comes_from_its_environment_variable(check_server: CheckServer) -> None:
    options = CheckOptions(base_url=check_server.url, api_key_env="MOD_KEY")
    await verdict(options, environ={"MOD_KEY": "sk-mod"})
    assert check_server.headers[0]["Authorization"] == "Bearer sk-mod"


async def test_a_missing_key_refuses_without_asking(check_server: CheckServer) -> None:
    options = CheckOptions(base_url=check_server.url, api_key_env="MOD_KEY")
    assert await verdict(options) == "check:unavailable" and check_server.bodies == []
