"""Calendar budget periods in a time zone: the window an instant falls in, and when it ends.

A day runs from local midnight to the next local midnight, so it is 23 or 25 hours long
across a DST change; a week starts on Monday (ISO 8601); a month on its first day.
``total`` is one window that never resets.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, get_args
from zoneinfo import ZoneInfo

import attrs

__all__ = ["PERIODS", "Period", "Window", "window"]

Period = Literal["day", "week", "month", "total"]
PERIODS: tuple[str, ...] = get_args(Period)


@attrs.frozen
class Window:
    """One calendar window: its label (part of a bucket's key), start and end (local, aware)."""

    label: str
    start: dt.datetime | None = None
    end: dt.datetime | None = None

    @property
    def resets_at(self) -> str | None:
        return self._resets_at

    def holds(self, now: float) -> bool:
        """Whether the POSIX time ``now`` falls in this window."""
        return self._span[0] <= now < self._span[1]

    _span: tuple[float, float] = attrs.field(init=False, eq=False, repr=False)
    _resets_at: str | None = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        inf = float("inf")
        span = (-inf, inf) if self.start is None or self.end is None else (self.start.timestamp(),
                                                                          self.end.timestamp())
        object.__setattr__(self, "_span", span)
        object.__setattr__(self, "_resets_at", None if self.end is None else self.end.isoformat())


def window(period: Period, zone: ZoneInfo, now: float) -> Window:
    """The window of ``period`` in ``zone`` that the POSIX time ``now`` falls in."""
    if period == "total":
        return Window("total")
    today = dt.datetime.fromtimestamp(now, zone).date()
    if period == "day":
        first, after, label = today, today + dt.timedelta(days=1), today.isoformat()
    elif period == "week":
        first = today - dt.timedelta(days=today.weekday())
        after = first + dt.timedelta(days=7)
        year, week, _ = first.isocalendar()
        label = f"{year}-W{week:02d}"
    else:
        first = today.replace(day=1)
        after = (first + dt.timedelta(days=32)).replace(day=1)
        label = f"{first.year}-{first.month:02d}"
    return Window(label, _midnight(first, zone), _midnight(after, zone))


def _midnight(day: dt.date, zone: ZoneInfo) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(0), tzinfo=zone)
