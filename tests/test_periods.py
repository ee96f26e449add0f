"""Calendar windows in a time zone, across DST changes and month ends."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from provmw._base.periods import PERIODS, window

LA = ZoneInfo("America/Los_Angeles")


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=LA).timestamp()


def test_the_day_dst_starts_is_23_hours_long() -> None:
    span = window("day", LA, at(2026, 3, 8, 12))
    assert span.label == "2026-03-08"
    assert span.end is not None and span.start is not None
    assert span.end.timestamp() - span.start.timestamp() == 23 * 3600


def test_the_day_dst_ends_is_25_hours_long() -> None:
    span = window("day", LA, at(2026, 11, 1, 12))
    assert span.end is not None and span.start is not None
    assert span.end.timestamp() - span.start.timestamp() == 25 * 3600


def test_a_day_rolls_at_local_midnight_not_utc() -> None:
    assert window("day", LA, at(2026, 11, 1, 23, 59, 59)).label == "2026-11-01"
    assert window("day", LA, at(2026, 11, 2, 0, 0, 0)).label == "2026-11-02"
    assert window("day", LA, at(2026, 11, 1, 17)).label == "2026-11-01"  # already 2 November in UTC


def test_a_month_rolls_at_local_midnight_of_the_first() -> None:
    assert window("month", LA, at(2026, 1, 31, 23, 59, 59)).label == "2026-01"
    span = window("month", LA, at(2026, 2, 1))
    assert span.label == "2026-02"
    assert span.resets_at == "2026-03-01T00:00:00-08:00"


def test_a_week_starts_on_monday() -> None:
    span = window("week", LA, at(2026, 11, 22, 12))  # a Sunday
    assert span.start == dt.datetime(2026, 11, 16, tzinfo=LA)
    assert span.label == "2026-W47"


def test_total_never_resets() -> None:
    assert window("total", LA, at(2026, 11, 22)).resets_at is None


@given(st.integers(min_value=1_700_000_000, max_value=1_900_000_000), st.sampled_from(PERIODS[:3]))
def test_every_instant_lies_in_its_window_and_windows_tile_time(now: int, period: str) -> None:
    span = window(period, LA, now)  # type: ignore[arg-type]
    assert span.start is not None and span.end is not None
    assert span.start.timestamp() <= now < span.end.timestamp()
    following = window(period, LA, span.end.timestamp())  # type: ignore[arg-type]
    assert following.start == span.end and following.label != span.label
