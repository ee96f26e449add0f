from __future__ import annotations

import subprocess
import sys

import provmw


def test_import_touches_neither_aiohttp_nor_pluggy_nor_the_network() -> None:
    code = ("import socket\n"
            "socket.socket.connect = lambda *a: (_ for _ in ()).throw(AssertionError('network at import'))\n"
            "import sys, provmw\n"
            "assert 'aiohttp' not in sys.modules and 'pluggy' not in sys.modules, sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_public_names_are_pinned() -> None:
    assert set(provmw.__all__) >= {
        "ProviderOperation", "ProviderCallContext", "ProviderConfig", "Middleware", "MiddlewarePipeline",
        "ServiceManager", "SyncServiceManager", "hookimpl", "ProvmwError", "ConfigurationError",
        "PluginError", "PluginLoadError", "DuplicateMiddlewareError", "ProviderError", "RateLimitError",
        "ProviderTimeoutError", "ProviderUnavailableError", "AuthenticationError", "InvalidRequestError",
        "ContextLengthExceededError", "ContentPolicyError", "CircuitOpenError", "FallbackExhaustedError",
        "BudgetExceededError",
    }
    for name in provmw.__all__:
        assert getattr(provmw, name) is not None, name


def test_lazy_attribute_error_names_the_attribute() -> None:
    import pytest

    with pytest.raises(AttributeError, match="no_such_name"):
        provmw.no_such_name  # noqa: B018
