"""`SessionStatus` bit arithmetic shared by the session and chat reducers.

The low five bits hold the activity (Idle, Error, InProgress, InputNeeded,
where InputNeeded = InProgress | 16); IsRead and IsArchived are independent
flags above them that activity changes must preserve.
"""

from __future__ import annotations

IDLE = 1
ERROR = 2
IN_PROGRESS = 8
INPUT_NEEDED = 24
IS_READ = 32
IS_ARCHIVED = 64

ACTIVITY_MASK = (1 << 5) - 1


def with_flag(status: int, flag: int, on: bool) -> int:
    """Set or clear one orthogonal flag."""
    return status | flag if on else status & ~flag


def with_activity(status: int, activity: int) -> int:
    """Replace the activity bits, keeping the orthogonal flags."""
    return (status & ~ACTIVITY_MASK) | activity
