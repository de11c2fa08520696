"""The window's dev container relay (``vscode/devContainers/*``), outside the protocol.

VS Code's agents window can run a session inside the dev container a folder
defines: it asks its host to bring the container up and to carry the frames
of a second host running inside it. This module is that relay, in the
window's own names and shapes, served when the ``devcontainer`` CLI and a
container engine are on this machine (``ahpd.ports.devcontainers``):

* ``isDockerAvailable`` answers whether both are; ``initialize`` says so
  under ``_meta['vscode.devContainers']``, the key the window checks before
  it offers the flow. Without them every other method is refused, naming
  what is missing.
* ``connect {connectionId, workspaceFolder, name, resume?}`` asks the
  client whether it trusts the folder (``vscode/requestWorkspaceTrust``,
  as the reference host does: ``devcontainer up`` runs the folder's own
  commands), runs ``devcontainer up`` for the folder - each line it prints goes to the
  client as ``output``, which is what a person watches while an image
  builds - checks the container has ``ahpd``, and starts ``ahpd stdio`` in
  it through ``devcontainer exec``. It answers ``{connectionId, address:
  devcontainer:<containerId>, name, remoteWorkspaceFolder,
  hostWorkspaceFolder}``.
* ``relaySend {connectionId, data}`` writes one frame to the host inside;
  each line that host writes comes back as ``relayMessage``, and what it
  logs as ``output``. When the host inside ends and this client did not end
  it, the client is told ``relayClose`` and then ``closeConnection``.
* ``disconnect {connectionId}`` ends the relay (the container stays, for the
  CLI to reuse); ``stop`` and ``remove {workspaceFolder}`` stop or remove the
  folder's container, ending the relays into it, and answer true (false is
  never said: this host has no other window's sessions to spare). A folder
  stopped so is not started again by a ``connect`` without ``resume: true``.

``connectionId`` is the client's own name and is kept per connection: no
other client can reach a relay by spelling it, and a relay runs in its
connection's nursery, so a client that goes ends the relays it opened.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from ahpd.host.kernel import forward, jsonrpc
from ahpd.host.kernel.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RpcError, string_param
from ahpd.host.kernel.supervise import run_supervised
from ahpd.ports import devcontainers, threads

if TYPE_CHECKING:
    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")

PREFIX = "vscode/devContainers/"
#: AHP's NotFound: no relay by that name on this connection.
NOT_FOUND = -32008
#: What runs inside the container: a host speaking AHP over its stdin and stdout.
INNER_HOST = ("ahpd", "stdio")
#: Bytes of frames that may wait for the host inside to read them.
QUEUE_BYTES = 64 * 2**20
#: AHP's PermissionDenied: the client does not trust the folder.
PERMISSION_DENIED = -32009
#: The question the reference host asks its window before a container starts.
TRUST = "vscode/requestWorkspaceTrust"
#: How long a person has to answer it (the window shows a dialog).
TRUST_WAIT = 600.0

#: The relays of each connection, by the client's own connectionId.
_relays: dict[Peer, dict[str, Relay]] = {}
#: The container ``up`` made of each folder, by this process.
_containers: dict[str, str] = {}
#: Folders whose container was stopped or removed here: ``connect`` wants ``resume``.
_stopped: set[str] = set()


def _notify(peer: Peer, method: str, params: dict[str, Any]) -> None:
    peer.send(jsonrpc.notification_frame(PREFIX + method, params))


def _tools(method: str) -> devcontainers.Tools:
    found = devcontainers.tools()
    missing = found.missing()
    if missing is not None:
        raise RpcError(METHOD_NOT_FOUND, f"{PREFIX}{method} is not served on this machine: {missing}")
    return found


def _connection_id(params: Any) -> str:
    value = string_param(params, "connectionId")
    assert value is not None
    if len(value) > 256 or "\0" in value or not value.strip():
        raise RpcError(
            INVALID_PARAMS, "connectionId must be a name of at most 256 characters", {"path": "$.connectionId"}
        )
    return value


def _folder(params: Any) -> str:
    value = string_param(params, "workspaceFolder")
    assert value is not None
    if "\0" in value or not os.path.isabs(value):
        raise RpcError(
            INVALID_PARAMS, f"workspaceFolder must be an absolute path: {value!r}", {"path": "$.workspaceFolder"}
        )
    return os.path.normpath(value)


def _relay(method: str, peer: Peer, connection_id: str) -> Relay:
    """The relay ``connection_id`` names on this connection. Found, the
    programs are not looked for again: a frame relayed costs no PATH walk."""
    relay = _relays.get(peer, {}).get(connection_id)
    if relay is None:
        _tools(method)  # none can exist without them: say what is missing
        raise RpcError(
            NOT_FOUND, f"no dev container connection {connection_id!r} on this connection", {"path": "$.connectionId"}
        )
    return relay


class Relay:
    """One connection's relay into the host inside one container."""

    def __init__(self, peer: Peer, connection_id: str, folder: str) -> None:
        self.peer = peer
        self.connection_id = connection_id
        self.folder = folder
        #: Cancelled to end the relay while its container comes up, and once it runs.
        self.connecting = trio.CancelScope()
        self.scope = trio.CancelScope()
        self.ended = False
        self.how = ""
        #: The client ended it (``disconnect``): it is not told.
        self.ended_by_client = False
        self.running = False
        self._send, self._queue = trio.open_memory_channel[bytes](256)
        self._queued = 0

    def own(self) -> None:
        _relays.setdefault(self.peer, {})[self.connection_id] = self

    def disown(self) -> None:
        mine = _relays.get(self.peer)
        if mine is not None and mine.get(self.connection_id) is self:
            del mine[self.connection_id]
            if not mine:
                del _relays[self.peer]

    def end(self, *, by_client: bool) -> None:
        self.ended, self.ended_by_client = True, by_client
        self.how = "disconnected" if by_client else "ended: its container was stopped or removed"
        self.disown()
        self.connecting.cancel()
        self.scope.cancel()

    def say(self, text: str) -> None:
        _notify(self.peer, "output", {"connectionId": self.connection_id, "data": text})

    def write(self, data: str) -> None:
        """Queue one frame for the host inside, as one line (a raw newline can
        only be JSON whitespace, so it becomes a space)."""
        line = (data.replace("\r", " ").replace("\n", " ") + "\n").encode("utf-8", errors="replace")
        if self._queued + len(line) > QUEUE_BYTES:
            raise RpcError(
                INTERNAL_ERROR,
                f"the host inside {self.folder}'s container is not reading: {self._queued} bytes already "
                f"wait for it (at most {QUEUE_BYTES})",
            )
        try:
            self._send.send_nowait(line)
        except trio.WouldBlock:
            raise RpcError(INTERNAL_ERROR, f"the host inside {self.folder}'s container is not reading") from None
        except trio.ClosedResourceError:
            raise RpcError(NOT_FOUND, f"the relay {self.connection_id!r} has ended: its host inside is gone") from None
        self._queued += len(line)

    async def run(self, found: devcontainers.Tools, *, task_status: trio.TaskStatus[None]) -> None:
        """Start the host inside and carry its frames until it or the client ends."""
        try:
            with self.scope:
                if self.ended:
                    raise devcontainers.CliError(f"{self.connection_id!r} was ended before its relay started")
                process = await devcontainers.open_in(found, self.folder, INNER_HOST)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._writer, process.stdin)
                        nursery.start_soon(self._logs, process.stderr)
                        self.running = True
                        task_status.started()
                        await self._frames(process.stdout)
                        code = await process.wait()
                        log.info("%s: the host in %s's container ended (exit %s)", self.peer.name, self.folder, code)
                        self._send.close()  # nothing more reaches it
                        # What it logged on its way out is read to its end, unless a child of it holds the pipe.
                        nursery.cancel_scope.deadline = trio.current_time() + devcontainers.GRACE
                finally:
                    await devcontainers.end(process)
        finally:
            self.disown()
            if self.running and not self.ended_by_client:
                _notify(self.peer, "relayClose", {"connectionId": self.connection_id})
                _notify(self.peer, "closeConnection", {"connectionId": self.connection_id})

    async def _writer(self, stdin: Any) -> None:
        """Everything queued at a turn goes to the host inside in one write."""
        async with stdin:
            async for first in self._queue:
                batch = [first]
                while True:
                    try:
                        batch.append(self._queue.receive_nowait())
                    except trio.WouldBlock:
                        break
                data = b"".join(batch)
                self._queued -= len(data)
                try:
                    await stdin.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return  # the host inside is gone: its end is said where its output ends

    async def _frames(self, stdout: Any) -> None:
        async for line in devcontainers.lines(stdout, devcontainers.MAX_LINE):
            if len(line) >= devcontainers.MAX_LINE:  # cut: no longer a frame anyone could read
                self.say(f"a frame of more than {devcontainers.MAX_LINE} bytes from the host inside was dropped\n")
                continue
            text = line.decode("utf-8", errors="replace").strip()
            if not text:
                continue
            if text.startswith("{"):
                _notify(self.peer, "relayMessage", {"connectionId": self.connection_id, "data": text})
            else:  # the CLI talking, not the host: a person may want to read it
                self.say(text + "\n")

    async def _logs(self, stderr: Any) -> None:
        async for line in devcontainers.lines(stderr):
            self.say(line.decode("utf-8", errors="replace") + "\n")


