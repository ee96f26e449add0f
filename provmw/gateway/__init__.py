"""``provmw serve``: an OpenAI- and Anthropic-compatible gateway in front of the ServiceManager.

Virtual keys (:mod:`provmw.gateway.keys`, ADR 0055) say who a request is for and which budgets it
draws on; the server runs each request through the same manager and stack as a library call.
"""

from __future__ import annotations

from provmw.gateway._keys_sqlite import SqliteKeyStore
from provmw.gateway.app import GatewayOptions, gateway_app
from provmw.gateway.keys import KeyCache, KeyRecord, KeyStore
from provmw.gateway.serving import serve

__all__ = ["GatewayOptions", "KeyCache", "KeyRecord", "KeyStore", "SqliteKeyStore", "gateway_app", "serve"]
