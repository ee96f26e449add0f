"""Helpers of the provmw-azure tests (a unique module name: tests directories share sys.path)."""

from __future__ import annotations

from typing import Any

from provmw.config import ProviderConfig
from provmw.testing import FakeProvider

DEPLOYMENT = "gpt-4o-prod"


def azure_config(fake: FakeProvider, **fields: Any) -> ProviderConfig:
    """A configuration on the fake's ``gpt-4o-prod`` deployment, with an API key unless ``fields`` say otherwise."""
    values: dict[str, Any] = {"identifier": "azure-main", "provider": "azure", "model": DEPLOYMENT,
                              "base_url": fake.url, "api_key": "azure-test-key", **fields}
    return ProviderConfig(**values)
