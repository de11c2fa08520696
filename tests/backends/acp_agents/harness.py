"""Helpers for the ACP backend's tests: agents to run and a recording sink."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ahpd.backends.acp.session import AcpConversation
from ahpd.backends.acp.backend import AcpBackend
from ahpd.backends.port import Event, InputRequest, PermissionRequest, Update

RAW_AGENT = Path(__file__).with_name("raw_agent.py")


def demo_backend(home: Path, **kwargs: Any) -> AcpBackend:
    return AcpBackend("demo", sys.executable, ["-m", "ahpd.demo_agent", "--home", str(home)], **kwargs)


def raw_backend(*flags: str, **kwargs: Any) -> AcpBackend:
    return AcpBackend("raw", sys.executable, [str(RAW_AGENT), *flags], **kwargs)


class Recorder:
    """The event sink: records every event; answers questions by policy."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.conversation: AcpConversation | None = None
        self.on_permission: Callable[[PermissionRequest], str | None] | None = None
        self.on_input: Callable[[InputRequest], tuple[str, dict[str, Any] | None]] | None = None
        self.asked = trio.Event()
        self._more = trio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self._more.set()
        if isinstance(event, PermissionRequest | InputRequest):
            self.asked.set()
        if isinstance(event, PermissionRequest) and self.on_permission and self.conversation:
            self.conversation.answer_permission(event.request_id, self.on_permission(event))
        if isinstance(event, InputRequest) and self.on_input and self.conversation:
            self.conversation.answer_input(event.request_id, *self.on_input(event))

    async def until(self, check: Callable[[], Any]) -> None:
        """Until ``check()`` holds, judged again at each event the agent sends."""
        while not check():
            self._more = trio.Event()
            await self._more.wait()

    def updates(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [
            e.update
            for e in self.events
            if isinstance(e, Update) and (kind is None or e.update.get("sessionUpdate") == kind)
        ]

    def text(self, kind: str = "agent_message_chunk") -> str:
        return "".join(u["content"].get("text", "") for u in self.updates(kind))

    def clear(self) -> None:
        self.events.clear()
        self.asked = trio.Event()


@asynccontextmanager
async def conversation(
    backend: AcpBackend, cwd: Path, recorder: Recorder | None = None, resume_id: str | None = None
) -> AsyncIterator[tuple[AcpConversation, Recorder]]:
    """A live conversation in a nursery of its own, cancelled on the way out."""
    recorder = recorder or Recorder()
    async with trio.open_nursery() as nursery:
        conv = await nursery.start(
            lambda task_status: backend.run_conversation(
                cwd=cwd, events=recorder, resume_id=resume_id, task_status=task_status
            )
        )
        recorder.conversation = conv
        yield conv, recorder
        nursery.cancel_scope.cancel()


def reaped(pid: int) -> bool:
    """True once ``pid`` is gone for good (not even a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
