from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.sync import SyncServiceManager
from provmw.testing import FakeProvider
from tests.conftest import openai_config


async def test_sync_twin_from_several_threads(fake: FakeProvider) -> None:
    # The fake runs in this test's loop; the twin runs its own loop in a thread.
    import asyncio

    settings = Settings(configurations={"oa": openai_config(fake)})
    twin = SyncServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}))
    answers: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(5):
            text = twin.chat(f"thread {n} call {i}").text
            with lock:
                answers.append(text)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    def run_all() -> None:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    await asyncio.to_thread(run_all)
    await asyncio.to_thread(twin.close)
    assert sorted(answers) == sorted(f"echo: thread {n} call {i}" for n in range(4) for i in range(5))
    assert fake.count() == 20


async def test_sync_twin_streams_and_embeds(fake: FakeProvider) -> None:
    import asyncio

    settings = Settings(configurations={"oa": openai_config(fake)})

    def use() -> tuple[str, int]:
        with SyncServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={})) as twin:
            streamed = "".join(c.text for c in twin.stream_chat("a b"))
            return streamed, len(twin.embed(["x", "y"]).vectors)

    streamed, vectors = await asyncio.to_thread(use)
    assert (streamed.strip(), vectors) == ("echo: a b", 2)


def test_close_twice_is_safe_and_leaves_it_closed() -> None:
    before = set(threading.enumerate())
    twin = SyncServiceManager(Settings(), host=PluginHost(PluginPolicy(autoload=False), environ={}))
    twin.close()
    twin.close()
    assert [t.name for t in set(threading.enumerate()) - before] == []  # its loop's thread has ended
    with pytest.raises(RuntimeError, match="SyncServiceManager is closed"):
        twin.chat("hi", provider="openai", model="m")


CALL_ARGUMENTS = {"configuration", "user", "tenant", "controls", "idempotency_key", "correlation_id", "provider",
                  "model", "base_url", "api_key", "timeout_s"}


@pytest.mark.parametrize("method", ["chat", "complete", "embed", "vision", "chat_with_tools", "stream_chat"])
@pytest.mark.parametrize("manager", [ServiceManager, SyncServiceManager], ids=["async", "sync"])
def test_every_call_method_spells_out_the_call_arguments(manager: type, method: str) -> None:
    parameters = inspect.signature(getattr(manager, method)).parameters
    assert {name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY} >= CALL_ARGUMENTS


def _parameters(function: Callable[..., object]) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # self or cls aside


@pytest.mark.parametrize("method", ["__init__", "from_file"])
def test_the_twin_is_built_with_the_async_managers_signature(method: str) -> None:
    twin, manager = inspect.getattr_static(SyncServiceManager, method), inspect.getattr_static(ServiceManager, method)
    twin, manager = getattr(twin, "__func__", twin), getattr(manager, "__func__", manager)
    assert _parameters(twin) == _parameters(manager)
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in _parameters(twin))


def test_the_twin_has_every_call_method_with_its_signature() -> None:
    calls = [name for name, value in vars(ServiceManager).items()
             if inspect.iscoroutinefunction(value) or inspect.isasyncgenfunction(value)]
    calls = [name for name in calls if not name.startswith("_") and name != "aclose"]  # close() and with
    assert sorted(calls) == ["chat", "chat_with_tools", "complete", "embed", "stream_chat",
                             "stream_chat_with_tools", "vision"]
    for name in calls:
        assert _parameters(getattr(SyncServiceManager, name)) == _parameters(getattr(ServiceManager, name))


async def test_the_twin_builds_from_a_settings_file(fake: FakeProvider, tmp_path: Path) -> None:
    import asyncio

    path = tmp_path / "app.toml"
    path.write_text(f'default = "oa"\n[configurations.oa]\nprovider = "openai"\nmodel = "m"\n'
                    f'base_url = "{fake.openai_base_url}"\n[middleware.usage]\nstore = "memory"\n')

    def use() -> str:
        with SyncServiceManager.from_file(path, host=PluginHost(PluginPolicy(autoload=False), environ={})) as twin:
            return twin.chat([{"role": "user", "content": "hi"}], temperature=0.2).text

    assert await asyncio.to_thread(use) == "echo: hi"
    assert fake.received[0].body["temperature"] == 0.2


async def test_a_stream_left_open_when_the_twin_closes_is_recorded_and_closes_quietly(
        fake: FakeProvider, tmp_path: Path) -> None:
    import asyncio

    from provmw.stores.usage import SqliteUsageStore

    path = tmp_path / "ledger.sqlite3"
    # Priced: an unpriced attempt is billed "unknown" whatever its usage (ADR 0049).
    priced = openai_config(fake, price={"input_usd_per_mtok": 1.0, "output_usd_per_mtok": 2.0})
    settings = Settings(configurations={"oa": priced}, middleware={"usage": {"path": str(path)}})

    def use() -> None:
        twin = SyncServiceManager(settings, host=PluginHost(PluginPolicy(autoload=False), environ={}))
        chunks = twin.stream_chat("one two three", user="ada")
        next(chunks)
        twin.close()
        chunks.close()

    await asyncio.to_thread(use)
    store = SqliteUsageStore(path)
    records = await store.records()
    await store.aclose()
    assert [(r.user, r.billed) for r in records] == [("ada", "estimated")]
