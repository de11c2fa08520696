"""``session/serverToolsChanged`` when the embedder changes the host's tools.

A Host in the test's own trio run (so the embedder's ``set_tools`` can be
called), real WebSocket clients, and the demo agent as a real ACP
subprocess: every subscriber of every running session is told the new set
in full, and the agent's MCP server offers that set and refuses the rest.
"""

from __future__ import annotations

import uuid

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from ahpd.host.customizations import server_tools
from ahpd.host.customizations.session_tools import spawn_depth
from ahpd.host.customizations.tool_args import ToolError
from ahpd.host.customizations.tool_schemas import DEFAULT_TOOLS, MAX_SPAWN_DEPTH
from ahpd.host.customizations.mcp_bridge import bridge
from tests.daemon.helpers import action_of, create, dispatch, fits, is_action, rpc, start_turn, until
from tests.host.live import ending_of, live_host


async def test_every_subscriber_of_every_session_is_told_the_new_set(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice, rpc(live.url) as bob:
        await alice.initialize("alice")
        await bob.initialize("bob")
        # As listed: server_tools.call is handed the host's own name of the chat.
        first, chat = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")
        second, _ = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")
        for client in (alice, bob):
            for uri in (first, second):
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["serverTools"] == DEFAULT_TOOLS

        # The embedder's set: one of the host's tools taken away, one of its own added.
        async def shout(host, chat_, arguments):
            if not isinstance(arguments.get("words"), str):
                raise ToolError("words must be a string")
            return arguments["words"].upper()

        mine = {
            "name": "shout",
            "description": "Say it louder",
            "inputSchema": {"type": "object", "properties": {"words": {"type": "string"}}, "required": ["words"]},
        }
        fewer = [t for t in DEFAULT_TOOLS if t["name"] != "delete_session"] + [mine]
        server_tools.set_tools(live.host, fewer, {"shout": shout})
        for client in (alice, bob):
            for uri in (first, second):
                notes = await until(client, is_action("session/serverToolsChanged", uri))
                fits("/notifications/action", notes[-1]["params"])
                assert action_of(notes[-1])["tools"] == fewer  # the full set, not a difference
        server_tools.set_tools(live.host, fewer, {"shout": shout})  # the same set again says nothing
        state = (await alice.call("subscribe", {"channel": first}))["result"]["snapshot"]["state"]
        assert state["serverTools"] == fewer
        assert not [n for n in alice.notes if is_action("session/serverToolsChanged")(n)]

        # The agent is offered the new set, and what left it is refused.
        await alice.call("subscribe", {"channel": chat})
        await dispatch(alice, chat, start_turn("mcp"), 1)
        assert action_of((await until(alice, ending_of(chat)))[-1])["type"] == "chat/turnComplete"
        state = (await alice.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
        listing = state["turns"][-1]["responseParts"][-1]["content"].splitlines()
        assert listing == [f"ahp: {t['name']}" for t in fewer]
        answer = await server_tools.call(live.host, chat, "delete_session", {"session": second})
        assert answer == {
            "content": [{"type": "text", "text": "delete_session is not a tool this host offers"}],
            "isError": True,
        }
        answer = await server_tools.call(live.host, chat, "shout", {"words": "hello"})
        assert answer == {"content": [{"type": "text", "text": "HELLO"}], "isError": False}
        answer = await server_tools.call(live.host, chat, "shout", {})
        assert answer == {"content": [{"type": "text", "text": "words must be a string"}], "isError": True}
        answer = await server_tools.call(live.host, "ahp-chat:/gone", "list_sessions", {})
        assert answer["isError"] and "is gone" in answer["content"][0]["text"]
        answer = await server_tools.call(live.host, chat, "list_sessions", ["not", "an", "object"])
        assert answer["isError"] and "takes an object" in answer["content"][0]["text"]
        listed = json.loads((await server_tools.call(live.host, chat, "list_sessions", {}))["content"][0]["text"])
        assert {row["session"] for row in listed} == {first, second}


async def _frames(stream: trio.SocketStream, count: int) -> list[dict]:
    data = b""
    with trio.fail_after(60):
        while data.count(b"\n") < count:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            data += chunk
    return [json.loads(line) for line in data.splitlines() if line.strip()]


async def test_the_mcp_socket_answers_only_a_secret_it_gave_out(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice:
        await alice.initialize("alice")
        uri, chat = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")  # as listed
        server = await bridge(live.host).server_for(chat)
        env = {e["name"]: e["value"] for e in server["env"]}
        assert server["args"] == ["-m", "ahpd.mcp_relay"] and server["name"] == "ahp"
        assert stat.S_IMODE(Path(env["AHPD_MCP_SOCKET"]).parent.stat().st_mode) == 0o700
        assert await bridge(live.host).server_for(chat) == server  # one secret per chat

        # A stranger is closed on without an answer.
        stranger = await trio.open_unix_socket(env["AHPD_MCP_SOCKET"])
        await stranger.send_all(
            b"not-a-secret\n"
            + json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}).encode()
            + b"\n"
        )
        assert await _frames(stranger, 1) == []
        await stranger.aclose()

        # The chat's relay is served MCP, and told what it asked wrongly.
        relay = await trio.open_unix_socket(env["AHPD_MCP_SOCKET"])
        requests = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "resources/list"},
            {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {}},
            {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "list_artifacts_and_references", "arguments": {}},
            },
        ]
        await relay.send_all(
            env["AHPD_MCP_SECRET"].encode()
            + b"\n"
            + b"not json\n"
            + b"".join(json.dumps(r).encode() + b"\n" for r in requests)
        )
        answers = await _frames(relay, 6)
        await relay.aclose()
        by_id = {a["id"]: a for a in answers}
        assert by_id[None]["error"]["code"] == -32700
        assert by_id[1]["result"]["protocolVersion"] == "2025-06-18"
        assert by_id[1]["result"]["capabilities"] == {"tools": {"listChanged": False}}
        assert [t["name"] for t in by_id[2]["result"]["tools"]] == [t["name"] for t in DEFAULT_TOOLS]
        assert by_id[3]["error"]["code"] == -32601
        assert by_id[4]["error"]["code"] == -32602
        assert by_id[5]["result"] == {
            "content": [{"type": "text", "text": "No artifacts or references recorded for this session."}],
            "isError": False,
        }
        # The host is none the worse: its session still answers.
        assert "result" in await alice.call("subscribe", {"channel": uri})
        # Once the session is disposed its chat's secret opens nothing: a
        # relay left behind by its agent is closed on like a stranger.
        assert "error" not in await alice.call("disposeSession", {"channel": uri})
        late = await trio.open_unix_socket(env["AHPD_MCP_SOCKET"])
        await late.send_all(env["AHPD_MCP_SECRET"].encode() + b"\n" + json.dumps(requests[0]).encode() + b"\n")
        assert await _frames(late, 1) == []
        await late.aclose()