# -- the requests ---------------------------------------------------------------------


def is_docker_available(host: Host, peer: Peer, params: Any) -> bool:
    if params:
        raise RpcError(INVALID_PARAMS, f"{PREFIX}isDockerAvailable takes no params")
    return devcontainers.tools().missing() is None


async def connect(host: Host, peer: Peer, params: Any) -> dict[str, Any]:
    found = _tools("connect")
    connection_id, folder = _connection_id(params), _folder(params)
    name = string_param(params, "name")
    resume = params.get("resume", False)
    if not isinstance(resume, bool):
        raise RpcError(INVALID_PARAMS, "resume must be true or false", {"path": "$.resume"})
    if not await threads.run("files", os.path.isdir, folder):
        raise RpcError(INVALID_PARAMS, f"{folder} is not a folder on this machine", {"path": "$.workspaceFolder"})
    if connection_id in _relays.get(peer, {}):
        raise RpcError(INVALID_PARAMS, f"connectionId {connection_id!r} is already in use on this connection")
    if folder in _stopped and not resume:
        raise RpcError(
            INVALID_PARAMS,
            f"the dev container of {folder} was stopped here; connect with resume: true to start it again",
            {"path": "$.resume"},
        )
    if peer.requests is None:
        raise RpcError(INTERNAL_ERROR, f"{PREFIX}connect needs a connection that stays open to relay on")
    forward.let_go(f"{PREFIX}connect of {folder}")  # an image may take minutes to build
    relay = Relay(peer, connection_id, folder)
    relay.own()
    try:
        with relay.connecting:
            await _trusted(peer, folder)
            made = await devcontainers.up(found, folder, relay.say)
            _containers[folder] = made.container_id
            code, said = await devcontainers.run_in(found, folder, ["/bin/sh", "-c", f"command -v {INNER_HOST[0]}"])
            if code != 0:
                raise devcontainers.CliError(
                    f"the dev container of {folder} has no {INNER_HOST[0]} on its PATH for the relay to start: "
                    f"install it in the image or in devcontainer.json's postCreateCommand"
                    + (f" ({said})" if said else "")
                )
        if relay.connecting.cancelled_caught:
            raise RpcError(NOT_FOUND, f"{connection_id!r} was {relay.how} before its container was up")
        what = f"dev container relay {connection_id!r} of {peer.name}"
        await peer.requests.start(run_supervised, what, relay.run, found)
    except devcontainers.CliError as err:
        relay.disown()
        raise RpcError(INTERNAL_ERROR, str(err), {"workspaceFolder": folder}) from None
    except BaseException:
        relay.disown()
        raise
    _stopped.discard(folder)
    log.info("%s: relay %r into %s (%s)", peer.name, connection_id, folder, made.container_id)
    return {
        "connectionId": connection_id,
        "address": f"devcontainer:{made.container_id}",
        "name": name,
        "remoteWorkspaceFolder": made.remote_workspace_folder,
        "hostWorkspaceFolder": folder,
    }


