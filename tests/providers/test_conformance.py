"""The adapter conformance suite run against a third-party adapter (the built-ins run it in their own modules)."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from provmw.config import ProviderConfig
from provmw.responses import Usage
from provmw.testing import AdapterConformance, FakeProvider
from tests.providers import thirdparty_adapter
from tests.providers.thirdparty_adapter import AcmeAdapter


class TestThirdPartyAdapter(AdapterConformance):
    adapter = AcmeAdapter()
    usage_with_cache = ({"prompt_tokens": 30, "completion_tokens": 4}, Usage(input_tokens=30, output_tokens=4))
    expected_failures: ClassVar[Mapping[str, str]] = {
        **dict.fromkeys(
            ["test_a_stream_gives_each_tool_call_whole",
             "test_an_error_event_before_any_content_raises_its_mapped_error"],
            "the example adapter streams text only: it joins no tool calls and reads no error events"),
        **dict.fromkeys(
            ["test_a_number_in_place_of_the_text_is_a_malformed_response",
             "test_a_token_count_as_text_is_a_malformed_response"],
            "the example adapter reads the answer's fields without checking their types"),
        "test_extra_body_fields_reach_the_wire": "the example adapter sends extra_body as a field of that name",
    }

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
    assert provmw_imports("from provmw._transport import sse as _sse\nimport provmw.testing.wires\n") == [
        "provmw._transport.sse", "provmw.testing.wires"]
