"""The window's dev container relay, against a real daemon.

The Dev Container CLI and the engine are the stand-in ``fake_devcontainer``
on ``PATH``, which speaks their output shapes; what runs inside the
"container" is a real ``ahpd stdio``, so every frame relayed is answered by
a real host. The conversation is checked with ``ahpd wire-check``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import trio

from ahpd.host.window import containers
from ahpd.ports import devcontainers
from tests.waits import eventually

from .helpers import Rpc, daemon_in_process, rpc, until, wire_clean

FAKE = Path(__file__).with_name("fake_devcontainer.py")
PREFIX = "vscode/devContainers/"


def _machine(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine with the CLI and an engine (the fake's)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for role in ("devcontainer", "docker"):
        script = bin_dir / role
        script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" {role} "$@"\n')
        script.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_DEVCONTAINER_STATE": str(tmp_path / "engine"),
        # Inside, ahpd is installed (this checkout's own).
        "FAKE_DEVCONTAINER_PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }


def _project(folder: Path, image: str = "python:3.12") -> Path:
    (folder / ".devcontainer").mkdir(parents=True)
    (folder / ".devcontainer" / "devcontainer.json").write_text(json.dumps({"image": image}))
    return folder


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "engine" / "containers").glob("*.json"))]


def _gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()


async def _inner(tmp_path: Path) -> int:
    """The pid of the host running inside, once the fake engine has written it down."""
    alive: list[int] = []

    def found() -> bool:
        alive[:] = [pid for record in _records(tmp_path) for pid in record["pids"] if not _gone(pid)]
        return len(alive) == 1

    await eventually(found)
    return alive[0]


TRUST = "vscode/requestWorkspaceTrust"


async def _connect(client: Rpc, params: dict[str, Any], trusted: bool | None = True) -> dict[str, Any]:
    """``connect``'s answer; the host's trust question on the way is answered
    ``trusted`` (None: refused -32601, as a client without trust prompts does)
    and kept in ``client.asked``."""
    client.next_id += 1
    ident = client.next_id
    await client.ws.send_message(
        json.dumps({"jsonrpc": "2.0", "id": ident, "method": PREFIX + "connect", "params": params})
    )
    while True:
        frame = json.loads(await client.ws.get_message())
        if frame.get("method") == TRUST and "id" in frame:
            client.asked = [*getattr(client, "asked", []), frame["params"]]
            answer: dict[str, Any] = (
                {"result": {"trusted": trusted}}
                if trusted is not None
                else {"error": {"code": -32601, "message": f"{TRUST} is not a method this client serves"}}
            )
            await client.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": frame["id"], **answer}))
        elif frame.get("id") == ident and "method" not in frame:
            return frame
        else:
            client.notes.append(frame)


async def _trust(client: Rpc) -> None:
    """Answer the host's next trust question: trusted."""
    asked = (await until(client, lambda n: n.get("method") == TRUST))[-1]
    await client.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": asked["id"], "result": {"trusted": True}}))


def _said(client: Rpc, connection_id: str) -> str:
    return "".join(
        n["params"]["data"]
        for n in client.notes
        if n.get("method") == PREFIX + "output" and n["params"]["connectionId"] == connection_id
    )


def _closed(connection_id: str):
    def check(note: dict) -> bool:
        return note.get("method") == PREFIX + "closeConnection" and note["params"]["connectionId"] == connection_id

    return check


def _relay_notes(notes: list[dict], connection_id: str) -> list[str]:
    return [
        n["method"].removeprefix(PREFIX)
        for n in notes
        if n.get("method", "").startswith(PREFIX) and n["params"].get("connectionId") == connection_id
    ]


INNER_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "channel": "ahp-root://",
        "protocolVersions": ["1.0.0"],
        "clientId": "inside",
        "initialSubscriptions": [],
    },
}


