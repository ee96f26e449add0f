"""Where a configuration's calls go and who signs them: region, endpoint and AWS SigV4.

The region is the one in ``base_url``'s host when that is an AWS endpoint
(``bedrock[-agent]-runtime[-fips].REGION.amazonaws.com``, VPC endpoints included), else botocore's
(``AWS_DEFAULT_REGION``, then the profile's ``region``). Credentials are botocore's chain
(environment, shared files and ``AWS_PROFILE``, SSO, container and instance roles),
resolved once per configuration in a worker thread, since the chain may read files or ask
an instance metadata service; refreshable ones refresh as botocore refreshes them (the
thread again when a refresh is due). Requests are signed by botocore's ``SigV4Auth``.

botocore is imported only here, and only when a configuration is first resolved: importing
provmw or this plugin does not pay for it.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import attrs

from provmw.config import ProviderConfig
from provmw.errors import AuthenticationError, ConfigurationError

if TYPE_CHECKING:
    from botocore.credentials import Credentials, ReadOnlyCredentials
    from botocore.session import Session

__all__ = ["SERVICE", "Account", "AwsAuth", "region_in", "sent_secrets", "sign"]

SERVICE = "bedrock"  # the signing name of the bedrock-runtime endpoint
# Bedrock Runtime (Converse) and Agent Runtime (Rerank) hosts both name their region.
_AWS_HOST = re.compile(r"(?:^|\.)bedrock(?:-agent)?-runtime(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.", re.IGNORECASE)
# Configurations resolved and kept; past it the oldest is forgotten (ad-hoc calls make one per model).
_MAX_ACCOUNTS = 256


def region_in(base_url: str | None) -> str | None:
    """The region named by an AWS endpoint's host, else None."""
    host = urlsplit(base_url).hostname if base_url else None
    match = _AWS_HOST.search(host or "")
    return match.group(1).lower() if match else None


@attrs.frozen
class Account:
    """What one configuration's calls use: its endpoint, its region and botocore's credentials."""

    endpoint: str
    region: str
    credentials: Credentials | None = attrs.field(repr=False)

    async def frozen_credentials(self, provider: str, model: str) -> ReadOnlyCredentials:
        """The credentials to sign with now; a refresh that is due runs in a worker thread."""
        credentials = self.credentials
        if credentials is None:
            raise AuthenticationError("no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                                      "AWS_PROFILE, or api_key (a Bedrock API key)", provider=provider, model=model)
        if _refresh_due(credentials):
            return await asyncio.to_thread(credentials.get_frozen_credentials)
        return credentials.get_frozen_credentials()


def _refresh_due(credentials: Credentials) -> bool:
    from botocore.credentials import RefreshableCredentials

    return isinstance(credentials, RefreshableCredentials) and credentials.refresh_needed()


class AwsAuth:
    """Each configuration's ``Account``, resolved on its first call and kept."""

    def __init__(self, session: Callable[[], Session] | None = None) -> None:
        self._session = session
        self._accounts: dict[tuple[str, str | None, bool], Account] = {}
        self._lock = threading.Lock()  # resolution runs in worker threads: one resolves, the others wait

    async def account(self, config: ProviderConfig, *, signed: bool) -> Account:
        """``config``'s account; ``signed`` False (a bearer key) needs no credentials, and no
        botocore at all when ``base_url`` is given."""
        found = self._accounts.get((config.identifier, config.base_url, signed))
        if found is not None:
            return found
        if not signed and config.base_url is not None:  # a bearer key to a given endpoint needs no region
            return Account(_endpoint(config.base_url, ""), region_in(config.base_url) or "", None)
        return await asyncio.to_thread(self._resolve, config, signed)

    def _resolve(self, config: ProviderConfig, signed: bool) -> Account:
        key = (config.identifier, config.base_url, signed)
        with self._lock:
            if (found := self._accounts.get(key)) is not None:
                return found
            session = self._new_session()
            region = region_in(config.base_url) or session.get_config_variable("region")
            if not isinstance(region, str) or not region:
                raise ConfigurationError(
                    f"configuration {config.identifier!r}: no AWS region: give base_url "
                    "https://bedrock-runtime.REGION.amazonaws.com, or set AWS_DEFAULT_REGION or a profile region")
            credentials = session.get_credentials() if signed else None
            account = Account(_endpoint(config.base_url, region), region, credentials)
            if len(self._accounts) >= _MAX_ACCOUNTS:
                del self._accounts[next(iter(self._accounts))]
            self._accounts[key] = account
            return account

    def _new_session(self) -> Session:
        if self._session is not None:
            return self._session()
        import botocore.session

        return botocore.session.Session()


def _endpoint(base_url: str | None, region: str) -> str:
    return (base_url or f"https://bedrock-runtime.{region}.amazonaws.com").rstrip("/")


def sent_secrets(credentials: ReadOnlyCredentials, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What a request signed with ``credentials`` carries that a server may echo and no error may
    show: the access key id (``Credential=``), the session token (``X-Amz-Security-Token``), the
    signature, and the secret key (never sent, but never shown either)."""
    signature = headers.get("Authorization", "").rpartition("Signature=")[2]
    return tuple(s for s in (credentials.access_key, credentials.secret_key, credentials.token, signature) if s)


def sign(credentials: ReadOnlyCredentials, region: str, url: str, body: bytes,
         headers: Mapping[str, str]) -> dict[str, str]:
    """``headers`` with botocore's SigV4 signature of a POST of ``body`` to ``url`` added."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(method="POST", url=url, data=body, headers=dict(headers))
    SigV4Auth(credentials, SERVICE, region).add_auth(request)
    return dict(request.headers.items())
