"""The fake's JSON answer to a schema: the plainest instance that validates, deterministically."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["instance"]

_PLAIN: dict[str, Any] = {"integer": 0, "number": 0, "boolean": False, "null": None}


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for key in ref[2:].split("/"):
        node = node[key]
    return _resolve(node, root)


def instance(schema: Mapping[str, Any], text: str, root: Mapping[str, Any] | None = None) -> Any:
    """A value of ``schema`` (a JSON Schema object): its ``const``, first ``enum`` value or first
    ``anyOf``/``oneOf`` branch; every property of an object, ``minItems`` copies in an array;
    ``text`` for a string."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            return instance(schema[key][0], text, root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    kind = kind[0] if isinstance(kind, list) else kind
    if kind == "object":
        return {name: instance(sub, text, root) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [instance(schema.get("items") or {}, text, root) for _ in range(schema.get("minItems") or 0)]
    return text if kind == "string" else _PLAIN.get(kind)
