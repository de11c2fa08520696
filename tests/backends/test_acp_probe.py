"""The boot probe's child process speaks ACP without the ``acp`` library,
and learns exactly what the library-based in-process ``learn()`` learns
from the same agent: the demo agent, and scripted agents that list (with
malformed rows), delete, announce commands, ask the client something,
answer garbage, exit, or answer what is not an object."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from acp.meta import PROTOCOL_VERSION as LIBRARY_PROTOCOL_VERSION

from ahpd.backends.acp import probe, rpc, session
from ahpd.backends.acp.backend import AcpBackend
from tests.backends.acp_agents.harness import demo_backend, raw_backend

SCRIPTED_AGENT = Path(__file__).parent / "acp_agents" / "scripted_agent.py"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where both probes run their agent (``scratch_root``): never the user's HOME."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


def scripted(script: dict[str, Any], call_timeout: float = 30.0) -> AcpBackend:
    return AcpBackend("scripted", sys.executable, [str(SCRIPTED_AGENT), json.dumps(script)], call_timeout=call_timeout)


async def in_process(backend: AcpBackend) -> dict[str, Any]:
    """What the library-based ``learn()`` learns, in the probe's output shape."""
    await backend.learn()
    return {
        "models": backend.agent_info()["models"],
        "commands": backend.commands,
        "modes": backend.modes,
        "configOptions": backend.config_options,
        "conversations": None if backend.listed is None else [attrs.asdict(c) for c in backend.listed],
    }


async def child(backend: AcpBackend, *python_flags: str) -> tuple[dict[str, Any], str]:
    """The probe's child process run as the daemon runs it: its JSON and its standard error."""
    spec = {
        "provider": backend.provider,
        "command": backend.command,
        "args": list(backend.args),
        "env": backend.env,
        "call_timeout": backend.call_timeout,
    }
    done = await trio.run_process(
        [sys.executable, *python_flags, "-m", "ahpd.backends.acp.probe", json.dumps(spec)],
        capture_stdout=True,
        capture_stderr=True,
    )
    return json.loads(done.stdout), done.stderr.decode()


INIT = {"protocolVersion": 1, "agentCapabilities": {"sessionCapabilities": {"list": {}, "delete": {}}}}
COMMANDS: dict[str, Any] = {
    "sessionUpdate": "available_commands_update",
    "availableCommands": [
        {"name": "plan", "description": "Plan first", "input": {"hint": "what to plan"}, "extra": 1},
        {"name": "bare", "description": "No input", "input": {"nohint": True}},
    ],
}
FULL: dict[str, Any] = {
    "answers": {
        "initialize": {"result": INIT},
        "session/list": [
            {
                "result": {
                    "sessions": [
                        {"sessionId": "a", "cwd": "/a", "title": "Older", "updatedAt": "2026-01-01T00:00:00Z"},
                        {"sessionId": "b", "title": "no cwd: skipped"},
                        {"sessionId": "c", "cwd": "/c", "title": 5},
                        "not a row",
                    ],
                    "nextCursor": "page-2",
                }
            },
            {"result": {"sessions": [{"sessionId": "d", "cwd": "/d", "updatedAt": "2026-02-01T00:00:00Z"}]}},
        ],
        "session/new": {
            "result": {
                "sessionId": "s-1",
                "modes": {"currentModeId": "ask", "availableModes": [{"id": "ask", "name": "Ask"}]},
                "configOptions": [
                    {
                        "id": "model",
                        "name": "Model",
                        "type": "select",
                        "category": "model",
                        "currentValue": "m1",
                        "options": [
                            {"group": "fast", "name": "Fast", "options": [{"value": "m1", "name": "M1"}, {"bad": 1}]},
                            {"group": "deep", "name": "Deep", "options": [{"value": "m2", "name": "M2"}]},
                        ],
                    },
                    {"id": "broken", "name": "No current value", "type": "select", "category": "model", "options": []},
                    {
                        "id": "effort",
                        "name": "Effort",
                        "type": "select",
                        "currentValue": "lo",
                        "options": [{"value": "lo", "name": "Lo"}],
                    },
                ],
            }
        },
        "session/delete": {"result": {}},
    },
    "after_new": [
        {
            "method": "session/update",
            "params": {"sessionId": "another", "update": {**COMMANDS, "availableCommands": []}},
        },
        {"id": 99, "method": "x/ask_the_client", "params": {}},
        {"method": "x/some_notification", "params": {}},
        {"method": "session/update", "params": {"sessionId": "SID", "update": COMMANDS}},
    ],
}


BAD_COMMANDS: dict[str, Any] = {
    **COMMANDS,
    "availableCommands": [*COMMANDS["availableCommands"], {"description": "no name"}],
}
#: A model option whose choices mix plain ones and a group: neither shape, so the library skips it.
MIXED = {
    "id": "model",
    "name": "Model",
    "type": "select",
    "category": "model",
    "currentValue": "m1",
    "options": [{"value": "m1", "name": "M1"}, {"group": "g", "name": "G", "options": []}],
}


def _with(answers: dict[str, Any], after_new: list[Any] | None = None) -> dict[str, Any]:
    return {
        "answers": {**FULL["answers"], **answers},
        "after_new": FULL["after_new"] if after_new is None else after_new,
    }


async def test_the_demo_agent_is_learned_the_same_without_the_library(home: Path) -> None:
    learned, _ = await child(demo_backend(home / "demo"))
    assert learned == await in_process(demo_backend(home / "demo"))
    assert learned["models"] and learned["commands"] and learned["configOptions"]  # it had something to learn


