"""A small ACP client that drives the demo agent as a real subprocess.

The ``acp`` library is asyncio, and this repository runs pytest-trio in trio
mode, so tests here are plain functions calling :func:`run`.

The demo agent writes ACP without the library (``ahpd.demo_agent.rpc``);
:func:`demo_agent` checks on exit that every message it wrote is exactly what
the library would write for it: read through the library's model and written
back as the library writes (field names, field order, fields left out), it is
unchanged.

:class:`DemoClient` answers the agent's requests the way an editor would:
files are read and written for real (under the test's folder), terminals are
asyncio subprocesses, permission answers and elicitation answers are chosen
by the test. Every session update and every request is recorded *before* the
first ``await`` of its handler: the library runs each incoming message in its
own task, and recording later could reorder them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from acp import PROTOCOL_VERSION, RequestError
from acp.client.connection import ClientSideConnection
from acp.connection import StreamEvent
from acp.schema import (
    AcceptElicitationResponse,
    AllowedOutcome,
    ClientCapabilities,
    CloseSessionResponse,
    CreateFormSessionElicitationRequest,
    CreateTerminalRequest,
    CreateTerminalResponse,
    DeleteSessionResponse,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
    KillTerminalRequest,
    KillTerminalResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    ReadTextFileRequest,
    ReadTextFileResponse,
    ReleaseTerminalRequest,
    ReleaseTerminalResponse,
    RequestPermissionRequest,
    RequestPermissionResponse,
    ResumeSessionResponse,
    SessionNotification,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TerminalExitStatus,
    TerminalOutputRequest,
    TerminalOutputResponse,
    TextContentBlock,
    WaitForTerminalExitRequest,
    WaitForTerminalExitResponse,
    WriteTextFileRequest,
    WriteTextFileResponse,
)
from acp.stdio import spawn_agent_process
from acp.utils import normalize_result, serialize_params
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
#: Generous: a loaded two-core machine must not make these tests flaky.
TIMEOUT = 20.0

T = TypeVar("T")

#: What the agent sends of its own (notifications, requests): the library writes them with ``serialize_params``.
SENT_MODELS: dict[str, type[BaseModel]] = {
    "session/update": SessionNotification,
    "session/request_permission": RequestPermissionRequest,
    "fs/read_text_file": ReadTextFileRequest,
    "fs/write_text_file": WriteTextFileRequest,
    "terminal/create": CreateTerminalRequest,
    "terminal/output": TerminalOutputRequest,
    "terminal/wait_for_exit": WaitForTerminalExitRequest,
    "terminal/kill": KillTerminalRequest,
    "terminal/release": ReleaseTerminalRequest,
    "elicitation/create": CreateFormSessionElicitationRequest,
}
#: The agent's answers, by the method asked, and whether the library's router passed them through
#: ``normalize_result`` (defaults left out) or not (only unset and ``None`` fields left out).
ANSWER_MODELS: dict[str, tuple[type[BaseModel], bool]] = {
    "initialize": (InitializeResponse, False),
    "session/new": (NewSessionResponse, False),
    "session/list": (ListSessionsResponse, False),
    "session/prompt": (PromptResponse, False),
    "session/resume": (ResumeSessionResponse, False),
    "session/load": (LoadSessionResponse, True),
    "session/close": (CloseSessionResponse, True),
    "session/delete": (DeleteSessionResponse, True),
    "session/set_mode": (SetSessionModeResponse, True),
    "session/set_config_option": (SetSessionConfigOptionResponse, True),
}


def as_the_library_writes(message: dict[str, Any], asked: dict[Any, str]) -> dict[str, Any]:
    """``message`` (from the agent) read through the library's model and written back as the library would.

    ``asked`` maps the ids of the client's requests to their methods.
    """
    if "method" in message:
        model = SENT_MODELS[message["method"]]
        return {**message, "params": serialize_params(model.model_validate(message["params"]))}
    if "error" in message:
        error = message["error"]
        return {
            **message,
            "error": {"code": int(error["code"]), "message": str(error["message"]), "data": error["data"]},
        }
    model, normalized = ANSWER_MODELS[asked[message["id"]]]
    answer = model.model_validate(message["result"])
    if normalized:
        return {**message, "result": normalize_result(answer)}
    return {**message, "result": answer.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)}


def assert_library_form(wire: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    asked = {m["id"]: m["method"] for m in sent if "method" in m and "id" in m}
    for message in wire:
        assert json.dumps(message) == json.dumps(as_the_library_writes(message, asked)), message


def run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
    """Run an asyncio test body, with an overall limit."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


