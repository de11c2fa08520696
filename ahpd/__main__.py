"""The ``ahpd`` command (``python -m ahpd`` and the ``ahpd`` script both start here).

Importing the command line takes a good part of a second (trio, the chat client, argparse's
tables), and a Ctrl-C pressed meanwhile would otherwise be a ``KeyboardInterrupt`` traceback
from whatever module was loading. Until :func:`main` runs, it is said in the same one line as
any Ctrl-C before the daemon is ready, with the same status; nothing has been touched yet.
The command line keeps that rule until the command runs (``ahpd run`` until just before it
touches its data directory). Python's own start-up (``site``, before this module) is the
interpreter's and stays so.
"""

import os
import signal
import sys


def _interrupted_while_loading(signum: int, frame: object) -> None:
    os.write(2, b"ahpd: interrupted\n")
    os._exit(130)  # EXIT_INTERRUPTED (ahpd.cli_errors), not imported yet: that import is what we guard


signal.signal(signal.SIGINT, _interrupted_while_loading)

from ahpd.cli import main as _main  # noqa: E402 - after the handler: this import is what it guards


def main() -> int:
    """The command line decides what Ctrl-C is from here on (see :func:`ahpd.cli.main`)."""
    return _main()


if __name__ == "__main__":
    sys.exit(main())
