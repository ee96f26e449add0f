"""provmw-bedrock: Amazon Bedrock's Converse and ConverseStream APIs as the ``bedrock`` provider.

Install it and name the provider; region and credentials come from the configuration's
``base_url`` and the AWS chain (see the README)::

    [configurations.claude]
    provider = "bedrock"
    model = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    base_url = "https://bedrock-runtime.us-east-1.amazonaws.com"

The adapter is registered through the ``provmw_providers`` hook, as any third-party one is.
botocore is imported when a configuration is first used, never when this package is.
"""

from __future__ import annotations

import provmw
from provmw_bedrock.adapter import BedrockAdapter

__all__ = ["BedrockAdapter", "provmw_providers"]


@provmw.hookimpl
def provmw_providers() -> list[BedrockAdapter]:
    """The ``bedrock`` adapter."""
    return [BedrockAdapter()]