def text(*parts: str) -> list[TextContentBlock]:
    return [TextContentBlock(type="text", text=part) for part in parts]


@dataclass
class _Terminal:
    process: asyncio.subprocess.Process
    reader: asyncio.Task[None]
    output: bytearray = field(default_factory=bytearray)
    released: bool = False


class DemoClient:
    """The client side of the conversation, with everything it saw in order."""

    def __init__(self, root: Path, *, permission: str = "allow-once", answer: str = "yes") -> None:
        self.root = root
        #: The option id to pick when asked for permission, or ``"cancelled"``.
        self.permission = permission
        #: If set, permission requests wait for it before answering.
        self.permission_gate: asyncio.Event | None = None
        #: What to answer to an elicitation.
        self.answer = answer
        #: ``("update", session_id, update)`` and ``("request", method, params)``, in arrival order.
        self.events: list[tuple[str, Any, Any]] = []
        self.terminals: dict[str, _Terminal] = {}

    # -- what was seen ------------------------------------------------------------------

    def updates(self, session_id: str | None = None, kind: str | None = None) -> list[Any]:
        return [
            update
            for tag, sid, update in self.events
            if tag == "update"
            and (session_id is None or sid == session_id)
            and (kind is None or update.session_update == kind)
        ]

    def requests(self, method: str | None = None) -> list[Any]:
        return [params for tag, name, params in self.events if tag == "request" and (method is None or name == method)]

    def reply(self, session_id: str) -> str:
        """All agent message text seen for the session, joined."""
        return "".join(u.content.text for u in self.updates(session_id, "agent_message_chunk"))

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = TIMEOUT) -> Any:
        """Poll until ``predicate()`` is true (and return it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not (value := predicate()):
            if loop.time() > deadline:
                raise AssertionError("timed out waiting for the agent")
            await asyncio.sleep(0.01)
        return value

    # -- the ACP client methods -------------------------------------------------------------

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.events.append(("update", session_id, update))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.events.append(("request", "request_permission", {"tool_call": tool_call, "options": options}))
        if self.permission_gate is not None:
            await self.permission_gate.wait()
        if self.permission == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.permission))

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> AcceptElicitationResponse:
        self.events.append(("request", "create_elicitation", {"message": message, "mode": mode}))
        return AcceptElicitationResponse(action="accept", content={"answer": self.answer})

    async def read_text_file(
        self, session_id: str, path: str, line: int | None = None, limit: int | None = None, **kwargs: Any
    ) -> ReadTextFileResponse:
        self.events.append(("request", "read_text_file", {"path": path}))
        file = self._inside(path)
        if not file.is_file():
            raise RequestError.resource_not_found(path)
        return ReadTextFileResponse(content=file.read_text(encoding="utf-8"))

    async def write_text_file(self, session_id: str, path: str, content: str, **kwargs: Any) -> WriteTextFileResponse:
        self.events.append(("request", "write_text_file", {"path": path, "content": content}))
        self._inside(path).write_text(content, encoding="utf-8")
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        params = {"command": command, "args": args, "cwd": cwd, "output_byte_limit": output_byte_limit}
        self.events.append(("request", "create_terminal", params))
        process = await asyncio.create_subprocess_exec(
            command,
            *(args or []),
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        terminal_id = f"term-{len(self.terminals) + 1}"

        async def pump() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(4096):
                self.terminals[terminal_id].output.extend(chunk)

        self.terminals[terminal_id] = _Terminal(process, asyncio.get_running_loop().create_task(pump()))
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self.events.append(("request", "wait_for_terminal_exit", {"terminal_id": terminal_id}))
        terminal = self.terminals[terminal_id]
        code = await terminal.process.wait()
        await terminal.reader
        if code < 0:
            return WaitForTerminalExitResponse(exit_code=None, signal=str(-code))
        return WaitForTerminalExitResponse(exit_code=code)

    async def terminal_output(self, session_id: str, terminal_id: str, **kwargs: Any) -> TerminalOutputResponse:
        self.events.append(("request", "terminal_output", {"terminal_id": terminal_id}))
        terminal = self.terminals[terminal_id]
        code = terminal.process.returncode
        status = None if code is None else TerminalExitStatus(exit_code=code)
        return TerminalOutputResponse(output=terminal.output.decode(), truncated=False, exit_status=status)

    async def kill_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> KillTerminalResponse:
        self.events.append(("request", "kill_terminal", {"terminal_id": terminal_id}))
        with contextlib.suppress(ProcessLookupError):
            self.terminals[terminal_id].process.kill()
        return KillTerminalResponse()

    async def release_terminal(self, session_id: str, terminal_id: str, **kwargs: Any) -> ReleaseTerminalResponse:
        self.events.append(("request", "release_terminal", {"terminal_id": terminal_id}))
        terminal = self.terminals[terminal_id]
        with contextlib.suppress(ProcessLookupError):
            terminal.process.kill()
        terminal.released = True
        return ReleaseTerminalResponse()

    def _inside(self, path: str) -> Path:
        file = Path(path)
        assert file.is_absolute(), f"the agent sent a relative path: {path}"
        assert file.resolve().is_relative_to(self.root.resolve()), f"the agent left the test folder: {path}"
        return file


@dataclass
class Agent:
    """A running demo agent: the connection, the handshake's answer, the raw wire."""

    conn: ClientSideConnection
    process: asyncio.subprocess.Process
    init: InitializeResponse
    #: Every JSON-RPC message received from the agent, as sent.
    wire: list[dict[str, Any]]

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """A raw request, for methods the library's client does not offer (``session/delete``)."""
        return await asyncio.wait_for(self.conn._conn.send_request(method, params), TIMEOUT)


