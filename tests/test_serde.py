"""``serde.get``: the exact-type fast path (ADR 0037) answers as the generic checks do."""

from __future__ import annotations

import pytest

from provmw._base import serde
from provmw.errors import InvalidDataError


def test_a_missing_field_asked_for_as_object_is_missing() -> None:
    with pytest.raises(InvalidDataError, match="missing field 'id'"):
        serde.get({}, "id", object, "w")


def test_a_boolean_is_not_taken_for_an_int() -> None:
    with pytest.raises(InvalidDataError, match="got a boolean"):
        serde.get({"n": True}, "n", int, "w")


def test_a_tuple_is_taken_for_a_list() -> None:
    xs: object = serde.get({"xs": (1, 2)}, "xs", list, "w")
    assert xs == (1, 2)


def test_null_is_the_default_only_when_the_default_is_none() -> None:
    assert serde.get({"s": None}, "s", str, "w", default=None) is None
    with pytest.raises(InvalidDataError, match="expected str, got NoneType"):
        serde.get({"s": None}, "s", str, "w", default="")
