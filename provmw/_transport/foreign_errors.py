"""The foreign exceptions below provider adapters and what each becomes (``provmw.http``'s
``EXCEPTION_ERRORS`` and ``NEVER_SENT``).

A module of its own because it needs aiohttp, which ``provmw.http`` imports only when the
first request is made: ``import provmw`` and building a manager stay fast (ADR 0029).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp

from provmw.errors import (
    InvalidRequestError,
    MalformedResponseError,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeoutError,
    ProviderUnavailableError,
)

__all__ = ["EXCEPTION_ERRORS", "MAPPED", "NEVER_SENT"]

# Searched along the exception's MRO; bare aiohttp.ClientError is deliberately absent so
# that a new aiohttp exception fails the completeness test instead of passing silently.
EXCEPTION_ERRORS: Mapping[type[BaseException], tuple[type[ProviderError], str]] = {
    aiohttp.ClientConnectorDNSError: (ProviderConnectionError, "host name did not resolve"),
    aiohttp.ClientSSLError: (ProviderConnectionError, "TLS handshake failed"),
    aiohttp.ClientProxyConnectionError: (ProviderConnectionError, "proxy refused the connection"),
    aiohttp.ClientConnectorError: (ProviderConnectionError, "connection refused"),
    aiohttp.ClientConnectionResetError: (ProviderConnectionError, "connection reset"),
    aiohttp.ClientOSError: (ProviderConnectionError, "connection failed"),
    aiohttp.ServerTimeoutError: (ProviderTimeoutError, "read timed out"),
    aiohttp.ServerDisconnectedError: (ProviderConnectionError, "server disconnected"),
    aiohttp.ServerFingerprintMismatch: (ProviderConnectionError, "certificate fingerprint mismatch"),
    aiohttp.ServerConnectionError: (ProviderConnectionError, "server connection failed"),
    aiohttp.ClientConnectionError: (ProviderConnectionError, "connection failed"),
    aiohttp.ClientPayloadError: (ProviderConnectionError, "connection dropped mid-body"),
    aiohttp.UploadAbortedError: (ProviderConnectionError, "upload aborted"),
    aiohttp.ContentTypeError: (MalformedResponseError, "unexpected content type"),
    aiohttp.TooManyRedirects: (InvalidRequestError, "too many redirects"),
    aiohttp.WSServerHandshakeError: (InvalidRequestError, "websocket handshake refused"),
    aiohttp.ClientHttpProxyError: (ProviderConnectionError, "proxy returned an error"),
    aiohttp.ClientResponseError: (ProviderUnavailableError, "bad response"),
    aiohttp.InvalidURL: (InvalidRequestError, "invalid URL"),
    aiohttp.NonHttpUrlClientError: (InvalidRequestError, "not an http(s) URL"),
    aiohttp.RedirectClientError: (InvalidRequestError, "bad redirect"),
    asyncio.TimeoutError: (ProviderTimeoutError, "timed out"),
    ConnectionError: (ProviderConnectionError, "connection failed"),
}

# Failures to open a connection (DNS, refused, TLS handshake, proxy): the request never
# left, so the provider cannot have billed it. A pooled connection that breaks later is
# not here, since the request may already have been written to it.
NEVER_SENT: tuple[type[BaseException], ...] = (aiohttp.ClientConnectorError,)

MAPPED = tuple(EXCEPTION_ERRORS)
