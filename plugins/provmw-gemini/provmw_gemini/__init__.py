"""provmw-gemini: the native Gemini API as provider ``gemini``.

Installing it registers ``GeminiAdapter`` through the ``provmw_providers`` hook, as any
third-party provider plugin does; a configuration names it::

    [configurations.gemini]
    provider = "gemini"
    model = "gemini-2.5-flash"
    api_key_env = "GEMINI_API_KEY"

``provmw_gemini.fake.GeminiWire`` serves the same wire from ``provmw.testing.FakeProvider``.
"""

from __future__ import annotations

from collections.abc import Iterable

import provmw
from provmw_gemini.adapter import DEFAULT_BASE_URL, GeminiAdapter

__all__ = ["DEFAULT_BASE_URL", "GeminiAdapter", "provmw_providers"]


@provmw.hookimpl
def provmw_providers() -> Iterable[GeminiAdapter]:
    return [GeminiAdapter()]
