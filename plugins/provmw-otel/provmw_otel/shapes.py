"""What a configuration's spans and measurements start from, built once per configuration and
operation instead of once per call: the span name, the call span's and the attempt span's start
attributes, the server, and the metric label sets of each outcome (response model, error type).

The SDK validates and copies every attribute set it is handed and caches nothing by identity or
hash, so keeping these saves the plugin's own work, not the SDK's. They are shared by every call
and handed to the SDK as they are: typed read-only, and never changed once built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from provmw.config import ProviderConfig
from provmw.context import ProviderCallContext, ProviderOperation
from provmw_otel import attributes as attr

__all__ = ["Labels", "Shape", "Shapes"]

Fixed = Mapping[str, Any]
# Bounds on what is kept: ad-hoc and evolved configurations are new objects each call, and an
# outcome's key holds the model a provider answered with.
_SHAPES_LIMIT = 1024
_OUTCOMES_LIMIT = 64


@attrs.frozen
class Labels:
    """The label sets of one attempt outcome: its duration's and its two token counts'."""

    duration: Fixed
    input_tokens: Fixed
    output_tokens: Fixed


def _labels(base: Fixed, response_model: str | None, error_type: str | None) -> Labels:
    found = dict(base)
    if response_model is not None:
        found[attr.RESPONSE_MODEL] = response_model
    if error_type is not None:
        found[attr.ERROR_TYPE] = error_type
    return Labels(found, found | {attr.TOKEN_TYPE: "input"}, found | {attr.TOKEN_TYPE: "output"})


class Shape:
    """One configuration's and operation's span name, start attributes and label sets."""

    def __init__(self, ctx: ProviderCallContext, config: ProviderConfig) -> None:
        self.config = config
        self.name = attr.span_name(ctx, config)
        self.call: Fixed = attr.call_attributes(ctx, config)
        self.attempt: Fixed = attr.attempt_attributes(ctx, config)
        self.server: Fixed = attr.server_attributes(config)
        self._base = attr.metric_attributes(self.attempt)
        self._outcomes: dict[tuple[str | None, str | None], Labels] = {}

    def attempt_attributes(self, ctx: ProviderCallContext) -> Fixed:
        """The attempt span's start attributes; built afresh only when the call gives options."""
        return attr.attempt_attributes(ctx, self.config) if ctx.facts.options else self.attempt

    def labels(self, response_model: str | None, error_type: str | None) -> Labels:
        """The label sets of an attempt answered by ``response_model`` or failed with ``error_type``."""
        key = (response_model, error_type)
        found = self._outcomes.get(key)
        if found is None:
            if len(self._outcomes) >= _OUTCOMES_LIMIT:
                self._outcomes.clear()
            found = self._outcomes[key] = _labels(self._base, response_model, error_type)
        return found


class Shapes:
    """The :class:`Shape` of each configuration object and operation, built at first use."""

    def __init__(self) -> None:
        self._kept: dict[tuple[int, ProviderOperation], Shape] = {}

    def __call__(self, ctx: ProviderCallContext, config: ProviderConfig) -> Shape:
        key = (id(config), ctx.operation)
        kept = self._kept.get(key)
        if kept is not None and kept.config is config:  # the object itself: an id may be reused
            return kept
        if len(self._kept) >= _SHAPES_LIMIT:
            self._kept.clear()
        kept = self._kept[key] = Shape(ctx, config)
        return kept
