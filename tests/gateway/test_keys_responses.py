"""A stored response is continued only by the organisation whose call made it through the gateway
(ADR 0055): the key store records each one; any other ``previous_response_id`` is a 404, not sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import openai
import pytest
from openai.types.responses import ResponseCompletedEvent

from provmw.testing import FakeProvider
from tests.gateway.test_server import Running, running_gateway


@pytest.fixture
async def gw(fake: FakeProvider, tmp_path: Path) -> AsyncIterator[Running]:
    async with running_gateway(fake, tmp_path) as running:
        yield running


def sdk(gw: Running, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key=key or gw.key, max_retries=0)


async def test_another_key_of_the_organisation_continues_its_stored_response(fake: FakeProvider,
                                                                            tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        colleague, _ = await gw.keys.create("acme", team="ops")
        stored = await sdk(gw).responses.create(model="chat", input="the plan", store=True)
        answer = await sdk(gw, colleague).responses.create(model="chat", input="and?", previous_response_id=stored.id)
    assert answer.output_text and fake.count() == 2


async def test_an_unknown_previous_response_is_404_and_not_sent(gw: Running) -> None:
    with pytest.raises(openai.NotFoundError) as refused:
        await sdk(gw).responses.create(model="chat", input="and?", previous_response_id="resp_made_up")
    assert refused.value.code == "previous_response_not_found" and gw.fake.count() == 0


async def test_a_response_not_stored_is_not_recorded_so_not_continued(gw: Running) -> None:
    made = await sdk(gw).responses.create(model="chat", input="the plan", store=False)
    with pytest.raises(openai.NotFoundError):
        await sdk(gw).responses.create(model="chat", input="and?", previous_response_id=made.id)
    assert gw.fake.count() == 1


async def test_a_streamed_response_completes_with_the_providers_id_which_only_its_organisation_continues(
        fake: FakeProvider, tmp_path: Path) -> None:
    async with running_gateway(fake, tmp_path) as gw:
        stream = await sdk(gw).responses.create(model="chat", input="the plan", store=True, stream=True)
        last = [e async for e in stream][-1]
        assert isinstance(last, ResponseCompletedEvent)
        completed = last.response
        other, _ = await gw.keys.create("globex")
        with pytest.raises(openai.NotFoundError):
            await sdk(gw, other).responses.create(model="chat", input="?", previous_response_id=completed.id)
        answer = await sdk(gw).responses.create(model="chat", input="and?", previous_response_id=completed.id)
    assert answer.output_text and fake.count() == 2


async def test_a_previous_response_id_that_is_not_a_string_is_400(gw: Running) -> None:
    with pytest.raises(openai.BadRequestError):
        await sdk(gw).responses.create(model="chat", input="and?", extra_body={"previous_response_id": 5})
    assert gw.fake.count() == 0