async def test_a_relay_carries_frames_to_the_host_inside_and_says_when_it_ends(tmp_path) -> None:
    machine = _machine(tmp_path)
    project = _project(tmp_path / "project")
    capture = tmp_path / "wire.jsonl"
    data = tmp_path / "d"
    bare = {**machine, "PATH": "/usr/bin:/bin"}  # neither the CLI nor an engine
    async with daemon_in_process(data, "--sessions", "memory", "--wire", str(capture), env=bare) as daemon:
        async with rpc(daemon.url) as ann:
            init = await ann.initialize("ann")
            assert "vscode.devContainers" not in init.get("_meta", {})
            assert (await ann.call(PREFIX + "isDockerAvailable"))["result"] is False
            for method in ("connect", "relaySend", "disconnect", "stop", "remove"):
                refused = await ann.call(PREFIX + method, {"connectionId": "box", "workspaceFolder": str(project)})
                assert refused["error"]["code"] == -32601, refused
                assert "not served on this machine: neither the devcontainer CLI nor" in refused["error"]["message"]

        os.environ["PATH"] = machine["PATH"]  # installed while the daemon runs: found without a restart
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            init = await ann.initialize("ann")
            assert init["_meta"]["vscode.devContainers"] is True
            await bob.initialize("bob")
            assert (await ann.call(PREFIX + "isDockerAvailable"))["result"] is True

            box = {"connectionId": "box", "workspaceFolder": str(project), "name": "Box"}
            answer = await _connect(ann, box)
            (record,) = _records(tmp_path)
            assert answer["result"] == {
                "connectionId": "box",
                "address": f"devcontainer:{record['id']}",
                "name": "Box",
                "remoteWorkspaceFolder": "/workspaces/project",
                "hostWorkspaceFolder": str(project),
            }
            said = _said(ann, "box")
            assert f"$ {tmp_path / 'bin' / 'devcontainer'} up --docker-path" in said, said
            assert "Start: Run: " in said and "@devcontainers/cli" in said
            inner_pid = await _inner(tmp_path)

            # One frame each way, through the real host inside; a frame spread over
            # lines (JSON whitespace) is still one frame to it.
            sent = await ann.call(
                PREFIX + "relaySend", {"connectionId": "box", "data": json.dumps(INNER_INITIALIZE, indent=2)}
            )
            assert sent["result"] is None, sent
            notes = await until(
                ann,
                lambda n: (
                    n.get("method") == PREFIX + "relayMessage" and '"id":1' in n["params"]["data"].replace(" ", "")
                ),
            )
            inner = json.loads(notes[-1]["params"]["data"])
            assert inner["result"]["protocolVersion"] == "1.0.0", inner
            await ann.call(
                PREFIX + "relaySend",
                {"connectionId": "box", "data": '{"jsonrpc":"2.0","id":2,"method":"ping","params":{}}'},
            )
            notes = await until(
                ann,
                lambda n: n.get("method") == PREFIX + "relayMessage" and json.loads(n["params"]["data"]).get("id") == 2,
            )
            assert json.loads(notes[-1]["params"]["data"]) == {"jsonrpc": "2.0", "id": 2, "result": None}

            # connectionId is this connection's own name: nobody else reaches the relay by it.
            for method in ("relaySend", "disconnect"):
                refused = await bob.call(PREFIX + method, {"connectionId": "box", "data": "{}"})
                assert (
                    refused["error"]["code"] == -32008
                    and "no dev container connection 'box'" in refused["error"]["message"]
                )
            refused = await _connect(ann, box)
            assert refused["error"]["code"] == -32602 and "already in use" in refused["error"]["message"]
            refused = await ann.call(PREFIX + "relaySend", {"connectionId": "box", "data": 7})
            assert refused["error"]["code"] == -32602 and "data must be a string" in refused["error"]["message"]

            # The host inside dies on its own: its client is told the relay closed, then that
            # the connection is gone, and the name is free again.
            os.kill(inner_pid, signal.SIGKILL)
            notes = await until(ann, _closed("box"))
            assert _relay_notes(notes, "box")[-2:] == ["relayClose", "closeConnection"]
            assert (await ann.call(PREFIX + "relaySend", {"connectionId": "box", "data": "{}"}))["error"][
                "code"
            ] == -32008

            # Connected again, the container is reused; ended by its own client, nobody is told.
            again = await _connect(ann, box)
            assert again["result"]["address"] == answer["result"]["address"]
            assert len(_records(tmp_path)) == 1
            inner_pid = await _inner(tmp_path)
            ann.notes.clear()
            assert (await ann.call(PREFIX + "disconnect", {"connectionId": "box"}))["result"] is None
            await eventually(lambda: _gone(inner_pid))
            await ann.call("ping", {"channel": "ahp-root://"})
            assert "relayClose" not in _relay_notes(ann.notes, "box") and "closeConnection" not in _relay_notes(
                ann.notes, "box"
            )

            # A client that goes takes its relays with it.
            await _connect(ann, {**box, "connectionId": "left-open"})
            inner_pid = await _inner(tmp_path)
        await eventually(lambda: _gone(inner_pid))
        daemon.terminate()
        await daemon.wait()
    wire_clean(capture)


