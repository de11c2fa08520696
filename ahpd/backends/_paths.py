"""Where an agent process runs: shared by every backend that starts one."""

from __future__ import annotations

import os
from pathlib import Path

from ahpd.backends.port import BackendError


def working_root(cwd: Path | str) -> Path:
    """The real directory an agent works in; refused when it is not there."""
    root = Path(os.path.realpath(cwd))
    if not root.is_dir():
        raise BackendError(f"the working directory does not exist: {cwd}")
    return root


def scratch_root() -> Path:
    """Where a short-lived agent (a probe, a listing, a deletion) runs."""
    home = Path.home()
    return working_root(home if home.is_dir() else "/")


def ignore(event: object) -> None:
    """An event sink for an agent nobody is listening to."""
