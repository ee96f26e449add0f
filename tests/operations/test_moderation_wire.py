"""OpenAI's /moderations through ``OpenAIAdapter.moderate`` against the fake provider: results in
input order, the error table, malformed answers refused; and the official SDK reading the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import AsyncOpenAI

from provmw.config import ProviderConfig
from provmw.errors import (
    AuthenticationError,
    InvalidRequestError,
    MalformedResponseError,
    ProviderError,
    ProviderUnavailableError,
    RateLimitError,
)
from provmw.http import HttpClient
from provmw.operations.moderation import ModerationRequest
from provmw.providers import capabilities_of
from provmw.providers.openai import OpenAIAdapter
from provmw.testing import FakeProvider, Fault
from tests.conftest import openai_config
from tests.hostile import HostileProvider

ADAPTER = OpenAIAdapter()
TEXTS = ["a quiet afternoon", "I will kill the process and hate it"]


async def test_each_input_has_its_verdict_in_order(fake: FakeProvider, http: HttpClient) -> None:
    response = await ADAPTER.moderate(http, openai_config(fake, model="omni-moderation-latest"),
                                      ModerationRequest(inputs=TEXTS))
    assert [r.flagged for r in response.results] == [False, True]
    assert response.results[1].flagged_categories == ("harassment/threatening", "hate", "violence")
    assert response.results[1].scores["violence"] == 0.97 and response.results[0].scores["violence"] == 0.0001
    assert (response.provider, response.model, response.served_by, response.response_id) == (
        "openai", "omni-moderation-latest", "oa", "modr-fake")


async def test_the_body_is_model_and_a_list_of_inputs(fake: FakeProvider, http: HttpClient) -> None:
    config = openai_config(fake, model="omni-moderation-latest", options={"temperature": 0})
    await ADAPTER.moderate(http, config, ModerationRequest(inputs="hello"))
    assert fake.received[-1].route == "moderations"
    assert fake.received[-1].body == {"model": "omni-moderation-latest", "input": ["hello"]}


def test_openai_offers_moderation() -> None:
    assert capabilities_of(ADAPTER).moderation


@pytest.mark.parametrize(("status", "error"), [(400, InvalidRequestError), (401, AuthenticationError),
                                               (429, RateLimitError), (500, ProviderUnavailableError)])
async def test_error_statuses_map_to_the_error_tree(fake: FakeProvider, http: HttpClient, status: int,
                                                    error: type[ProviderError]) -> None:
    fake.script(Fault(status=status, message="input: too long"), route="moderations")
    with pytest.raises(error, match="input: too long"):
        await ADAPTER.moderate(http, openai_config(fake), ModerationRequest(inputs="x"))


@pytest.mark.parametrize(("results", "named"), [
    ([], "0 results for 1 inputs"),
    ([{"flagged": "no", "categories": {}, "category_scores": {}}], "flagged"),
    ([{"flagged": False, "categories": {"hate": 0}, "category_scores": {}}], "categories.hate"),
    ([{"flagged": False, "categories": {}, "category_scores": {"hate": "low"}}], "scores.hate"),
    ([{"flagged": False, "categories": {}}], "category_scores"),
    ({"flagged": False}, "results"),
])
async def test_a_malformed_verdict_is_refused(hostile: HostileProvider, http: HttpClient, results: Any,
                                              named: str) -> None:
    hostile.answer(json.dumps({"id": "modr-1", "model": "m", "results": results}))
    with pytest.raises(MalformedResponseError, match=named):
        await ADAPTER.moderate(http, ProviderConfig(identifier="h", provider="openai", model="m",
                                                    base_url=hostile.openai_base_url), ModerationRequest(inputs="x"))


async def test_the_sdk_reads_the_same_verdicts(fake: FakeProvider, http: HttpClient) -> None:
    client = AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", max_retries=0)
    sdk = await client.moderations.create(model="omni-moderation-latest", input=TEXTS)
    await client.close()
    ours = await ADAPTER.moderate(http, openai_config(fake, model="omni-moderation-latest"),
                                  ModerationRequest(inputs=TEXTS))
    for theirs, mine in zip(sdk.results, ours.results, strict=True):
        assert theirs.flagged == mine.flagged
        assert theirs.categories.model_dump(by_alias=True) == dict(mine.categories)
        assert theirs.category_scores.model_dump(by_alias=True) == dict(mine.scores)
    assert (sdk.id, sdk.model) == (ours.response_id, ours.model)


async def test_extra_body_cannot_replace_the_model_or_the_inputs(fake: FakeProvider, http: HttpClient) -> None:
    # A configuration refuses these keys itself; a request built by hand is not checked so.
    extra = {"extra_body": {"model": "m2", "input": ["other"], "user": "u1"}}
    await ADAPTER.moderate(http, openai_config(fake, model="omni-moderation-latest"),
                           ModerationRequest(inputs="hello", options=extra))
    assert fake.received[-1].body == {"model": "omni-moderation-latest", "input": ["hello"], "user": "u1"}