def _socket_folder(listening: bool, age: float) -> tuple[Path, socket.socket | None]:
    """A socket folder as a daemon leaves it: its socket bound, then held
    (``listening``) or closed as by a killed process, ``age`` seconds old."""
    folder = Path(tempfile.mkdtemp(prefix="ahpd-mcp-"))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(folder / "tools.sock"))
    if listening:
        sock.listen(1)
    else:
        sock.close()
    then = time.time() - age
    os.utime(folder / "tools.sock", (then, then))
    return folder, sock if listening else None


async def test_socket_folders_left_by_killed_daemons_are_removed_and_live_ones_kept(tmp_path) -> None:
    stale, _ = _socket_folder(listening=False, age=3600)
    young, _ = _socket_folder(listening=False, age=0)  # a daemon that has just bound it
    kept, held = _socket_folder(listening=True, age=3600)
    try:
        async with live_host(tmp_path) as live, rpc(live.url) as alice:
            await alice.initialize("alice")
            _, chat = await create(alice, tmp_path, channel=f"demo:/{uuid.uuid4()}")
            server = await bridge(live.host).server_for(chat)
            mine = Path({e["name"]: e["value"] for e in server["env"]}["AHPD_MCP_SOCKET"]).parent
            assert not stale.exists()
            assert young.exists() and kept.exists() and mine.exists()
    finally:
        assert held is not None
        held.close()
        shutil.rmtree(young, ignore_errors=True)
        shutil.rmtree(kept, ignore_errors=True)


