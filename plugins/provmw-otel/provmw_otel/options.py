"""The settings of ``[middleware.otel]``."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

__all__ = ["OtelOptions"]


def _names(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"traceparent_to must be a list of configuration names (or \"*\"), got {value!r}")
    return tuple(value)


@attrs.frozen
class OtelOptions:
    """``capture_content``: put the answer's text (redacted) on the call span as
    ``gen_ai.output.messages``; off by default. ``traceparent_to``: the configurations whose
    requests carry a W3C ``traceparent`` header (``["*"]``: all); none by default, since a
    third-party provider has no use for your trace ids."""

    capture_content: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    traceparent_to: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def sends_traceparent(self, configuration: str) -> bool:
        """Whether requests made from ``configuration`` carry a ``traceparent`` header."""
        return bool(self.traceparent_to) and ("*" in self.traceparent_to or configuration in self.traceparent_to)
