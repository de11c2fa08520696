"""Schedule triggers: the portable AHP cron grammar, checked, and its occurrences.

croniter evaluates the expression against local calendar time in the
trigger's IANA zone (``zoneinfo``); this module only holds croniter to the
protocol's grammar, which is narrower: exactly five fields, no macros, no
Quartz extensions (``?``, ``L``, ``W``, ``#``), steps only over ``*`` or a
range. With the daemon's test-only environment variable
``AHPD_TEST_SCHEDULE_SECONDS=1`` a sixth field, seconds (croniter's own sixth
field), is taken as well, so a real daemon can be driven through several
occurrences in a test; the minimum interval is then counted in seconds rather
than minutes. A schedule with no occurrence in the next years is refused.

Times are timezone-aware datetimes; occurrences are said in UTC as the
protocol's timestamps (``...T08:00:00.000Z``), whose string order is their
time order (the store compares them as strings).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from typing import Any


def _croniter() -> Any:
    """The croniter module, imported on first use: ~20 ms of start-up a
    daemon without a schedule should not pay."""
    import croniter

    return croniter


def croniter(*args: Any, **kwargs: Any) -> Any:
    """croniter's iterator (see :func:`_croniter`)."""
    return _croniter().croniter(*args, **kwargs)


_VALUE = r"(?:\d+|[A-Za-z]{3})"
_STEP = r"/[1-9]\d*"
_ITEM = re.compile(rf"^(?:\*(?:{_STEP})?|{_VALUE}(?:-{_VALUE}(?:{_STEP})?)?)$")
_FIELDS = ("minute", "hour", "day of month", "month", "day of week", "second")
_NAMED = {"month", "day of week"}
#: Occurrences counted one by one when catching up; beyond, only the latest matters.
_COUNTED = 100
#: Candidates croniter offers that a daylight-saving change made unreal, at most, in a row.
_SKIPS = 8
#: A schedule with no occurrence within this many years is refused (``0 0 30 2 *``):
#: one that would never fire is a mistake, not a plan. Nine years are more than
#: the longest gap between leap days (eight, across 2100, which has none).
HORIZON_YEARS = 9


class NeverFires(ValueError):
    """A schedule with no occurrence after a time (croniter found none)."""


def stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def parse_stamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def zone(name: str) -> zoneinfo.ZoneInfo | None:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def problem(expression: str, time_zone: str, *, seconds: bool = False, min_interval: float = 0) -> str | None:
    """Why this schedule cannot be kept, or None. ``min_interval`` in seconds."""
    fields = expression.split()
    allowed = (5, 6) if seconds else (5,)
    if len(fields) not in allowed:
        return (
            f"schedule expression {expression!r} has {len(fields)} fields; "
            "AHP cron has exactly five (minute hour day-of-month month day-of-week)"
        )
    for name, field in zip(_FIELDS, fields, strict=False):
        for item in field.split(","):
            if not _ITEM.match(item) or (name not in _NAMED and re.search("[A-Za-z]", item)):
                return f"schedule expression {expression!r}: {item!r} is not a valid {name} field item"
    if not _croniter().croniter.is_valid(expression):
        return f"schedule expression {expression!r} is out of range for cron"
    tz = zone(time_zone)
    if tz is None:
        return f"time zone {time_zone!r} is not an IANA time zone this host knows"
    try:
        croniter(expression, dt.datetime.now(tz), max_years_between_matches=HORIZON_YEARS).get_next(dt.datetime)
    except _croniter().CroniterBadDateError:
        return f"schedule expression {expression!r} never fires in the next {HORIZON_YEARS} years"
    if min_interval > 0:
        shortest = shortest_interval(expression, tz)
        if shortest is not None and shortest < min_interval:
            unit, size = ("seconds", 1) if seconds else ("minutes", 60)
            return (
                f"schedule expression {expression!r} can fire {shortest / size:g} {unit} apart; "
                f"this host's minimum interval is {min_interval / size:g} {unit}"
            )
    return None


def shortest_interval(expression: str, tz: dt.tzinfo, start: dt.datetime | None = None) -> float | None:
    """The shortest gap, in seconds, between consecutive occurrences, read
    off the minute and hour fields as if every day matched - so a bound that
    is never longer than the real gap (a restricted day only lengthens the
    gap across midnight). With a seconds field, the next few hundred
    occurrences are looked at instead (a test schedule)."""
    expanded = croniter(expression).expanded
    if len(expanded) > 5:
        it = croniter(expression, (start or dt.datetime.now(dt.UTC)).astimezone(tz))
        times = [it.get_next(dt.datetime) for _ in range(200)]
        return min((b - a).total_seconds() for a, b in zip(times, times[1:], strict=False))
    minutes = sorted(range(60) if expanded[0] == ["*"] else {int(m) for m in expanded[0]})
    hours = sorted(range(24) if expanded[1] == ["*"] else {int(h) for h in expanded[1]})
    gaps = [b - a for a, b in zip(minutes, minutes[1:], strict=False)]
    gaps += [(h2 - h1) * 60 - minutes[-1] + minutes[0] for h1, h2 in zip(hours, hours[1:], strict=False)]
    gaps.append((24 + hours[0] - hours[-1]) * 60 - minutes[-1] + minutes[0])
    return min(gaps) * 60.0


def next_after(expression: str, time_zone: str, after: dt.datetime) -> dt.datetime:
    """The first occurrence strictly after ``after``. A local minute that a
    daylight-saving change skips is no occurrence (croniter would move it
    to the next hour, which the expression may not name); a repeated one is
    each of its instants. ``NeverFires`` when there is none."""
    tz = zone(time_zone) or dt.UTC
    it = croniter(expression, after.astimezone(tz))
    for _ in range(_SKIPS):
        try:
            when = it.get_next(dt.datetime)
        except _croniter().CroniterBadDateError as exc:
            raise NeverFires(f"schedule expression {expression!r} has no occurrence after {stamp(after)}") from exc
        if _real(expression, when, tz):
            break
    return when.astimezone(dt.UTC)


def missed(expression: str, time_zone: str, after: dt.datetime, now: dt.datetime) -> tuple[int, dt.datetime | None]:
    """How many occurrences fall in (after, now] - counted up to a
    hundred, then said as a hundred - and the latest of them."""
    count, at = 0, after
    latest: dt.datetime | None = None
    while count < _COUNTED:
        upcoming = next_after(expression, time_zone, at)
        if upcoming > now:
            return count, latest
        count, latest, at = count + 1, upcoming, upcoming
    # Down for long: the latest is the one before the first after now.
    tz = zone(time_zone) or dt.UTC
    it = croniter(expression, next_after(expression, time_zone, now).astimezone(tz))
    for _ in range(_SKIPS):
        before = it.get_prev(dt.datetime)
        if _real(expression, before, tz):
            break
    assert latest is not None  # a hundred were counted
    return count, max(latest, before.astimezone(dt.UTC))


def _real(expression: str, when: dt.datetime, tz: dt.tzinfo) -> bool:
    """Whether ``when`` is a local time that exists and that the expression names."""
    local = when.astimezone(tz)
    wall = local.replace(tzinfo=None)
    exists = wall.replace(tzinfo=tz, fold=local.fold).astimezone(dt.UTC).astimezone(tz).replace(tzinfo=None) == wall
    if not exists:
        return False
    minutes, hours = croniter(expression).expanded[:2]
    return (minutes == ["*"] or local.minute in minutes) and (hours == ["*"] or local.hour in hours)
