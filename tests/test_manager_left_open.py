"""A manager used without ``async with`` (or ``aclose()``) says so itself when it is collected,
instead of leaving the user with aiohttp's "Unclosed client session"."""

from __future__ import annotations

import gc
import re
import warnings

import pytest

from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import FakeProvider
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, openai_config

HINT = r"use 'async with ServiceManager\(\.\.\.\) as manager:' or await manager\.aclose\(\)"


def settings(fake: FakeProvider) -> Settings:
    return Settings(configurations={"oa": openai_config(fake)}, middleware=BUILTIN_MIDDLEWARE_OFF)


def collect(held: list[ServiceManager]) -> None:
    held.clear()
    gc.collect()


async def test_a_manager_that_called_and_was_never_closed_names_async_with(
        fake: FakeProvider, builtin_only: PluginHost, caplog: pytest.LogCaptureFixture) -> None:
    held = [ServiceManager(settings(fake), host=builtin_only)]
    await held[0].chat("hi")
    with pytest.warns(ResourceWarning, match=HINT):
        collect(held)
    assert re.search(HINT, caplog.text)


async def test_a_closed_manager_says_nothing(fake: FakeProvider, builtin_only: PluginHost) -> None:
    async with ServiceManager(settings(fake), host=builtin_only) as manager:
        await manager.chat("hi")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del manager
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