@contextlib.asynccontextmanager
async def demo_agent(
    home: Path,
    client: DemoClient,
    *,
    fs: bool = True,
    terminal: bool = True,
    elicitation: bool = False,
    args: tuple[str, ...] = (),
) -> AsyncIterator[Agent]:
    """Start ``python -m ahpd.demo_agent --home HOME``, initialize it, and stop it on exit.

    On exit the agent's stdin is closed; it must then end by itself with
    status 0, having written nothing to stderr (it logs warnings only).
    """
    wire: list[dict[str, Any]] = []
    sent: list[dict[str, Any]] = []

    def observe(event: StreamEvent) -> None:
        (wire if event.direction.value == "incoming" else sent).append(event.message)

    stderr_path = home.parent / f"{home.name}-stderr.log"
    with open(stderr_path, "ab") as stderr:  # noqa: ASYNC230 - the child's log file, opened before it starts
        async with spawn_agent_process(
            client,
            sys.executable,
            "-m",
            "ahpd.demo_agent",
            "--home",
            str(home),
            *args,
            env={"PYTHONPATH": str(ROOT)},
            cwd=ROOT,
            transport_kwargs={"stderr": stderr.fileno(), "shutdown_timeout": TIMEOUT},
            observers=[observe],
            use_unstable_protocol=True,
        ) as (conn, process):
            capabilities = ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs),
                terminal=terminal,
                elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()) if elicitation else None,
            )
            init = await asyncio.wait_for(
                conn.initialize(
                    protocol_version=PROTOCOL_VERSION,
                    client_capabilities=capabilities,
                    client_info=Implementation(name="ahpd-tests", version="0"),
                ),
                TIMEOUT,
            )
            yield Agent(conn, process, init, wire)
        assert process.returncode == 0, f"the agent exited with {process.returncode}"
    for terminal_ in client.terminals.values():
        terminal_.reader.cancel()
    log = stderr_path.read_text()
    assert log == "", f"the agent wrote to stderr:\n{log}"
    assert_library_form(wire, sent)