async def test_stop_remove_and_what_is_refused(tmp_path) -> None:
    machine = _machine(tmp_path)
    project = _project(tmp_path / "project")
    broken = _project(tmp_path / "broken", image="no-such/image")
    plain = tmp_path / "plain"
    plain.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=machine) as daemon:
        async with rpc(daemon.url) as ann:
            await ann.initialize("ann")
            box = {"connectionId": "box", "workspaceFolder": str(project), "name": "Box"}
            for params, why in (
                ({**box, "workspaceFolder": "project"}, "workspaceFolder must be an absolute path"),
                ({**box, "workspaceFolder": str(tmp_path / "nowhere")}, "is not a folder on this machine"),
                ({**box, "connectionId": ""}, "connectionId must be a non-empty string"),
                ({**box, "name": None}, "name must be a non-empty string"),
                ({**box, "resume": "yes"}, "resume must be true or false"),
            ):
                refused = await _connect(ann, params)
                assert refused["error"]["code"] == -32602 and why in refused["error"]["message"], (why, refused)

            # The CLI's own outcome, said: no devcontainer.json, an image that is not there.
            # The client is asked whether it trusts the folder first: not trusted, nothing starts.
            refused = await _connect(ann, {**box, "connectionId": "untrusted"}, trusted=False)
            assert refused["error"]["code"] == -32009 and f"does not trust {project}" in refused["error"]["message"]
            assert ann.asked == [{"workspace": project.as_uri()}]
            assert not _records(tmp_path) and _said(ann, "untrusted") == ""
            # A client that has no such question (-32601) is taken at its word.
            failed = await _connect(ann, {**box, "connectionId": "plain", "workspaceFolder": str(plain)}, trusted=None)
            assert failed["error"]["code"] == -32603
            assert f"devcontainer up for {plain} failed: Dev container config" in failed["error"]["message"]
            failed = await _connect(ann, {**box, "connectionId": "broken", "workspaceFolder": str(broken)})
            assert f"devcontainer up for {broken} failed: Command failed:" in failed["error"]["message"]
            assert "pull no-such/image" in failed["error"]["message"]
            assert "pull access denied for no-such/image" in _said(ann, "broken")
            # A container without ahpd: refused before any relay, naming what to do.
            os.environ["FAKE_DEVCONTAINER_PATH"] = "/usr/bin:/bin"
            failed = await _connect(ann, box)
            assert "has no ahpd on its PATH" in failed["error"]["message"], failed
            os.environ["FAKE_DEVCONTAINER_PATH"] = machine["FAKE_DEVCONTAINER_PATH"]

            # stop: the relay into it ends and its client is told; the container is stopped.
            assert "result" in await _connect(ann, box)
            assert (await ann.call(PREFIX + "stop", {"workspaceFolder": str(project)}))["result"] is True
            await until(ann, _closed("box"))
            (record,) = (r for r in _records(tmp_path) if r["folder"] == str(project))
            assert record["running"] is False and record["pids"] == []

            # Stopped here, it is started again only when asked to resume.
            refused = await _connect(ann, box)
            assert refused["error"]["code"] == -32602 and "resume: true" in refused["error"]["message"]
            assert "result" in await _connect(ann, {**box, "resume": True})
            (record,) = (r for r in _records(tmp_path) if r["folder"] == str(project))
            assert record["running"] is True

            # remove: the relay ends, the container is gone; nothing left to remove is no failure.
            assert (await ann.call(PREFIX + "remove", {"workspaceFolder": str(project)}))["result"] is True
            await until(ann, _closed("box"))
            assert not any(r["folder"] == str(project) for r in _records(tmp_path))
            assert (await ann.call(PREFIX + "remove", {"workspaceFolder": str(project)}))["result"] is True
            assert (await ann.call(PREFIX + "stop", {"workspaceFolder": str(plain)}))["result"] is True
            refused = await ann.call(PREFIX + "stop", {"workspaceFolder": "relative"})
            assert refused["error"]["code"] == -32602

            # A container the CLI made before (by hand here) is found by the folder it is labelled with.
            earlier = _project(tmp_path / "earlier")
            await trio.run_process(
                [str(tmp_path / "bin" / "devcontainer"), "up", "--workspace-folder", str(earlier)],
                env={**os.environ, **machine},
                capture_stdout=True,
                capture_stderr=True,
            )
            assert [r["running"] for r in _records(tmp_path) if r["folder"] == str(earlier)] == [True]
            assert (await ann.call(PREFIX + "stop", {"workspaceFolder": str(earlier)}))["result"] is True
            assert [r["running"] for r in _records(tmp_path) if r["folder"] == str(earlier)] == [False]
        daemon.terminate()
        await daemon.wait()


