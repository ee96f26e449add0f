"""provmw-azure: the ``azure`` provider, for Azure OpenAI deployments.

Install it and configurations with ``provider = "azure"`` reach a deployment::

    [configurations.main]
    provider = "azure"
    model = "gpt-4o-prod"                       # the deployment's name
    base_url = "https://RESOURCE.openai.azure.com"
    api_key_env = "AZURE_OPENAI_API_KEY"

Configurations without a key use the Entra ID token provider an application registers
(``provmw_azure.tokens``). ``provmw_azure.fake.AzureWire`` serves Azure's wire from
``provmw.testing.FakeProvider``.
"""

from __future__ import annotations

from collections.abc import Iterable

import provmw
from provmw_azure._deployment import DEFAULT_API_VERSION, Deployment
from provmw_azure.adapter import AzureOpenAIAdapter
from provmw_azure.tokens import AccessToken, TokenCache, TokenProvider, registered_token_provider

__all__ = ["DEFAULT_API_VERSION", "AccessToken", "AzureOpenAIAdapter", "Deployment", "TokenCache",
           "TokenProvider", "provmw_providers"]


@provmw.hookimpl
def provmw_providers() -> Iterable[AzureOpenAIAdapter]:
    """The ``azure`` adapter, with the token provider an installed package registers, if any."""
    return (AzureOpenAIAdapter(token_provider=registered_token_provider()),)
