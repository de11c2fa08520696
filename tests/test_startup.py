"""What the quick commands load: ``ahpd --help``, ``status``, ``users`` and ``chat`` start without
the daemon, the host, the agents, the transports or the generated protocol model, which take
about a second to import between them (``python -X importtime -m ahpd --help`` shows the rest).
The command line imports those where one command needs them; this keeps it so."""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules, and packages with everything under them, that only run, stdio, doctor, schema and
#: wire-check need.
HEAVY = (
    "ahpd.daemon",
    "ahpd.host",
    "ahpd.backends",
    "ahpd.demo_agent",
    "ahpd.state",
    "ahpd.transport",
    "ahpd.protocol.model",
    "ahpd.doctor",
    "ahpd.wire",
    "ahpd.ports.users",
    "argon2",
)


def _loaded(code: str) -> list[str]:
    """The heavy modules loaded once ``code`` has run in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = json.loads(run.stdout.splitlines()[-1])
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


def test_help_loads_neither_the_daemon_nor_the_host() -> None:
    assert (
        _loaded(
            "import contextlib, io\n"
            "from ahpd.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])"
        )
        == []
    )


def test_the_chat_client_loads_neither_the_daemon_nor_the_host() -> None:
    assert _loaded("import ahpd.cli, ahpd.chat.app, ahpd.chat.prompt") == []


#: Libraries a feature loads when it is first used, never with the daemon: each is tens of
#: milliseconds and megabytes that ``ahpd run`` would otherwise pay before its ready line.
ON_FIRST_USE = (
    "pygit2",
    "opentelemetry",
    "croniter",
    "http.client",
    "claude_agent_sdk",
    "acp",
    "pydantic",
    "cattrs",
    "jsonschema",
    "argon2",
    # trio.testing imports pytest wherever pytest is installed (the daemon takes
    # wait_all_tasks_blocked from trio's core); the wire checker is wire-check's, not run's.
    "trio.testing",
    "pytest",
    "ahpd.wire.check",
    "ahpd.wire.reader",
    # SQLite: an in-memory automation store connects at its first transaction.
    "sqlite3",
)


def test_the_daemon_loads_no_feature_library_before_it_is_used() -> None:
    probe = "import ahpd.daemon, ahpd.transport.websocket, ahpd.backends.claude.backend\nimport json, sys\n"
    probe += "print(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = json.loads(run.stdout.splitlines()[-1])
    assert [m for m in modules if any(m == h or m.startswith(h + ".") for h in ON_FIRST_USE)] == []


def test_the_generated_model_builds_nothing_at_import() -> None:
    # Plain classes: no attrs class is made, no annotation resolved, no decoder built, until used.
    code = (
        "import ahpd.protocol.model as m, ahpd.protocol._base as b, ahpd.protocol.codec as c, sys\n"
        "print(len(b._FIELDS), sum(len(d.made) for d in c._MODES.values()), 'attr' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert run.stdout.split() == ["0", "0", "False"]
