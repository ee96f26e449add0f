"""The gateway tests' shared fixture: every official SDK client a test makes is closed when it ends,
inside its event loop (left to the garbage collector, a client's transport logs an asyncio error into
whichever later test is running, and a test that reads error logs would see it)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest


@pytest.fixture(autouse=True)
async def sdk_clients_closed(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    made: list[Any] = []
    for kind in (openai.AsyncOpenAI, anthropic.AsyncAnthropic):
        def made_one(self: Any, *args: Any, _init: Any = kind.__init__, **kwargs: Any) -> None:
            _init(self, *args, **kwargs)
            made.append(self)

        monkeypatch.setattr(kind, "__init__", made_one)
    yield
    for client in made:
        await client.close()