async def test_an_agent_that_neither_lists_nor_deletes_is_learned_the_same() -> None:
    learned, _ = await child(raw_backend())
    assert learned == await in_process(raw_backend())
    assert learned["conversations"] == [] and learned["models"] == []


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(FULL, id="lists-pages-deletes-announces"),
        pytest.param(
            _with(
                {
                    "initialize": {
                        "result": {"protocolVersion": 1, "agentCapabilities": {"sessionCapabilities": {"list": {}}}}
                    }
                }
            ),
            id="lists-only",
        ),
        pytest.param(
            _with({"initialize": {"result": {"protocolVersion": 1, "agentCapabilities": "x"}}}),
            id="capabilities-not-an-object",
        ),
        pytest.param(_with({"session/list": {"result": {"sessions": "none"}}}), id="listing-malformed"),
        pytest.param(
            _with(
                {"session/list": {"error": {"code": -32603, "message": "Internal error", "data": {"details": "disk"}}}}
            ),
            id="listing-refused",
        ),
        pytest.param(_with({"session/new": {"result": {"sessionId": 7}}}), id="session-id-not-a-string"),
        pytest.param(_with({"session/list": {"result": 5}}), id="listing-not-an-object"),
        pytest.param(_with({"session/new": {"result": ["s"]}}), id="session-new-not-an-object"),
        pytest.param(
            _with({"session/new": {"result": {"sessionId": "s", "modes": "x", "configOptions": [MIXED, 3]}}}),
            id="mixed-choices-and-bad-modes",
        ),
        pytest.param(
            _with({"session/new": {"result": {"sessionId": "s", "configOptions": {}}}}), id="config-options-not-a-list"
        ),
        pytest.param(
            _with({"session/new": {"error": {"code": -32000, "message": "Auth required"}}}), id="session-new-refused"
        ),
        pytest.param(_with({"session/delete": "exit"}), id="exits-at-delete"),
        pytest.param(_with({}, after_new=[]), id="announces-nothing"),
        pytest.param(
            _with({}, after_new=[{"method": "session/update", "params": {"sessionId": "SID", "update": BAD_COMMANDS}}]),
            id="announces-a-malformed-command",
        ),
        pytest.param(_with({"initialize": {"result": {"protocolVersion": 2}}}), id="another-protocol-version"),
        pytest.param(_with({"initialize": {"result": {**INIT, "protocolVersion": "1"}}}), id="version-as-a-string"),
        pytest.param(_with({"initialize": {"result": {**INIT, "protocolVersion": 1.5}}}), id="version-not-whole"),
        pytest.param(_with({"initialize": {"result": {**INIT, "protocolVersion": None}}}), id="version-missing"),
    ],
)
async def test_a_scripted_agent_is_learned_the_same_without_the_library(script: dict[str, Any]) -> None:
    learned, _ = await child(scripted(script))
    assert learned == await in_process(scripted(script))


async def test_the_full_script_teaches_what_the_agent_said() -> None:
    """The differential above compares like with like; this says what that is."""
    learned, stderr = await child(scripted(FULL))
    assert learned["models"] == [
        {"id": "m1", "provider": "scripted", "name": "M1"},
        {"id": "m2", "provider": "scripted", "name": "M2"},
    ]
    assert learned["commands"] == [
        {"name": "plan", "description": "Plan first", "input": {"hint": "what to plan"}},
        {"name": "bare", "description": "No input"},
    ]
    assert [c["backend_id"] for c in learned["conversations"]] == ["d", "a", "c"]
    assert learned["modes"]["currentModeId"] == "ask"
    assert "x/ask_the_client" in stderr  # asked of a probe that serves nothing, answered "method not found"
    assert "boot probe failed" not in stderr


@pytest.mark.parametrize(
    ("backend", "said"),
    [
        pytest.param(
            scripted({"answers": {"initialize": {"result": 5}}}), "the result is not an object", id="non-object"
        ),
        pytest.param(
            scripted(_with({"session/new": {"result": {"sessionId": 7}}})), "sessionId is not a string", id="session-id"
        ),
        pytest.param(scripted({"answers": {"initialize": "exit"}}), "exited with status 4", id="exits"),
        pytest.param(AcpBackend("gone", "/nonexistent/agent"), "cannot start the gone agent", id="missing"),
        pytest.param(
            scripted({"answers": {"initialize": "garbage"}}, call_timeout=3),
            "did not answer in time",
            id="garbage-then-silence",
        ),
    ],
)
async def test_a_failing_agent_is_a_failed_probe_said_by_name(backend: AcpBackend, said: str) -> None:
    learned, stderr = await child(backend)
    assert "the boot probe failed" in stderr and said in stderr, stderr
    assert learned["models"] == [] and learned["commands"] == [] and learned["modes"] is None
    assert learned == await in_process(backend)


async def test_the_probe_process_loads_neither_the_acp_library_nor_pydantic(home: Path) -> None:
    learned, stderr = await child(demo_backend(home / "demo"), "-X", "importtime")
    assert learned["commands"]  # the probe did its work
    imported = {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}
    assert "ahpd.backends.acp.rpc" in imported
    assert not {m for m in imported if m.split(".")[0] in ("acp", "pydantic", "pydantic_core")}


def test_the_probe_says_what_a_conversation_says() -> None:
    """The constants the probe keeps without importing the library's side."""
    assert rpc.PROTOCOL_VERSION == LIBRARY_PROTOCOL_VERSION
    assert probe.CLIENT_CAPABILITIES == session._CLIENT_CAPABILITIES
    assert probe.PROBE_COMMANDS_WAIT == session.PROBE_COMMANDS_WAIT
    assert probe.MAX_LIST_PAGES == session.MAX_LIST_PAGES
