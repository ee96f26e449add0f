"""Fixtures for the Bedrock plugin's tests: fixed AWS credentials and region in the environment,
and nothing from the machine (no shared files, no instance metadata service)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from provmw_bedrock.fake import BedrockWire

from bedrock_tests.sigv4_server import SigV4Server
from provmw.http import HttpClient
from provmw.testing import FakeProvider

ACCESS_KEY = "AKIDPROVMWTESTKEY"
SECRET_KEY = "provmw-test-secret-key-never-in-an-error"
REGION = "eu-west-3"


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's chain finds these credentials and this region, and nothing else."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK", "AWS_REGION",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/provmw-test/config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/provmw-test/credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    client = HttpClient()
    yield client
    await client.aclose()


@pytest.fixture
async def fake() -> AsyncIterator[FakeProvider]:
    """A fake provider serving the Bedrock wire."""
    async with FakeProvider(wires=[BedrockWire()]) as server:
        yield server


@pytest.fixture
async def server() -> AsyncIterator[SigV4Server]:
    """A loopback Bedrock that verifies signatures; it knows the test key and a refreshed one."""
    async with SigV4Server({ACCESS_KEY: SECRET_KEY, "AKIDREFRESHED": "refreshed-secret"}, REGION) as running:
        yield running
