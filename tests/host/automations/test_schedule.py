"""The portable AHP cron grammar and its occurrences (ahpd.host.automations.schedule): pure, no clock."""

from __future__ import annotations

import datetime as dt

import pytest

from ahpd.host.automations import schedule

UTC = dt.UTC


def at(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=UTC)


def occurrences(expression: str, zone: str, after: dt.datetime, n: int) -> list[str]:
    out = []
    for _ in range(n):
        after = schedule.next_after(expression, zone, after)
        out.append(schedule.stamp(after))
    return out


@pytest.mark.parametrize(
    "expression",
    [
        "0 * * * *",
        "30 9 * * *",
        "30 9 * * MON-FRI",
        "0 0 1,15 * *",
        "*/15 * * * *",
        "1-30/2 * * jan-jun 0,7",
    ],
)
def test_the_guides_examples_are_kept(expression: str) -> None:
    assert schedule.problem(expression, "Europe/Paris") is None


@pytest.mark.parametrize(
    "expression, said",
    [
        ("* * * *", "has 4 fields"),
        ("0 0 * * * *", "has 6 fields"),  # seconds only behind the test key
        ("@daily", "has 1 fields"),
        ("0 9 ? * *", "'?' is not a valid day of month"),
        ("0 9 L * *", "'L' is not a valid day of month"),
        ("0 9 * * 1#2", "'1#2' is not a valid day of week"),
        ("0 9 1W * *", "'1W' is not a valid day of month"),
        ("5/15 * * * *", "'5/15' is not a valid minute"),
        ("*/0 * * * *", "'*/0' is not a valid minute"),
        ("MON * * * *", "'MON' is not a valid minute"),
        ("60 * * * *", "out of range"),
        ("0 24 * * *", "out of range"),
    ],
)
def test_what_ahp_cron_does_not_have_is_refused_by_name(expression: str, said: str) -> None:
    found = schedule.problem(expression, "UTC")
    assert found is not None and said in found, found


def test_an_unknown_zone_and_a_short_interval_are_refused() -> None:
    assert "not an IANA time zone" in schedule.problem("0 9 * * *", "Mars/Olympus")
    assert "2 minutes apart" in schedule.problem("*/2 * * * *", "UTC", min_interval=300)
    # The gap across the hour, and across midnight, count too.
    assert "1 minutes apart" in schedule.problem("0,59 0,23 * * *", "UTC", min_interval=300)
    assert schedule.problem("0,55 9 * * *", "UTC", min_interval=300) is None
    assert schedule.problem("* * * * * */10", "UTC", seconds=True, min_interval=5) is None
    assert "3 seconds apart" in schedule.problem("* * * * * */3", "UTC", seconds=True, min_interval=5)


def test_a_skipped_local_minute_is_no_occurrence_and_a_repeated_one_is_each_instant() -> None:
    # Paris, 29 March 2026: 02:00-03:00 does not exist.
    assert occurrences("30 2 * * *", "Europe/Paris", at(2026, 3, 28, 12), 2) == [
        "2026-03-30T00:30:00.000Z",
        "2026-03-31T00:30:00.000Z",
    ]
    # Paris, 25 October 2026: 02:30 happens twice (CEST, then CET).
    assert occurrences("30 2 * * *", "Europe/Paris", at(2026, 10, 24, 12), 3) == [
        "2026-10-25T00:30:00.000Z",
        "2026-10-25T01:30:00.000Z",
        "2026-10-26T01:30:00.000Z",
    ]


def test_the_days_are_either_when_both_are_restricted() -> None:
    # 1st of the month OR a Monday (Unix cron), in January 2026 (Thursday the 1st).
    assert occurrences("0 9 1 * MON", "UTC", at(2026, 1, 1), 3) == [
        "2026-01-01T09:00:00.000Z",
        "2026-01-05T09:00:00.000Z",
        "2026-01-12T09:00:00.000Z",
    ]


def test_missed_counts_and_names_the_latest() -> None:
    assert schedule.missed("*/5 * * * *", "UTC", at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 4)) == (0, None)
    assert schedule.missed("*/5 * * * *", "UTC", at(2026, 1, 1, 0, 0), at(2026, 1, 1, 0, 5)) == (
        1,
        at(2026, 1, 1, 0, 5),
    )
    assert schedule.missed("*/5 * * * *", "UTC", at(2026, 1, 1), at(2026, 2, 1, 0, 7)) == (100, at(2026, 2, 1, 0, 5))
