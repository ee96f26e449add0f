"""Where a configuration's calls go on Azure: the resource endpoint, the deployment, the api-version.

A configuration names them with its usual fields, so nothing new goes into ``provmw.toml``:

- ``base_url = "https://RESOURCE.openai.azure.com"``: the deployment is the configuration's
  ``model``;
- ``base_url = "https://RESOURCE.openai.azure.com/openai/deployments/DEPLOYMENT"`` (the
  portal's target URI without its last part): the deployment is named there, and ``model``
  is free to be the model's own name, for prices and logs;
- a query ``?api-version=2025-01-01-preview`` on either chooses the API version
  (``DEFAULT_API_VERSION`` otherwise).
"""

from __future__ import annotations

import functools
import re
import urllib.parse

import attrs

from provmw.config import ProviderConfig
from provmw.errors import ConfigurationError

__all__ = ["DEFAULT_API_VERSION", "Deployment"]

# The latest generally available version of the inference API on deployment routes.
DEFAULT_API_VERSION = "2024-10-21"

_DEPLOYMENT_PATH = re.compile(r"(?P<prefix>.*?)/openai/deployments/(?P<name>[^/]+)/?")
_API_VERSION = re.compile(r"[0-9A-Za-z.\-]{1,40}")


@attrs.frozen
class Deployment:
    """One deployment's address: ``{endpoint}/openai/deployments/{name}/...?api-version=...``."""

    endpoint: str
    name: str
    api_version: str = DEFAULT_API_VERSION

    @classmethod
    def of(cls, config: ProviderConfig) -> Deployment:
        """The deployment ``config`` calls; a ``ConfigurationError`` says what is missing or wrong."""
        if not config.base_url:
            raise ConfigurationError(f"configuration {config.identifier!r}: the azure provider needs base_url, "
                                     "the resource endpoint https://RESOURCE.openai.azure.com")
        return _parsed(config.base_url, config.model)

    @property
    def base_url(self) -> str:
        """The URL every operation's path (``/chat/completions``...) follows."""
        return f"{self.endpoint}/openai/deployments/{urllib.parse.quote(self.name, safe='')}"

    @property
    def v1_url(self) -> str:
        """The URL of the unversioned v1 routes (the Responses API's), which name the deployment in the body."""
        return f"{self.endpoint}/openai/v1"

    @property
    def host(self) -> str:
        """The endpoint's host, for messages (the endpoint itself may hold credentials)."""
        return urllib.parse.urlsplit(self.endpoint).hostname or "?"

    @property
    def query(self) -> str:
        """The query string each request carries."""
        return urllib.parse.urlencode({"api-version": self.api_version})


@functools.lru_cache(maxsize=256)
def _parsed(base_url: str, model: str) -> Deployment:
    """Pure, hence cached: a call only looks up its configuration's deployment."""
    parts = urllib.parse.urlsplit(base_url)
    endpoint = parts._replace(query="", fragment="").geturl().rstrip("/")
    name = model
    if match := _DEPLOYMENT_PATH.fullmatch(parts.path):
        endpoint = parts._replace(path=match["prefix"], query="", fragment="").geturl().rstrip("/")
        name = urllib.parse.unquote(match["name"])
    return Deployment(endpoint, name, _api_version(parts.query))


def _api_version(query: str) -> str:
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    unknown = sorted(set(params) - {"api-version"})
    if unknown:
        raise ConfigurationError(f"base_url: the azure provider reads only api-version from the query, "
                                 f"not {', '.join(unknown)}")
    versions = params.get("api-version", [DEFAULT_API_VERSION])
    if len(versions) != 1 or not _API_VERSION.fullmatch(versions[0]):
        raise ConfigurationError(f"base_url: api-version must be one version such as {DEFAULT_API_VERSION!r}, "
                                 f"got {versions!r}")
    return versions[0]
