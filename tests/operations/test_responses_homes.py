"""A Responses call continuing a stored response stays on the pool deployment that made it (the pool's
layers still applying), and is never moved to another configuration than the one it names (ADR 0052)."""

from __future__ import annotations

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.pools import Pool
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import openai_config

MEMBERS = ("east", "west", "north")


def pooled(fake: FakeProvider) -> Settings:
    configs = {m: openai_config(fake, identifier=m, model=f"dep-{m}") for m in MEMBERS}
    return Settings(configurations=configs, default="gpt",
                    pools={"gpt": Pool(name="gpt", members=MEMBERS, strategy="weighted")})


async def test_follow_ups_on_a_pool_go_to_the_deployment_that_stored_the_response(fake: FakeProvider,
                                                                                 builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        first = await manager.respond("hello", store=True)
        served = {(await manager.respond("again", previous_response_id=first.response_id)).served_by
                  for _ in range(12)}
    assert served == {first.served_by}


async def test_a_follow_up_naming_a_deployment_itself_stays_there(fake: FakeProvider,
                                                                  builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        first = await manager.respond("hello", store=True, configuration="west")
        again = await manager.respond("again", previous_response_id=first.response_id, configuration="west")
    assert (first.served_by, again.served_by) == ("west", "west")


async def test_a_streamed_stored_response_is_continued_on_its_deployment(fake: FakeProvider,
                                                                        builtin_only: PluginHost) -> None:
    async with ServiceManager(pooled(fake), host=builtin_only) as manager:
        chunks = [c async for c in manager.stream_respond("hello", store=True)]
        [last] = [c for c in chunks if c.response_id is not None]
        served = {(await manager.respond("again", previous_response_id=last.response_id)).served_by
                  for _ in range(12)}
    assert served == {last.served_by}