async def _trusted(peer: Peer, folder: str) -> None:
    """Ask the client whether it trusts ``folder`` before its container runs
    the folder's own commands (``initializeCommand`` runs on this machine);
    refused -32009 unless it says so. A client that serves no such question
    (-32601) has no trust of its own to ask, and the connect it sent stands."""
    try:
        answer = await peer.outgoing.request(TRUST, {"workspace": Path(folder).as_uri()}, timeout=TRUST_WAIT)
    except RpcError as err:
        if err.code == METHOD_NOT_FOUND:
            return
        raise RpcError(PERMISSION_DENIED, f"the client did not say it trusts {folder}: {err.message}") from None
    if not (isinstance(answer, dict) and answer.get("trusted") is True):
        raise RpcError(
            PERMISSION_DENIED,
            f"the client does not trust {folder}: its dev container would run the folder's own commands",
            {"workspaceFolder": folder},
        )


def disconnect(host: Host, peer: Peer, params: Any) -> None:
    _relay("disconnect", peer, _connection_id(params)).end(by_client=True)


def relay_send(host: Host, peer: Peer, params: Any) -> None:
    relay = _relay("relaySend", peer, _connection_id(params))
    data = params.get("data")
    if not isinstance(data, str):
        raise RpcError(INVALID_PARAMS, "data must be a string: one frame for the host inside", {"path": "$.data"})
    if not relay.running:
        raise RpcError(NOT_FOUND, f"{relay.connection_id!r} is still connecting: send once connect has answered")
    relay.write(data)


