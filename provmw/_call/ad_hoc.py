"""An ad-hoc call's credentials: the provider's key variable, for the provider's own endpoint only."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from provmw.config import Secret
from provmw.errors import ConfigurationError
from provmw.providers import ProviderAdapter
from provmw.stores.shared import masked_url

__all__ = ["environment_key"]


def environment_key(adapter: ProviderAdapter, base_url: str | None) -> Secret | None:
    """The key in the adapter's usual variable (``OPENAI_API_KEY``...), for an ad-hoc call given none.

    The operator's credentials belong to the provider's own endpoint (``default_base_url``): an
    ad-hoc call that names another ``base_url`` and no key is refused when the adapter would
    otherwise send one, from its variable or from credentials of its own (``ambient_credentials``:
    an Entra ID token provider, AWS's credential chain), rather than hand them to the caller's host.
    """
    variable = getattr(adapter, "api_key_env", None)  # optional in the contract (ADR 0014)
    value = os.environ.get(variable) if isinstance(variable, str) else None
    own = getattr(adapter, "default_base_url", None)
    if base_url is not None and (not isinstance(own, str) or _endpoint(base_url) != _endpoint(own)):
        ambient = getattr(adapter, "ambient_credentials", False) is True
        if value or ambient:
            held = f"{variable} holds" if value else f"the {adapter.name} adapter signs with"
            where = f"its own endpoint, {own}" if isinstance(own, str) else "the endpoints its operator configured"
            raise ConfigurationError(
                f"an ad-hoc {adapter.name} call to base_url {masked_url(base_url)} needs api_key=: {held} the "
                f"credentials of {where}, and they are never sent to another host")
    return Secret(value) if value else None


def _endpoint(url: str) -> tuple[str, str, int | None, str]:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    try:
        port = parts.port if parts.port is not None else {"https": 443, "http": 80}.get(scheme)
    except ValueError:  # out of range: no endpoint of anyone's (the configuration refuses it next)
        port = -1
    return scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")
