"""``provmw fake-provider`` scripts faults from a shell: options and the admin endpoint."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

import provmw
from provmw.cli import main
from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError, RateLimitError
from provmw.manager import ServiceManager
from provmw.plugins import PluginHost
from provmw.settings import Settings
from provmw.testing import ROUTES, FakeProvider

STARTUP_LINES = 4


def start(*options: str) -> tuple[subprocess.Popen[str], str]:
    """Run the command on a free port; returns the process and its root URL."""
    # This checkout's provmw, not whichever one the interpreter has installed.
    env = {**os.environ, "PYTHONPATH": str(Path(provmw.__file__).parents[1])}
    process = subprocess.Popen([sys.executable, "-m", "provmw.cli", "fake-provider", "--port", "0", *options],
                               stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("fake provider listening on "), f"exit {process.wait()}: {first!r}"
    url = first.split()[-1]
    for _ in range(STARTUP_LINES - 1):
        process.stdout.readline()
    return process, url


@pytest.fixture
def running(request: pytest.FixtureRequest) -> Iterator[str]:
    process, url = start(*getattr(request, "param", ()))
    yield url
    process.terminate()
    process.wait()


async def chat_once(url: str, builtin_only: PluginHost) -> RateLimitError:
    config = ProviderConfig(identifier="a", provider="openai", model="m", base_url=f"{url}/v1", api_key="k")
    settings = Settings(configurations={"a": config}, middleware={"usage": {"store": "memory"},
                                                                  "budget": {"store": "memory"}})
    async with ServiceManager(settings, host=builtin_only) as manager:
        with pytest.raises(RateLimitError) as raised:
            await manager.chat("hi", controls={"max_attempts": 1, "no_cache": True})
    return raised.value


@pytest.mark.parametrize("running", [("--fail", "429:1", "--header", "Retry-After=2")], indirect=True)
async def test_a_429_with_retry_after_from_the_command_line(running: str, builtin_only: PluginHost) -> None:
    error = await chat_once(running, builtin_only)
    assert error.status == 429 and error.retry_after_s == 2.0


async def test_a_429_with_retry_after_through_the_admin_endpoint(running: str, builtin_only: PluginHost) -> None:
    async with aiohttp.ClientSession() as http:
        posted = await http.post(f"{running}/_admin/faults", json={"fail": 429, "header": {"Retry-After": "3"}})
        assert posted.status == 200
    error = await chat_once(running, builtin_only)
    assert error.status == 429 and error.retry_after_s == 3.0


async def test_delete_clears_the_faults_and_requests_counts_them(builtin_only: PluginHost) -> None:
    async with FakeProvider(admin=True) as fake, aiohttp.ClientSession() as http:
        await http.post(f"{fake.url}/_admin/faults", json={"fail": "500"})
        await http.delete(f"{fake.url}/_admin/faults")
        answer = await http.post(f"{fake.openai_base_url}/chat/completions", json={"model": "m", "messages": []})
        counts = await (await http.get(f"{fake.url}/_admin/requests")).json()
    assert answer.status == 200
    assert counts["total"] == 1 and counts["by_route"]["chat"] == 1


async def test_a_bad_admin_body_is_a_400_naming_the_option() -> None:
    async with FakeProvider(admin=True) as fake, aiohttp.ClientSession() as http:
        answer = await http.post(f"{fake.url}/_admin/faults", json={"fial": 429})
        body = await answer.json()
    assert answer.status == 400
    assert "unknown fault option(s) fial" in body["error"]


async def test_a_fault_on_one_route_leaves_the_others_answering() -> None:
    async with FakeProvider(admin=True) as fake, aiohttp.ClientSession() as http:
        await http.post(f"{fake.url}/_admin/faults", json={"fail": 401, "route": "chat"})
        chat = await http.post(f"{fake.openai_base_url}/chat/completions", json={"model": "m", "messages": []})
        embed = await http.post(f"{fake.openai_base_url}/embeddings", json={"model": "m", "input": "x"})
    assert (chat.status, embed.status) == (401, 200)


async def test_a_seeded_fail_rate_fails_the_same_requests_each_run() -> None:
    runs: list[list[int]] = []
    for _ in range(2):
        async with FakeProvider(admin=True) as fake, aiohttp.ClientSession() as http:
            await http.post(f"{fake.url}/_admin/faults", json={"fail": 503, "fail_rate": 0.5, "seed": 7})
            body = {"model": "m", "input": "x"}
            runs.append([(await http.post(f"{fake.openai_base_url}/embeddings", json=body)).status
                         for _ in range(12)])
    assert runs[0] == runs[1] and {200, 503} == set(runs[0])


@pytest.mark.parametrize(("options", "named"), [(["--fail", "99"], "STATUS 400-599"),
                                            (["--seed", "3"], "no fault given"),
                                            (["--fail", "429:2", "--times", "3"], "disagree"),
                                            (["--fail", "500", "--fail-rate", "1.5"], "(0, 1]"),
                                            (["--drop", "--header", "Retry-After"], "K=V")])
def test_bad_fault_options_are_a_configuration_error(options: list[str], named: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fake-provider", "--port", "0", *options]) == 2
    err = capsys.readouterr().err
    assert ConfigurationError.__name__ in err and named in err


@pytest.mark.parametrize(("options", "fault"), [
    (["--stream-error-after", "0", "--code", "overloaded"], {"stream_error_after": 0, "code": "overloaded"}),
    (["--stall-after", "0", "--stall", "30"], {"stall_after": 0, "stall_s": 30.0}),
    (["--cut-stream-after", "0"], {"cut_stream_after": 0})])
def test_a_stream_fault_at_event_0_from_the_command_line_is_kept(options: list[str], fault: dict[str, object]) -> None:
    from provmw.testing.faults import add_fault_arguments, plans_from_arguments

    parser = argparse.ArgumentParser()
    add_fault_arguments(parser)
    [plan] = plans_from_arguments(parser.parse_args(options))
    assert {name: getattr(plan.fault, name) for name in fault} == fault


def test_every_route_the_fake_serves_can_be_named_from_the_command_line() -> None:
    assert set(FakeProvider().routes) == set(ROUTES)
