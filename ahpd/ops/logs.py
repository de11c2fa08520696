"""Log lines that a client cannot forge.

Much of what ahpd logs was chosen by someone else: a client's id, a method
name, a URI, the reason an agent gave. A newline in one of them would start
a line of the client's choosing in the journal (``ahpd ready: ...``, a fake
error); an escape sequence would repaint the terminal. So the one formatter
every handler uses escapes control characters in the message itself, rather
than trusting each call site to remember. A traceback stays on several lines,
each indented, so none of its lines (whose text may quote a client) can pass
for a log line of its own either.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import logging.handlers
import os
import re
import sys
from pathlib import Path

from ahpd.ports.atomic import private_file

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# C0 and C1 controls, DEL, the Unicode line and paragraph separators, and the
# bidirectional overrides and isolates (which reorder what a reader sees).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``)."""
    return _UNSAFE.sub(_escape_one, text)


class SafeFormatter(logging.Formatter):
    """A formatter whose every line is one line: the message escaped, a traceback indented."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return escape(super().formatMessage(record))

    def formatException(self, ei) -> str:  # noqa: ANN001, N802 - logging's signature
        return _indent(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802 - logging's name
        return _indent(super().formatStack(stack_info))


def _indent(text: str) -> str:
    return "\n".join("    " + escape(line) for line in text.split("\n"))


LOG_FILE = "logs/ahpd.log"


def to_file(data_dir: Path, *, pid: bool = False) -> logging.Handler:
    """Also log to ``DATA_DIR/logs/ahpd.log``, rotated at 1 MiB with three
    kept, so a bug report has the daemon's own lines to collect
    (``vscode/collectAgentHostDebugLogs``). ``pid`` puts the process id in
    each line, for ``ahpd stdio``, of which an editor may run several.
    Returns the handler, to remove."""
    path = data_dir / LOG_FILE
    path.parent.mkdir(mode=0o700, exist_ok=True)
    with contextlib.suppress(OSError):  # 0600, narrowed if an older ahpd left it 0644
        private_file(path)
    handler = _LogFile(path, maxBytes=2**20, backupCount=3, encoding="utf-8", delay=True)
    # ahpd's level as started: a telemetry subscriber that lowers the logger for itself does not reach the file.
    handler.setLevel(logging.getLogger("ahpd").getEffectiveLevel())
    handler.setFormatter(SafeFormatter(FORMAT.replace("%(name)s", "%(name)s[%(process)d]") if pid else FORMAT))
    logging.getLogger().addHandler(handler)
    return handler


class _LogFile(logging.handlers.RotatingFileHandler):
    """The file is opened for each record and closed again. A write
    descriptor held open would keep the data directory's filesystem from
    being remounted read-only (the daemon is meant to ride that out), and a
    disk that refuses writes is said once on stderr, not once per line."""

    failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.stream is None and not os.path.lexists(self.baseFilename):
            self._private()  # removed meanwhile: a stat per line, not an open (~1 us against ~13 us)
        super().emit(record)
        if self.stream is not None:
            try:
                self.stream.close()
            except OSError:
                pass
            self.stream = None

    def doRollover(self) -> None:
        super().doRollover()
        self._private()  # the fresh file, before this line is written to it

    def _private(self) -> None:
        """The file made 0600 before logging makes it with the umask's mode."""
        with contextlib.suppress(OSError):  # a file that cannot be made is handleError's to say
            private_file(Path(self.baseFilename))

    def handleError(self, record: logging.LogRecord) -> None:
        if not self.failed:
            self.failed = True
            exc = sys.exc_info()[1]
            sys.stderr.write(f"ahpd: cannot write the log file {self.baseFilename}: {exc}; lines go to stderr only\n")
        self.stream = None


def setup(level: str) -> None:
    """Log at ``level`` (a name such as ``"info"``) to stderr, through
    ``SafeFormatter``. The level is ahpd's own; the libraries' debug chatter
    (a line per WebSocket frame) stays at info even under ``debug``."""
    # A crash below Python (a native extension's fault) would otherwise end
    # the process without a line: say where each thread was, on stderr.
    faulthandler.enable()
    wanted = getattr(logging, level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter(FORMAT))
    handler.setLevel(wanted)  # as the file's: a debug subscriber's lines (ahpd.host.telemetry) are not stderr's
    logging.basicConfig(level=max(wanted, logging.INFO), handlers=[handler])
    logging.getLogger("ahpd").setLevel(wanted)
