"""The client side of ACP: what an agent asks of us, answered.

The library's router calls :class:`Client`'s methods by name, each in an
asyncio task of its own (see :mod:`~ahpd.backends.acp.backend` for the split between
trio and asyncio): ``session/update`` notifications become
:class:`~ahpd.backends.port.Update` events, a permission request or an
elicitation becomes a question for the host that an asyncio future waits
on, and the file and terminal requests run in trio (``_acp_files`` in a
worker thread, ``_acp_terminals``). The host's answers arrive synchronously
from trio, on the same thread, and resolve those futures directly.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio_asyncio
from acp.exceptions import RequestError
from acp.schema import (
    ElicitationFormRequestMode,
    ElicitationFormSessionMode,
    ElicitationUrlRequestMode,
    ElicitationUrlSessionMode,
)

from ahpd.backends.acp import files as _acp_files
from ahpd.backends.acp.wire import elicitation_content, elicitation_questions, wire
from ahpd.backends.port import Event, EventSink, InputRequest, PermissionOption, PermissionRequest, Update
from ahpd.ports import threads

if TYPE_CHECKING:
    from acp.schema import PermissionOption as AcpPermissionOption
    from acp.schema import ToolCallUpdate

    from ahpd.backends.acp.terminals import Terminals

log = logging.getLogger("ahpd.backends.acp.backend")


def resolve(future: asyncio.Future[Any], value: Any) -> None:
    """Resolve an asyncio future from trio (same thread); ignore a closed loop."""
    if future.done():
        return
    try:
        future.set_result(value)
    except RuntimeError:  # the loop closed under us: nobody is waiting any more
        pass


class Client:
    """The client side of ACP: the agent's requests and notifications.

    asyncio-flavoured; the library's router calls these by name.
    """

    def __init__(
        self, *, loop: Any, events: EventSink, roots: Sequence[Path], terminals: Terminals, label: str
    ) -> None:
        self.session_id: str | None = None
        self._loop = loop
        self._events = events
        self._roots = list(roots)  # the working directory, then the folders granted beside it
        self._terminals = terminals
        self._label = label
        self._ids = itertools.count(1)
        self._permissions: dict[str, tuple[asyncio.Future[str | None], set[str]]] = {}
        self._inputs: dict[str, tuple[asyncio.Future[tuple[str, Any]], dict[str, str]]] = {}

    def _emit(self, event: Event) -> None:
        try:
            self._events(event)
        except Exception:  # noqa: BLE001 - the host's sink failing must not break the agent's stream
            log.exception("%s: the event sink failed on %r", self._label, type(event).__name__)

    def _trio(self, fn: Any, *args: Any) -> Any:
        return trio_asyncio.trio_as_aio(fn, loop=self._loop)(*args)

    def _ours(self, session_id: str, what: str) -> bool:
        if self.session_id is None or session_id == self.session_id:
            return True
        log.warning("%s: %s for unknown session %r ignored", self._label, what, session_id)
        return False

    # -- answers from the host (trio, synchronous) ------------------------------------

    def answer_permission(self, request_id: str, option_id: str | None) -> None:
        entry = self._permissions.get(request_id)
        if entry is None:
            log.debug("%s: permission %s is not pending", self._label, request_id)
            return
        future, allowed = entry
        if option_id is not None and option_id not in allowed:
            log.warning("%s: permission %s answered with unknown option %r", self._label, request_id, option_id)
            option_id = None
        resolve(future, option_id)

    def answer_input(self, request_id: str, response: str, answers: dict[str, Any] | None) -> None:
        entry = self._inputs.get(request_id)
        if entry is None:
            log.debug("%s: input %s is not pending", self._label, request_id)
            return
        action = response if response in ("accept", "decline", "cancel") else "cancel"
        resolve(entry[0], (action, answers))

    def cancel_pending(self) -> None:
        """A cancelled turn: every open question is answered ``cancelled``."""
        for permission, _ in list(self._permissions.values()):
            resolve(permission, None)
        for question, _ in list(self._inputs.values()):
            resolve(question, ("cancel", None))

    # -- session ---------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        # Synchronous up to here and in here: arrival order is kept.
        if self._ours(session_id, "session/update"):
            self._emit(Update(wire(update)))

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[AcpPermissionOption], **kwargs: Any
    ) -> dict[str, Any]:
        if not self._ours(session_id, "session/request_permission"):
            return {"outcome": {"outcome": "cancelled"}}
        request_id = f"permission-{next(self._ids)}"
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._permissions[request_id] = (future, {o.option_id for o in options})
        try:
            self._emit(
                PermissionRequest(
                    request_id=request_id,
                    tool_call=wire(tool_call),
                    options=[PermissionOption(o.option_id, o.name, o.kind) for o in options],
                )
            )
            option_id = await future
        finally:
            self._permissions.pop(request_id, None)
        if option_id is None:
            return {"outcome": {"outcome": "cancelled"}}
        return {"outcome": {"outcome": "selected", "optionId": option_id}}

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> dict[str, Any]:
        if isinstance(mode, ElicitationFormSessionMode | ElicitationFormRequestMode):
            questions, kinds = elicitation_questions(mode.requested_schema)
        elif isinstance(mode, ElicitationUrlSessionMode | ElicitationUrlRequestMode):
            message = f"{message}\n{mode.url}" if message else str(mode.url)  # a pydantic AnyUrl
            questions, kinds = [], {}
        else:
            raise RequestError.invalid_params({"details": "unsupported elicitation mode"})
        request_id = f"input-{next(self._ids)}"
        future: asyncio.Future[tuple[str, Any]] = asyncio.get_running_loop().create_future()
        self._inputs[request_id] = (future, kinds)
        try:
            self._emit(InputRequest(request_id=request_id, message=message, questions=questions))
            action, answers = await future
        finally:
            self._inputs.pop(request_id, None)
        if action == "accept":
            if kinds:
                return {"action": "accept", "content": elicitation_content(kinds, answers)}
            return {"action": "accept"}
        return {"action": action}

    async def complete_elicitation(self, elicitation_id: str, **kwargs: Any) -> None:
        log.debug("%s: elicitation %s completed", self._label, elicitation_id)

    # -- files -------------------------------------------------------------------

    async def read_text_file(
        self, path: str, session_id: str, limit: int | None = None, line: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        content = await self._trio(threads.run, "agents", _acp_files.read_text, self._roots, path, line, limit)
        return {"content": content}

    async def write_text_file(self, content: str, path: str, session_id: str, **kwargs: Any) -> dict[str, Any]:
        await self._trio(threads.run, "agents", _acp_files.write_text, self._roots, path, content)
        return {}

    # -- terminals -------------------------------------------------------------------

    async def create_terminal(
        self,
        command: str,
        session_id: str,
        args: list[str] | None = None,
        cwd: str | None = None,
        env: list[Any] | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        terminal_id = await self._trio(self._terminals.create, command, args, env, cwd, output_byte_limit)
        return {"terminalId": terminal_id}

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._terminals.output(terminal_id)

    async def wait_for_terminal_exit(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        return await self._trio(self._terminals.wait_for_exit, terminal_id)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self._terminals.kill(terminal_id)
        return {}

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> dict[str, Any]:
        self._terminals.release(terminal_id)
        return {}
