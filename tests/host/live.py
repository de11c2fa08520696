"""A daemon in the test's own trio run: a Host with real agent subprocesses,
served over a real WebSocket on 127.0.0.1.

Unlike ``tests/daemon/helpers.running_daemon`` (a separate process), its
functions can be patched to fail at chosen points, and its host task can be
watched: ``LiveHost.host_failure`` is whatever ended it, and a host task
that fails also fails the test, since the test body runs inside its nursery.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import trio

from ahpd.host.assembly import Host
from ahpd.host.sessions.store import MemorySessionStore
from ahpd.transport.websocket import Limits, Listening, serve_websocket
from tests.backends.acp_agents.harness import demo_backend
from tests.daemon.helpers import Rpc, action_of, create, dispatch, rpc, start_turn, until


class LiveHost:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.url = ""
        self.host_ended = False
        self.host_failure: BaseException | None = None

    async def run_host(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self.host.run(task_status=task_status)
        except BaseException as exc:
            self.host_failure = exc
            raise
        finally:
            self.host_ended = True


async def serve(nursery: trio.Nursery, host: Host, limits: Limits | None = None) -> Listening:
    """``host`` served over a real WebSocket on 127.0.0.1 (a free port), as the
    daemon serves it: with its queue limit, and ``limits`` if given."""
    extra = {"limits": limits} if limits is not None else {}
    return await nursery.start(
        partial(
            serve_websocket,
            host.serve_connection,
            host="127.0.0.1",
            port=0,
            token=None,
            queue_limit=host.queue_limit,
            **extra,
        )
    )


@asynccontextmanager
async def live_host(
    tmp_path: Path, backends: dict[str, Any] | None = None, terminals: Any = None, **config: Any
) -> AsyncIterator[LiveHost]:
    backends = backends if backends is not None else {"demo": demo_backend(tmp_path / "demo-home")}
    host = Host(backends=backends, terminals=terminals, config_values=config, session_store=MemorySessionStore())
    live = LiveHost(host)
    async with trio.open_nursery() as nursery:
        await nursery.start(live.run_host)
        live.url = (await serve(nursery, host)).url
        yield live
        nursery.cancel_scope.cancel()


def ending_of(chat: str):
    """A predicate for the action that ends a turn in ``chat``."""

    def check(note: dict) -> bool:
        action = action_of(note) or {}
        return (
            action.get("type") in ("chat/turnComplete", "chat/error", "chat/turnCancelled")
            and note["params"]["channel"] == chat
        )

    return check


async def run_turn(client: Rpc, chat: str, text: str, seq: int) -> dict:
    """Start a turn and return the action that ended it."""
    await dispatch(client, chat, start_turn(text), seq)
    notes = await until(client, ending_of(chat))
    return action_of(notes[-1])


async def assert_alive(live: LiveHost, client: Rpc, other_chat: str, seq: int) -> None:
    """The host lives: its task runs, another session's turn completes, and
    a fresh client is served."""
    assert not live.host_ended, live.host_failure
    ending = await run_turn(client, other_chat, "are you still there", seq)
    assert ending["type"] == "chat/turnComplete", ending
    async with rpc(live.url) as fresh:
        await fresh.initialize("fresh")
        listed = (await fresh.call("listSessions", {}))["result"]["items"]
        assert listed
    assert not live.host_ended, live.host_failure


__all__ = ["LiveHost", "assert_alive", "create", "ending_of", "live_host", "run_turn"]
