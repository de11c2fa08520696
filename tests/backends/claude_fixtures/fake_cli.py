"""A fake Claude Code CLI behind the SDK's ``Transport``: scripted turns, in memory.

``ClaudeSDKClient(transport=FakeCLI(...))`` talks to this instead of a
process. It answers ``initialize`` (commands and models), plays one script
per user message, asks ``can_use_tool`` when a script says :class:`Ask`,
answers ``interrupt`` with the result the real CLI gives, and can die
mid-turn. Everything happens in the one generator the SDK reads, so the
order is the script's order.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

import attrs
import trio
from claude_agent_sdk import Transport
from claude_agent_sdk._errors import ProcessError

SESSION = "00000000-0000-4000-8000-000000000001"
INIT = {
    "commands": [
        {"name": "compact", "description": "Free up context", "argumentHint": "<instructions>"},
        {"name": "context", "description": "Show current context usage", "argumentHint": ""},
    ],
    "models": [
        {
            "value": "default",
            "displayName": "Default (recommended)",
            "supportsEffort": True,
            "supportedEffortLevels": ["low", "medium", "high"],
            "resolvedModel": "claude-opus-5-5",
        },
        {"value": "haiku", "displayName": "Haiku", "supportsEffort": False},
    ],
    "agents": [{"name": "Explore", "description": "Search agent"}],
}


@attrs.frozen
class Ask:
    """Ask ``can_use_tool`` and wait for the answer."""

    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str


@attrs.frozen
class Hold:
    """Wait here until the SDK sends ``interrupt``."""


@attrs.frozen
class Die:
    """The process exits with this status and stderr."""

    exit_code: int = 1
    stderr: str = "the fake CLI crashed"


def assistant(*blocks: dict[str, Any], model: str = "claude-sonnet-5-5", message_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "assistant",
        "session_id": SESSION,
        "parent_tool_use_id": None,
        "message": {"id": message_id, "model": model, "role": "assistant", "content": list(blocks)},
    }


def tool_result(call_id: str, content: str, *, is_error: bool = False) -> dict[str, Any]:
    return {
        "type": "user",
        "session_id": SESSION,
        "parent_tool_use_id": None,
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}],
        },
    }


def result(
    *,
    is_error: bool = False,
    subtype: str = "success",
    text: str | None = None,
    stop_reason: str | None = "end_turn",
    cost: float = 0.0125,
) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": subtype,
        "duration_ms": 10,
        "duration_api_ms": 5,
        "is_error": is_error,
        "num_turns": 1,
        "session_id": SESSION,
        "stop_reason": stop_reason,
        "total_cost_usd": cost,
        "usage": {
            "input_tokens": 100,
            "output_tokens": 20,
            "cache_read_input_tokens": 50,
            "cache_creation_input_tokens": 10,
            "output_tokens_details": {"thinking_tokens": 5},
        },
        "modelUsage": {"claude-sonnet-5-5": {"inputTokens": 100, "outputTokens": 20, "contextWindow": 200000}},
        "result": text,
    }


class FakeCLI(Transport):
    def __init__(self, turns: Iterable[list[Any]] = (), init: dict[str, Any] | None = None) -> None:
        self.turns = deque(turns)
        self.init = INIT if init is None else init
        self.written: list[dict[str, Any]] = []
        #: The answers ``can_use_tool`` got, in order (the control response bodies).
        self.decisions: list[dict[str, Any]] = []
        self.closed = False
        self._send, self._inbox = trio.open_memory_channel[dict[str, Any]](math.inf)
        self._ids = 0

    async def connect(self) -> None:
        pass

    def is_ready(self) -> bool:
        return not self.closed

    async def end_input(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True
        self._send.close()

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            if line.strip():
                message = json.loads(line)
                self.written.append(message)
                self._send.send_nowait(message)

    def users(self) -> list[str]:
        return [m["message"]["content"] for m in self.written if m.get("type") == "user"]

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._run()

    @staticmethod
    def _ok(request: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request["request_id"], "response": response},
        }

    async def _run(self) -> AsyncIterator[dict[str, Any]]:
        async for message in self._inbox:
            kind = message.get("type")
            if kind == "control_request":
                subtype = message["request"]["subtype"]
                yield self._ok(message, self.init if subtype == "initialize" else {})
            elif kind == "user":
                script = self.turns.popleft() if self.turns else [result(text="(unscripted)")]
                async for out in self._play(script):
                    yield out

    async def _play(self, script: list[Any]) -> AsyncIterator[dict[str, Any]]:
        for step in script:
            if isinstance(step, Die):
                raise ProcessError(
                    f"Command failed with exit code {step.exit_code}", exit_code=step.exit_code, stderr=step.stderr
                )
            if isinstance(step, Ask):
                self._ids += 1
                request_id = f"fake_{self._ids}"
                yield {
                    "type": "control_request",
                    "request_id": request_id,
                    "request": {
                        "subtype": "can_use_tool",
                        "tool_name": step.tool_name,
                        "input": step.tool_input,
                        "tool_use_id": step.tool_use_id,
                        "permission_suggestions": [],
                    },
                }
                interrupted = False
                async for message in self._inbox:
                    response = message.get("response") or {}
                    if message.get("type") == "control_response" and response.get("request_id") == request_id:
                        self.decisions.append(response.get("response") or {"error": response.get("error")})
                        break
                    if message.get("type") == "control_request":
                        yield self._ok(message, {})
                        interrupted |= message["request"]["subtype"] == "interrupt"
                if interrupted:
                    yield result(is_error=True, subtype="error_during_execution", stop_reason=None)
                    return
                continue
            if isinstance(step, Hold):
                async for message in self._inbox:
                    if message.get("type") == "control_request":
                        yield self._ok(message, {})
                        if message["request"]["subtype"] == "interrupt":
                            yield tool_result_text("[Request interrupted by user]")
                            yield result(is_error=True, subtype="error_during_execution", stop_reason=None)
                            return
                    elif message.get("type") == "user":
                        self.steered = message["message"]["content"]
                        break
                continue
            yield step


def tool_result_text(text: str) -> dict[str, Any]:
    return {
        "type": "user",
        "session_id": SESSION,
        "parent_tool_use_id": None,
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
