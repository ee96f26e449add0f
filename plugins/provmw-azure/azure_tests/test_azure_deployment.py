"""Where a configuration's calls go: the endpoint, the deployment, the api-version, from its own fields."""

from __future__ import annotations

import pytest
from provmw_azure import DEFAULT_API_VERSION, Deployment

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError


def deployment(base_url: str, model: str = "gpt-4o-prod") -> Deployment:
    return Deployment.of(ProviderConfig(identifier="a", provider="azure", model=model, base_url=base_url))


def test_the_model_names_the_deployment_on_a_bare_endpoint() -> None:
    found = deployment("https://res.openai.azure.com/")
    assert found == Deployment("https://res.openai.azure.com", "gpt-4o-prod", DEFAULT_API_VERSION)
    assert found.base_url == "https://res.openai.azure.com/openai/deployments/gpt-4o-prod"


def test_a_deployment_path_names_the_deployment() -> None:
    found = deployment("https://res.openai.azure.com/openai/deployments/team-a/", model="gpt-4o")
    assert (found.endpoint, found.name) == ("https://res.openai.azure.com", "team-a")


def test_a_gateway_prefix_before_the_deployment_path_is_kept() -> None:
    found = deployment("https://apim.example.com/aoai/openai/deployments/team-a")
    assert found.base_url == "https://apim.example.com/aoai/openai/deployments/team-a"


def test_the_query_chooses_the_api_version() -> None:
    found = deployment("https://res.openai.azure.com?api-version=2025-01-01-preview")
    assert (found.endpoint, found.query) == ("https://res.openai.azure.com", "api-version=2025-01-01-preview")


def test_a_deployment_name_is_quoted_in_the_path() -> None:
    assert deployment("https://res.openai.azure.com", model="a b/c").base_url.endswith("/deployments/a%20b%2Fc")


@pytest.mark.parametrize(("base_url", "error"), [
    ("https://res.openai.azure.com?api-key=secret-value", "not api-key"),
    ("https://res.openai.azure.com?api-version=", "api-version must be one version"),
    ("https://res.openai.azure.com?api-version=1&api-version=2", "api-version must be one version"),
])
def test_a_query_it_cannot_use_is_refused_without_its_values(base_url: str, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error) as caught:
        deployment(base_url)
    assert "secret-value" not in str(caught.value)