def test_the_relay_says_what_it_lacks(tmp_path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AHPD_MCP_")}
    run = subprocess.run(
        [sys.executable, "-m", "ahpd.mcp_relay"],
        env=base,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2 and "AHPD_MCP_SOCKET and AHPD_MCP_SECRET must be set" in run.stderr
    missing = str(tmp_path / "no.sock")
    run = subprocess.run(
        [sys.executable, "-m", "ahpd.mcp_relay"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, "AHPD_MCP_SOCKET": missing, "AHPD_MCP_SECRET": "s"},
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1 and f"cannot reach the daemon at {missing}" in run.stderr


async def test_agents_make_sessions_only_so_deep_and_on_a_model_offered(tmp_path) -> None:
    """``create_session`` stamps each session it makes one level deeper
    (kept in its ``_meta``) and refuses past the bound; ``model`` is checked
    against what the agent offers, by id or by name, before anything is made."""
    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice:
        await alice.initialize("alice")
        _uri, chat = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")  # as listed
        offered = live.host.sessions.chat_owner[chat].session.backend.agent_info().get("models") or []
        assert offered, "the demo agent offers models"
        wrong = await server_tools.call(
            live.host, chat, "create_session", {"workspace": str(work), "prompt": "hi", "model": "no-such-model"}
        )
        assert wrong["isError"] and "no model 'no-such-model'" in wrong["content"][0]["text"]
        assert offered[0]["id"] in wrong["content"][0]["text"]
        assert len(live.host.sessions.sessions) == 1  # nothing was made

        by_name = offered[-1]
        depths = []
        for _level in range(MAX_SPAWN_DEPTH):
            answer = await server_tools.call(
                live.host,
                chat,
                "create_session",
                {"workspace": str(work), "prompt": "hello", "model": by_name.get("name") or by_name["id"]},
            )
            assert not answer["isError"], answer
            made = json.loads(answer["content"][0]["text"])
            session = live.host.sessions.sessions[made["session"]]
            depths.append(spawn_depth(session))
            chat = made["chat"]  # the next one is made from inside the one just made
        assert depths == list(range(1, MAX_SPAWN_DEPTH + 1))
        # The first message carried the model, which became the session's.
        message = {"text": "hello", "origin": {"kind": "agent"}, "model": {"id": by_name["id"]}}
        pending = live.host.bus.channels[chat].state
        said = (
            [t["message"] for t in pending.get("turns") or []]
            + [m["message"] for m in pending.get("queuedMessages") or []]
            + ([pending["activeTurn"]["message"]] if pending.get("activeTurn") else [])
        )
        assert message in said, said
        deep = await server_tools.call(live.host, chat, "create_session", {"workspace": str(work), "prompt": "hi"})
        assert deep["isError"] and f"{MAX_SPAWN_DEPTH} level(s) down" in deep["content"][0]["text"]
        assert len(live.host.sessions.sessions) == 1 + MAX_SPAWN_DEPTH
        # A chat in the deepest session is still allowed: it makes no new level.
        answer = await server_tools.call(live.host, chat, "create_chat", {"prompt": "a side note"})
        assert not answer["isError"], answer


async def test_a_worker_chat_is_read_but_never_messaged_through_the_tools(tmp_path) -> None:
    """``send_message`` would queue a turn on a subagent's worker chat and
    start an agent there; it is refused like a client's message is, while
    ``get_session_context`` still reads it."""
    from ahpd.host.sessions.chats import workers

    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice:
        await alice.initialize("alice")
        uri, chat = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")  # as listed
        parent = live.host.sessions.chat_owner[chat]
        worker = workers.open_worker(parent, "toolu_x", {"description": "Look around", "prompt": "look"})
        assert worker is not None
        refused = await server_tools.call(
            live.host, chat, "send_message", {"session": worker.chat.uri, "message": "hello"}
        )
        assert refused["isError"] and "read-only" in refused["content"][0]["text"], refused
        assert live.host.bus.channels[worker.chat.uri].state.get("queuedMessages") is None
        read = await server_tools.call(live.host, chat, "get_session_context", {"session": worker.chat.uri})
        assert not read["isError"], read
        assert json.loads(read["content"][0]["text"])["activeTurn"]["message"] == "look"


async def test_rename_chat_names_a_chat_and_a_session_that_has_only_it(tmp_path) -> None:
    """The seed's ``session/titleChanged`` row: an agent renames a chat with
    ``rename_chat``. Every subscriber sees the chat's row move; a session
    whose only chat it is takes the title too; another chat's title is its own."""
    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice, rpc(live.url) as bob:
        await alice.initialize("alice")
        await bob.initialize("bob")
        uri, chat = await create(alice, work, channel=f"demo:/{uuid.uuid4()}")  # as listed
        await bob.call("subscribe", {"channel": uri})
        answer = await server_tools.call(live.host, chat, "rename_chat", {"title": "  Tidy   the docs "})
        assert not answer["isError"], answer
        assert json.loads(answer["content"][0]["text"]) == {"session": uri, "chat": chat, "title": "Tidy the docs"}
        for client in (alice, bob):
            await until(
                client, lambda n: is_action("session/titleChanged", uri)(n) and action_of(n)["title"] == "Tidy the docs"
            )
        state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
        assert state["title"] == "Tidy the docs"
        assert [c["title"] for c in state["chats"]] == ["Tidy the docs"]
        assert (await bob.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"][
            "title"
        ] == "Tidy the docs"

        # A second chat: renamed by name from the first, the session keeps its title.
        side = "ahp-chat:/side-to-rename"
        assert "error" not in await alice.call("createChat", {"channel": uri, "chat": side})
        answer = await server_tools.call(
            live.host, chat, "rename_chat", {"chat": side, "session": uri, "title": "Side work"}
        )
        assert not answer["isError"], answer
        await until(
            bob,
            lambda n: (
                is_action("session/chatUpdated", uri)(n)
                and action_of(n)["chat"] == side
                and action_of(n)["changes"].get("title") == "Side work"
            ),
        )
        state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
        assert state["title"] == "Tidy the docs"
        assert {c["resource"]: c["title"] for c in state["chats"]}[side] == "Side work"

        # Refusals, each naming what was wrong; nothing moves.
        for args, words in (
            ({"title": "   "}, "title must be a non-empty string"),
            ({"title": "x" * 201}, "at most 200"),
            ({"chat": side, "session": "ahp-session:/other", "title": "No"}, "not of"),
            ({"chat": "ahp-chat:/nobody", "title": "No"}, "no session or chat"),
        ):
            answer = await server_tools.call(live.host, chat, "rename_chat", args)
            assert answer["isError"] and words in answer["content"][0]["text"], (args, answer)
        state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
        assert {c["resource"]: c["title"] for c in state["chats"]} == {chat: "Tidy the docs", side: "Side work"}
