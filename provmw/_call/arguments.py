"""A call's keyword arguments as the manager's public methods take them: the ones that say how
to run the call (``CallArguments``) and the option keyword arguments (``call_options``)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, NamedTuple

from provmw.config import KNOWN_OPTIONS, Secret, check_options
from provmw.context import FrozenMap, Principal
from provmw.errors import ConfigurationError, UnknownArgumentError

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
    principal: Principal | None = None



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
    if name in _METHOD_ARGUMENTS:
        raise UnknownArgumentError(f"unknown argument {name!r} for this call: it is an argument of "
                                   f"{_METHOD_ARGUMENTS[name]}")
    if name not in KNOWN_OPTIONS:
        raise UnknownArgumentError(
            f"unknown argument {name!r}{_slip_of(name)}: it is neither a call argument nor an option "
            f"provmw knows; a vendor field goes in options={{'extra_body': {{{name!r}: ...}}}}")
    if name in options:
        raise ConfigurationError(f"option {name!r} given twice, as {name}= and in options={{...}}: give it once")


_CALL_ARGUMENTS = CallArguments._fields
# Arguments some call methods take and others do not: given to one that does not, the caller
# is told where it belongs rather than offered a neighbour (tools is not a slip of controls).
_METHOD_ARGUMENTS = {
    "response_schema": "chat, chat_with_tools, stream_chat and stream_chat_with_tools",
    "tools": "chat_with_tools and stream_chat_with_tools",
    "dimensions": "embed",
    "images": "vision",
}
_KNOWN_NAMES = [*_CALL_ARGUMENTS, "options", *_METHOD_ARGUMENTS, *KNOWN_OPTIONS]
_NEAR = 0.8  # difflib's ratio of a one- or two-letter slip of a name this long


def _slip_of(name: str) -> str:
    """A hint naming the known name ``name`` is a slip of: a near spelling, or one of them the
    start of the other (config, timeout); a name that only shares a part (api_base, api_key)
    gets none, as a wrong guess costs the reader more than no guess."""
    for known in difflib.get_close_matches(name, _KNOWN_NAMES, n=3):
        near = difflib.SequenceMatcher(None, name, known).ratio() >= _NEAR
        if near or known.startswith(name) or name.startswith(known):
            return f" (did you mean {known!r}?)"
    return ""