async def _change(method: str, operation: str, params: Any) -> bool:
    found = _tools(method)
    folder = _folder(params)
    forward.let_go(f"{PREFIX}{method} of {folder}")
    for relays in list(_relays.values()):
        for relay in list(relays.values()):
            if relay.folder == folder:
                relay.end(by_client=False)  # its owner is told: the container went from under it
    try:
        known = _containers.get(folder)
        containers = [known] if known else await devcontainers.find(found, folder)
        for container in containers:
            await devcontainers.change(found, container, operation)
    except devcontainers.CliError as err:
        raise RpcError(INTERNAL_ERROR, str(err), {"workspaceFolder": folder}) from None
    if containers:
        _stopped.add(folder)
    if operation == "rm":
        _containers.pop(folder, None)
    return True


async def stop(host: Host, peer: Peer, params: Any) -> bool:
    return await _change("stop", "stop", params)


async def remove(host: Host, peer: Peer, params: Any) -> bool:
    return await _change("remove", "rm", params)


COMMANDS = {
    PREFIX + "isDockerAvailable": is_docker_available,
    PREFIX + "connect": connect,
    PREFIX + "disconnect": disconnect,
    PREFIX + "stop": stop,
    PREFIX + "remove": remove,
    PREFIX + "relaySend": relay_send,
}


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult._meta['vscode.devContainers']``, when the relay can be served here."""
    return {"_meta": {"vscode.devContainers": True}} if devcontainers.tools().missing() is None else {}
