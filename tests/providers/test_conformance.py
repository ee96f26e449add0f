"""The adapter conformance suite run against both built-in adapters and a third-party one."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from provmw.config import ProviderConfig
from provmw.errors import ContextLengthExceededError, ProviderError, ProviderUnavailableError
from provmw.providers.anthropic import AnthropicAdapter
from provmw.providers.openai import OpenAIAdapter
from provmw.testing import AdapterConformance, FakeProvider, Fault
from tests.providers import thirdparty_adapter
from tests.providers.thirdparty_adapter import AcmeAdapter


class TestOpenAIAdapter(AdapterConformance):
    adapter = OpenAIAdapter()

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="oa", provider="openai", model="gpt-test",
                              base_url=fake.openai_base_url, **fields)


class TestAnthropicAdapter(AdapterConformance):
    adapter = AnthropicAdapter()
    supports_embeddings = False
    status_errors: ClassVar[Mapping[int, type[ProviderError]]] = {
        **AdapterConformance.status_errors, 529: ProviderUnavailableError}
    coded_errors: ClassVar[Mapping[str, tuple[Fault, type[ProviderError]]]] = {
        **AdapterConformance.coded_errors,
        # Anthropic says so in the message of an invalid_request_error.
        "context_length": (Fault(status=400, code="invalid_request_error",
                                 message="prompt is too long: 300000 tokens > 200000 maximum"),
                           ContextLengthExceededError),
    }

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="an", provider="anthropic", model="claude-test",
                              base_url=fake.anthropic_base_url, **fields)


class TestThirdPartyAdapter(AdapterConformance):
    adapter = AcmeAdapter()
    supports_completion = False
    supports_embeddings = False

    def config(self, fake: FakeProvider, **fields: Any) -> ProviderConfig:
        return ProviderConfig(identifier="acme-1", provider="acme", model="acme-large",
                              base_url=fake.openai_base_url, **fields)


def provmw_imports(source: str) -> list[str]:
    """Dotted paths of every provmw module and name the source imports."""
    paths: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            paths += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            paths += [f"{node.module}.{alias.name}" for alias in node.names]
    return [path for path in paths if path.split(".")[0] == "provmw"]


def test_the_third_party_adapter_needs_nothing_private_from_provmw() -> None:
    imported = provmw_imports(Path(thirdparty_adapter.__file__).read_text())
    assert "provmw.http.wire_errors" in imported
    assert [path for path in imported if any(part.startswith("_") for part in path.split("."))] == []


def test_the_import_check_sees_a_private_import() -> None:
    assert provmw_imports("from provmw.providers import _sse\nimport provmw._fake_wire\n") == [
        "provmw.providers._sse", "provmw._fake_wire"]