async def test_a_build_ends_with_the_connect_that_asked_for_it(tmp_path) -> None:
    machine = _machine(tmp_path)
    gate = tmp_path / "gate"
    slow = _project(tmp_path / "slow", image=f"wait-for:{gate}")
    building = tmp_path / "gate.pid"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=machine) as daemon:
        async with rpc(daemon.url) as ann:
            await ann.initialize("ann")
            params = {"connectionId": "slow", "workspaceFolder": str(slow), "name": "Slow"}
            request = {"jsonrpc": "2.0", "id": 100, "method": PREFIX + "connect", "params": params}
            await ann.ws.send_message(json.dumps(request))
            await _trust(ann)
            # The connection reads on while the image builds: a ping is answered first.
            assert (await ann.call("ping", {"channel": "ahp-root://"}))["result"] is None
            assert not any(n.get("id") == 100 for n in ann.notes), ann.notes
            await until(ann, lambda n: n.get("method") == PREFIX + "output" and "waiting for" in n["params"]["data"])
            await eventually(lambda: building.exists() and building.read_text().isdigit())
            pid = int(building.read_text())
            # Disconnected while it builds: the build is stopped and connect says why.
            assert (await ann.call(PREFIX + "disconnect", {"connectionId": "slow"}))["result"] is None
            answer = (await until(ann, lambda n: n.get("id") == 100))[-1]
            assert (
                answer["error"]["code"] == -32008
                and "disconnected before its container was up" in answer["error"]["message"]
            )
            await eventually(lambda: _gone(pid))
            assert not _records(tmp_path)

            # A client that goes while its container builds takes the build with it.
            building.unlink()
            request["id"] = 101
            await ann.ws.send_message(json.dumps(request))
            await _trust(ann)
            await eventually(lambda: building.exists() and building.read_text().isdigit())
            pid = int(building.read_text())
        await eventually(lambda: _gone(pid))
        async with rpc(daemon.url) as bob:  # and the daemon serves on
            await bob.initialize("bob")
            gate.touch()
            assert "result" in await _connect(bob, {**params, "connectionId": "after"})
        daemon.terminate()
        await daemon.wait()


async def test_a_frame_too_long_to_carry_is_dropped_and_said(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(devcontainers, "MAX_LINE", 300)  # the initialize answer is longer, a ping's is not
    machine = _machine(tmp_path)
    project = _project(tmp_path / "project")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=machine) as daemon:
        async with rpc(daemon.url) as ann:
            await ann.initialize("ann")
            assert "result" in await _connect(
                ann, {"connectionId": "box", "workspaceFolder": str(project), "name": "B"}
            )
            await ann.call(PREFIX + "relaySend", {"connectionId": "box", "data": json.dumps(INNER_INITIALIZE)})
            await ann.call(
                PREFIX + "relaySend", {"connectionId": "box", "data": '{"jsonrpc":"2.0","id":2,"method":"ping"}'}
            )
            notes = await until(
                ann, lambda n: n.get("method") == PREFIX + "relayMessage" and '"id":2' in n["params"]["data"]
            )
            carried = [json.loads(n["params"]["data"]) for n in notes if n.get("method") == PREFIX + "relayMessage"]
            assert [frame.get("id") for frame in carried] == [2], carried
            said = "".join(n["params"]["data"] for n in notes if n.get("method") == PREFIX + "output")
            assert "a frame of more than 300 bytes from the host inside was dropped" in said, said
        daemon.terminate()
        await daemon.wait()


async def test_a_host_inside_that_stops_reading_is_refused_frames_and_blocks_nobody(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(containers, "QUEUE_BYTES", 200_000)
    machine = _machine(tmp_path)
    project = _project(tmp_path / "project")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=machine) as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await ann.initialize("ann")
            await bob.initialize("bob")
            assert "result" in await _connect(
                ann, {"connectionId": "box", "workspaceFolder": str(project), "name": "B"}
            )
            inner_pid = await _inner(tmp_path)
            os.kill(inner_pid, signal.SIGSTOP)  # the host inside stops reading
            try:
                padding = "x" * 20_000
                frame = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"pad": padding}})
                sent, answer = 0, {}
                while "error" not in answer and sent < 1000:
                    answer = await ann.call(PREFIX + "relaySend", {"connectionId": "box", "data": frame})
                    sent += 1
                assert answer["error"]["code"] == -32603 and "is not reading" in answer["error"]["message"], answer
                assert 5 < sent < 50, sent  # the pipe's buffer and the bound, not the whole flood
                # Neither this connection nor another waits on it.
                assert (await ann.call("ping", {"channel": "ahp-root://"}))["result"] is None
                assert (await bob.call("ping", {"channel": "ahp-root://"}))["result"] is None
            finally:
                os.kill(inner_pid, signal.SIGCONT)
            # Reading again, it catches up, and what it answers is carried.
            await ann.call(PREFIX + "relaySend", {"connectionId": "box", "data": json.dumps(INNER_INITIALIZE)})
            await until(ann, lambda n: n.get("method") == PREFIX + "relayMessage" and '"id":1,' in n["params"]["data"])
        daemon.terminate()
        await daemon.wait()
