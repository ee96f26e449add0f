"""A call's keyword arguments as the manager's public methods take them: the ones that say how
to run the call (``CallArguments``) and the option keyword arguments (``call_options``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from provmw.config import KNOWN_OPTIONS, Secret, check_options
from provmw.context import FrozenMap
from provmw.errors import ConfigurationError, UnknownArgumentError
from provmw.options import did_you_mean

__all__ = ["CallArguments", "call_options"]


class CallArguments(NamedTuple):
    """The caller's keyword arguments of one call, as the public methods spell them out (a tuple:
    made on every call, it costs a third of a frozen attrs class)."""

    configuration: str | None = None
    user: str | None = None
    tenant: str | None = None
    controls: Mapping[str, Any] | None = None
    idempotency_key: str | None = None
    correlation_id: str | None = None
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | Secret | None = None
    timeout_s: float | None = None



def call_options(options: Mapping[str, Any] | None, option_args: Mapping[str, Any]) -> FrozenMap:
    """The call's options: ``options={...}`` and the option keyword arguments, each name given once."""
    if options is None and not option_args:
        return _NO_OPTIONS  # the common call: nothing to check, and an empty FrozenMap is immutable
    check_options(options or {})
    if not option_args:
        return FrozenMap(options)
    for name in option_args:
        _check_option_argument(name, options or {})
    check_options(option_args)
    return FrozenMap({**(options or {}), **option_args})


_NO_OPTIONS = FrozenMap()


def _check_option_argument(name: str, options: Mapping[str, Any]) -> None:
    if name not in KNOWN_OPTIONS:
        known = [*_CALL_ARGUMENTS, *KNOWN_OPTIONS]
        raise UnknownArgumentError(
            f"unknown argument {name!r}{did_you_mean(name, known)}: it is neither a call argument nor an option "
            f"provmw knows; a vendor field goes in options={{'extra_body': {{{name!r}: ...}}}}")
    if name in options:
        raise ConfigurationError(f"option {name!r} given twice, as {name}= and in options={{...}}: give it once")


_CALL_ARGUMENTS = CallArguments._fields
