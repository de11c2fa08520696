"""What the demo agent loads: not the ``agent-client-protocol`` library, nor pydantic.

Importing ``acp`` builds several hundred pydantic models (about 0.45 s of CPU,
nine tenths of what the agent cost to start with it), and the demo agent
starts once per session: it speaks ACP with a JSON-RPC layer of its own
(``ahpd.demo_agent.rpc``). This runs a real agent through a handshake, a
session and a turn that uses the client's files and a permission request,
and looks at what the process had loaded when it ended.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

#: Loaded by neither the agent's start nor an ordinary turn (``mcp`` prompts load the mcp library, and so pydantic).
NOT_LOADED = ("acp", "pydantic", "pydantic_core", "mcp")

PROBE = """
import atexit, json, runpy, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stderr__))
sys.argv = ["ahpd-demo-agent", "--home", sys.argv[1]]
runpy.run_module("ahpd.demo_agent", run_name="__main__")
"""


def _send(agent: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert agent.stdin is not None
    agent.stdin.write(json.dumps(message).encode() + b"\n")
    agent.stdin.flush()


def _answer_of(agent: subprocess.Popen[bytes], request_id: int) -> dict[str, object]:
    """Read until the answer to ``request_id``, allowing what the agent asks on the way."""
    assert agent.stdout is not None
    while line := agent.stdout.readline():
        message = json.loads(line)
        if message.get("method") == "session/request_permission":
            outcome = {"outcome": "selected", "optionId": "allow-once"}
            _send(agent, {"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": outcome}})
        elif message.get("id") == request_id and "method" not in message:
            return dict(message)
    raise AssertionError(f"the agent ended before answering request {request_id}")


def test_a_running_demo_agent_never_loads_the_acp_library(tmp_path: Path) -> None:
    command = [sys.executable, "-c", PROBE, str(tmp_path / "home")]
    with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as agent:
        try:
            _send(agent, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1}})
            assert _answer_of(agent, 0)["result"]["agentInfo"]["name"] == "ahpd-demo-agent"  # type: ignore[index]
            params = {"cwd": str(tmp_path), "mcpServers": []}
            _send(agent, {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": params})
            session_id = _answer_of(agent, 1)["result"]["sessionId"]  # type: ignore[index]
            prompt = [{"type": "text", "text": "plan, then use the tool"}]
            _send(
                agent,
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "session/prompt",
                    "params": {"sessionId": session_id, "prompt": prompt},
                },
            )
            assert _answer_of(agent, 2)["result"]["stopReason"] == "end_turn"  # type: ignore[index]
        finally:
            assert agent.stdin is not None and agent.stderr is not None
            agent.stdin.close()  # the agent ends when its input does
            agent.wait(timeout=120)
            err = agent.stderr.read()
    assert agent.returncode == 0
    modules = json.loads(err.decode().splitlines()[-1])
    assert "ahpd.demo_agent.agent" in modules
    assert [m for m in modules if m.split(".")[0] in NOT_LOADED] == []
