"""Helpers for the Claude backend's tests: a live conversation and a recorder."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ahpd.backends.claude.backend import ClaudeBackend, ClaudeConversation
from tests.backends.acp_agents.harness import Recorder

__all__ = ["Recorder", "conversation", "tool_updates"]


@asynccontextmanager
async def conversation(
    backend: ClaudeBackend, cwd: Path, recorder: Recorder | None = None, **kwargs: Any
) -> AsyncIterator[tuple[ClaudeConversation, Recorder]]:
    """A live conversation in a nursery of its own, cancelled on the way out."""
    recorder = recorder or Recorder()
    with warnings.catch_warnings():
        # After the SDK's message generator is left, trio reports it unclosed.
        warnings.filterwarnings("ignore", category=ResourceWarning)
        async with trio.open_nursery() as nursery:
            conv = await nursery.start(
                lambda task_status: backend.run_conversation(
                    cwd=cwd, events=recorder, task_status=task_status, **kwargs
                )
            )
            recorder.conversation = conv  # type: ignore[assignment]
            yield conv, recorder
            nursery.cancel_scope.cancel()


def tool_updates(recorder: Recorder, call_id: str) -> list[dict[str, Any]]:
    return [u for u in recorder.updates() if u.get("toolCallId") == call_id]
