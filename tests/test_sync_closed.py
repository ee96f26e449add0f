"""A closed ``SyncServiceManager`` refuses calls cleanly: no coroutine is left unawaited."""

from __future__ import annotations

import gc
import warnings

import pytest

from provmw.plugins import PluginHost, PluginPolicy
from provmw.settings import Settings
from provmw.sync import SyncServiceManager


def closed() -> SyncServiceManager:
    twin = SyncServiceManager(Settings(), host=PluginHost(PluginPolicy(autoload=False), environ={}))
    twin.close()
    return twin


def attempt(twin: SyncServiceManager, call: str) -> None:
    result = getattr(twin, call)("hi", provider="openai", model="m")
    if call == "stream_chat":
        next(result)  # a generator's body runs on the first next()


@pytest.mark.parametrize("call", ["chat", "stream_chat"])
def test_a_closed_twin_says_so_without_an_unawaited_coroutine(call: str) -> None:
    twin = closed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="SyncServiceManager is closed"):
            attempt(twin, call)
        gc.collect()
    assert [str(w.message) for w in caught] == []
