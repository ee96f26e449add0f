"""Finding 3: a hostile provider that echoes the credentials a request carried (in a 401 body,
in a gateway page dumping the request) gets none of them into an error, a log line or the CLI."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import traceback
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.errors import AuthenticationError, FallbackExhaustedError, ProviderError
from provmw.http import HttpStatusError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.scrubbing import CUT, Scrubber
from provmw.settings import Settings
from tests.conftest import BUILTIN_MIDDLEWARE_OFF, SENTINEL_KEY
from tests.hostile import HostileProvider

HEADER_SECRET = "org-HDR-5e1f0c-secret"
URL_PASSWORD = "pw-URL-8d2b4a-secret"
QUERY_KEY = "qk-QRY-3c9e7d-secret"
SECRETS = (SENTINEL_KEY, HEADER_SECRET, URL_PASSWORD, QUERY_KEY)
_BORING = {"Host", "Accept", "Accept-Encoding", "User-Agent", "Content-Length", "Content-Type"}


async def _hostile(request: web.Request) -> web.Response:
    mode = request.match_info["mode"]
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if mode == "echo":
        return web.json_response({"error": {"message": f"Incorrect API key provided: {key}"}}, status=401)
    if mode.startswith("cut"):  # the key straddles the 200 bytes an error quotes (a 404 adds a hint after them)
        return web.Response(status=404 if mode == "cut404" else 401, text="x" * 190 + key)
    dump = "".join(f"{k}: {v}\n" for k, v in request.headers.items() if k not in _BORING)
    return web.Response(status=502, text=f"<pre>{request.path_qs}\n{dump}</pre>", content_type="text/html")


@pytest.fixture
async def hostile() -> AsyncIterator[str]:
    """The base URL of a loopback server that echoes credentials; add ``/echo``, ``/cut`` or ``/dump``."""
    app = web.Application()
    app.router.add_post("/{mode}/{tail:.*}", _hostile)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


def shown(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc)) + repr(exc) + str(exc) + str(vars(exc))


def config(base_url: str, identifier: str = "h", **fields: object) -> ProviderConfig:
    return ProviderConfig(identifier=identifier, provider="openai", model="m", base_url=base_url,
                          **fields)  # type: ignore[arg-type]


async def failure(host: PluginHost, *configs: ProviderConfig,
                  middleware: Mapping[str, Any] | None = None) -> BaseException:
    settings = Settings(configurations={c.identifier: c for c in configs}, default=configs[0].identifier,
                        middleware=middleware if middleware is not None else BUILTIN_MIDDLEWARE_OFF)
    async with ServiceManager(settings, host=host) as manager:
        with pytest.raises((ProviderError, FallbackExhaustedError)) as caught:
            await manager.chat("hi")
    return caught.value


async def test_a_key_echoed_in_a_401_body_is_in_no_error_text(hostile: str, builtin_only: PluginHost) -> None:
    error = await failure(builtin_only, config(f"{hostile}/echo/v1", api_key=SENTINEL_KEY))
    assert isinstance(error, AuthenticationError)
    assert "Incorrect API key provided: ***" in str(error)
    assert SENTINEL_KEY not in shown(error)


async def test_a_gateway_page_dumping_headers_leaks_no_header_value(hostile: str, builtin_only: PluginHost) -> None:
    error = await failure(builtin_only, config(f"{hostile}/dump/v1", api_key=SENTINEL_KEY,
                                               headers={"X-Org-Token": HEADER_SECRET}))
    assert isinstance(error, ProviderError) and error.status == 502
    assert "X-Org-Token: ***" in str(error)
    assert SENTINEL_KEY not in shown(error) and HEADER_SECRET not in shown(error)


async def test_credentials_in_the_base_url_are_scrubbed_from_an_echo(hostile: str, builtin_only: PluginHost) -> None:
    # aiohttp sends the user part as HTTP Basic: the page shows it base64-encoded.
    base_url = hostile.replace("//", f"//user:{URL_PASSWORD}@") + f"/dump/v1?api_key={QUERY_KEY}"
    error = await failure(builtin_only, config(base_url))
    basic = base64.b64encode(f"user:{URL_PASSWORD}".encode()).decode()
    for secret in (URL_PASSWORD, QUERY_KEY, basic):
        assert secret not in shown(error)


async def test_a_key_cut_off_by_the_quoted_length_leaves_no_prefix(hostile: str, builtin_only: PluginHost) -> None:
    error = await failure(builtin_only, config(f"{hostile}/cut/v1", api_key=SENTINEL_KEY))
    assert isinstance(error, AuthenticationError)
    assert SENTINEL_KEY[:6] not in shown(error)


async def test_a_key_cut_off_before_a_404_hint_leaves_no_prefix(hostile: str, builtin_only: PluginHost) -> None:
    error = await failure(builtin_only, config(f"{hostile}/cut404/v1", api_key=SENTINEL_KEY))
    assert isinstance(error, ProviderError) and error.status == 404 and "(404 from" in str(error)
    assert SENTINEL_KEY[:6] not in shown(error)


async def test_fallback_exhaustion_shows_no_key(hostile: str, builtin_only: PluginHost) -> None:
    first = config(f"{hostile}/dump/v1", identifier="a", api_key=SENTINEL_KEY, fallbacks=("b",))
    second = config(f"{hostile}/dump/v1", identifier="b", api_key=SENTINEL_KEY)
    off = {**BUILTIN_MIDDLEWARE_OFF, "fallback": {}}
    error = await failure(builtin_only, first, second, middleware=off)
    assert isinstance(error, FallbackExhaustedError)
    assert SENTINEL_KEY not in shown(error)


async def test_log_records_show_no_key(hostile: str, builtin_only: PluginHost,
                                       caplog: pytest.LogCaptureFixture) -> None:
    # The whole default stack (retries, fallback) logs, and so does a host that logs what it caught.
    caplog.set_level(logging.DEBUG)
    error = await failure(builtin_only, config(f"{hostile}/dump/v1", api_key=SENTINEL_KEY), middleware={})
    logging.getLogger("host").error("the call failed: %s", error, exc_info=error)
    assert "retry: attempt 1 failed" in caplog.text
    assert SENTINEL_KEY not in caplog.text


async def test_a_stream_error_shows_no_key(hostile: str, builtin_only: PluginHost) -> None:
    settings = Settings(configurations={"h": config(f"{hostile}/echo/v1", api_key=SENTINEL_KEY)})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(AuthenticationError) as caught:
            async for _ in manager.stream_chat("hi"):
                pass
    assert SENTINEL_KEY not in shown(caught.value)


async def test_provmw_chat_prints_no_key(hostile: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HOSTILE_KEY", SENTINEL_KEY)
    settings = tmp_path / "provmw.toml"
    settings.write_text(f'[plugins]\nautoload = false\n[configurations.h]\nprovider = "openai"\nmodel = "m"\n'
                        f'api_key_env = "HOSTILE_KEY"\nbase_url = "{hostile}/echo/v1"\n')
    out = io.StringIO()
    status = await asyncio.to_thread(main, ["--config", str(settings), "chat", "hi"], out)
    printed = capsys.readouterr()
    assert status == 2 and "AuthenticationError" in printed.err
    assert SENTINEL_KEY not in printed.err + printed.out + out.getvalue()


def test_encoded_forms_of_a_secret_are_scrubbed() -> None:
    scrub = Scrubber.of([SENTINEL_KEY])
    encoded = [quote(SENTINEL_KEY, safe=""), base64.b64encode(SENTINEL_KEY.encode()).decode()]
    text = scrub.text(f"raw={SENTINEL_KEY} url={encoded[0]} b64={encoded[1]}")
    assert text == "raw=*** url=*** b64=***"


@given(secret=st.text(min_size=4, max_size=40), before=st.text(max_size=40), after=st.text(max_size=40))
def test_scrubbed_text_never_contains_the_secret(secret: str, before: str, after: str) -> None:
    assert secret not in Scrubber.of([secret]).text(before + secret + after)


@given(secret=st.text(st.characters(codec="utf-8", blacklist_characters="*"), min_size=7, max_size=40),
       before=st.text(max_size=40), data=st.data())
def test_a_secret_cut_short_at_the_end_of_any_text_is_masked(secret: str, before: str, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=6, max_value=len(secret) - 1))
    assert Scrubber.of([secret]).text(before + secret[:cut]).endswith("***")


@given(secret=st.text(st.characters(codec="utf-8", blacklist_characters="*\u2026"), min_size=7, max_size=40),
       before=st.text(max_size=40), after=st.text(max_size=40), data=st.data())
def test_a_secret_cut_short_before_a_cut_mark_is_masked(secret: str, before: str, after: str,
                                                         data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=6, max_value=len(secret) - 1))
    assert secret[:cut] + CUT not in Scrubber.of([secret]).text(before + secret[:cut] + CUT + after)


def test_scrubbed_headers_stay_case_insensitive_and_untouched_ones_stay_as_they_are() -> None:
    # A retry hint is read from an error's headers after an adapter scrubbed them (Bedrock, Azure).
    echoed = HttpStatusError(429, b"", CIMultiDictProxy(CIMultiDict({"Retry-After": "3", "X-Echo": SENTINEL_KEY})))
    clean = HttpStatusError(429, b"", CIMultiDictProxy(CIMultiDict({"Retry-After": "3"})))
    kept = clean.headers
    Scrubber.of([SENTINEL_KEY]).error(echoed)
    Scrubber.of([SENTINEL_KEY]).error(clean)
    assert (echoed.headers["retry-after"], echoed.headers["x-echo"]) == ("3", "***")
    assert clean.headers is kept


@pytest.fixture
async def hostile_provider() -> AsyncIterator[HostileProvider]:
    async with HostileProvider() as server:
        yield server


@pytest.mark.parametrize("body", ['{"error": {"message": ["%s"]}}', '{"error": {"message": {"k": "%s"}}}',
                                  '{"error": {"code": ["%s"], "message": "no"}}'],
                         ids=["message list", "message object", "code list"])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_key_echoed_inside_a_non_text_error_field_never_reaches_the_error(
        hostile_provider: HostileProvider, builtin_only: PluginHost, body: str, provider: str) -> None:
    hostile_provider.answer(body % SENTINEL_KEY, status=401)
    base = hostile_provider.openai_base_url if provider == "openai" else hostile_provider.anthropic_base_url
    config = ProviderConfig(identifier="h", provider=provider, model="m", base_url=base, api_key=SENTINEL_KEY)
    async with ServiceManager(Settings(configurations={"h": config}, middleware=BUILTIN_MIDDLEWARE_OFF),
                              host=builtin_only) as manager:
        with pytest.raises(AuthenticationError) as caught:
            await manager.chat("hi")
    assert SENTINEL_KEY not in "".join(traceback.format_exception(caught.value))


async def test_the_raw_body_an_error_chains_is_scrubbed_too(
        hostile_provider: HostileProvider, builtin_only: PluginHost) -> None:
    hostile_provider.echo(status=401)
    config = ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile_provider.openai_base_url,
                            api_key=SENTINEL_KEY)
    async with ServiceManager(Settings(configurations={"h": config}, middleware=BUILTIN_MIDDLEWARE_OFF),
                              host=builtin_only) as manager:
        with pytest.raises(AuthenticationError) as caught:
            await manager.chat("hi")
    chained = caught.value.__context__
    assert chained is not None and SENTINEL_KEY.encode() not in vars(chained).get("body", b"")
    assert SENTINEL_KEY not in str(vars(chained).get("headers", {}))


async def test_a_key_cut_off_in_a_long_stream_error_event_leaves_no_prefix(
        hostile_provider: HostileProvider, builtin_only: PluginHost) -> None:
    hostile_provider.sse(json.dumps({"error": {"message": "x" * 1990 + SENTINEL_KEY}}))
    config = ProviderConfig(identifier="h", provider="openai", model="m", base_url=hostile_provider.openai_base_url,
                            api_key=SENTINEL_KEY)
    async with ServiceManager(Settings(configurations={"h": config}, middleware=BUILTIN_MIDDLEWARE_OFF),
                              host=builtin_only) as manager:
        with pytest.raises(ProviderError, match="characters") as caught:
            await anext(manager.stream_chat("hi"))
    assert SENTINEL_KEY[:6] not in "".join(traceback.format_exception(caught.value))
