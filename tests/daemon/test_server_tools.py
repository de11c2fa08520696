"""The host's own tools for agents, end to end through a real ACP agent.

A real ``ahpd run`` process, real WebSocket clients, and the shipped demo
agent as a real ACP subprocess, which connects to the MCP server the host
hands it in ``session/new`` (``python -m ahpd.mcp_relay`` over the daemon's
unix socket) and calls a tool on an ``mcp <tool> <JSON>`` prompt. Every
daemon runs with ``--wire`` and its capture must check clean.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from ahpd.host.sessions.common import default_chat_uri

from .helpers import (
    InProcessDaemon,
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    listed_as,
    rpc,
    start_turn,
    until,
    wire_clean,
)

ROOT = "ahp-root://"
KEY = "agentHost/sessionArtifacts"
TOOLS = [
    "list_sessions",
    "get_current_session",
    "create_session",
    "create_chat",
    "rename_chat",
    "send_message",
    "get_session_context",
    "delete_session",
    "add_artifact_or_reference",
    "remove_artifact_or_reference",
    "list_artifacts_and_references",
    "ahp_resource",
]


@asynccontextmanager
async def daemon(tmp_path: Path, data: Path, name: str) -> AsyncIterator[InProcessDaemon]:
    capture = tmp_path / f"{name}.jsonl"
    async with daemon_in_process(data, "--wire", str(capture)) as running:
        yield running
        running.terminate()
        assert await running.wait() == 0
    wire_clean(capture)


class Turns:
    """Prompts one chat and reads what its last turn said."""

    def __init__(self, client: Rpc, chat: str) -> None:
        self.client, self.chat, self.seq = client, chat, 0
        #: What the client was told during the last turn, up to its end.
        self.notes: list[dict] = []

    async def say(self, text: str) -> tuple[dict[str, Any], list[dict]]:
        self.seq += 1
        await dispatch(self.client, self.chat, start_turn(text), self.seq)
        notes = await until(
            self.client,
            lambda n: (
                (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                and n["params"]["channel"] == self.chat
            ),
        )
        assert action_of(notes[-1])["type"] == "chat/turnComplete", notes[-1]
        self.notes = notes
        state = (await self.client.call("subscribe", {"channel": self.chat}))["result"]["snapshot"]["state"]
        return state["turns"][-1], notes

    async def tool(self, name: str, arguments: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``mcp <name> <arguments>``: the reply's text and the tool call the turn showed."""
        turn, _ = await self.say(f"mcp {name} {json.dumps(arguments or {})}")
        reply = "".join(p.get("content", "") for p in turn["responseParts"] if p["kind"] == "markdown")
        [call] = [p["toolCall"] for p in turn["responseParts"] if p["kind"] == "toolCall"]
        return reply, call


PUBLISHED: list[dict[str, Any]] = []


async def publish(editor: Rpc) -> None:
    """A client publishing ``buffer://editor/...``: it answers the reads the host forwards."""
    PUBLISHED.clear()
    while True:
        frame = json.loads(await editor.ws.get_message())
        if "id" not in frame or frame.get("method") != "resourceRead":
            continue
        PUBLISHED.append(frame["params"])
        uri = frame["params"]["uri"]
        reply: dict[str, Any] = {"result": {"data": "unsaved words", "encoding": "utf-8"}}
        if uri != "buffer://editor/unsaved.md":
            reply = {"error": {"code": -32008, "message": f"{uri} is not open in the editor"}}
        await editor.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": frame["id"], **reply}))


def artifacts_in(notes: list[dict], uri: str) -> list[list[dict[str, Any]]]:
    """Every ``_meta[KEY]`` the session's ``session/metaChanged`` said, in order."""
    return [(action_of(n).get("_meta") or {}).get(KEY, []) for n in notes if is_action("session/metaChanged", uri)(n)]


async def test_the_demo_agent_uses_the_host_tools_and_artifacts_survive_a_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("read me through the host")
    other = tmp_path / "other"
    other.mkdir()
    data = tmp_path / "data"
    async with daemon(tmp_path, data, "first") as running:
        async with rpc(running.url) as alice, rpc(running.url) as bob:
            await alice.initialize("alice")
            await bob.initialize("bob")
            uri, chat = await create(alice, work)
            # Every subscriber holds the full set, which was dispatched to the session when it opened.
            for client in (alice, bob):
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert [t["name"] for t in state["serverTools"]] == TOOLS
                fits("/$defs/SessionState", state)
            turns = Turns(alice, chat)

            # list_sessions and get_current_session, as the agent reads them.
            reply, call = await turns.tool("list_sessions")
            assert call["status"] == "completed", call
            assert [row["session"] for row in json.loads(reply)] == [listed_as(uri)]  # as the host lists it
            reply, _ = await turns.tool("get_current_session")
            current = json.loads(reply)
            assert current["session"] == listed_as(uri) and current["chat"] == default_chat_uri(listed_as(uri))

            # Artifacts: recorded, told to every subscriber of the session and the root, listed, removed.
            items = [
                {"type": "website", "label": "Docs", "isArtifact": False, "link": "https://example.com/docs"},
                {"type": "file", "label": "Plan", "isArtifact": True, "uri": (work / "plan.md").as_uri()},
            ]
            reply, _ = await turns.tool("add_artifact_or_reference", {"items": items})
            lines = reply.splitlines()
            assert lines[0].startswith("Added reference: ") and lines[1].startswith("Added artifact: ")
            held = artifacts_in(turns.notes, uri)[-1]
            assert [(a["label"], a["isArtifact"]) for a in held] == [("Docs", False), ("Plan", True)]
            ids = [a["id"] for a in held]
            assert lines[0] == f"Added reference: {ids[0]} (website, reference) Docs — https://example.com/docs"
            seen_by_bob = await until(bob, is_action("session/metaChanged", uri))
            assert artifacts_in(seen_by_bob, uri)[-1] == held
            rows = [
                n["params"]
                for n in turns.notes
                if n.get("method") == "root/sessionSummaryChanged" and "_meta" in n["params"]["changes"]
            ]
            assert rows and rows[-1]["changes"]["_meta"][KEY] == held
            fits("/notifications/root~1sessionSummaryChanged", rows[-1])
            again, _ = await turns.tool("add_artifact_or_reference", {"items": items[:1]})
            assert again == f"Already recorded: {ids[0]} (website, reference) Docs — https://example.com/docs"
            listed, _ = await turns.tool("list_artifacts_and_references")
            assert [line.split()[0] for line in listed.splitlines()] == ids
            bad, call = await turns.tool(
                "add_artifact_or_reference", {"items": [{"type": "file", "label": "x", "isArtifact": True}]}
            )
            assert call["status"] == "completed" and "items[0].uri is required for a file" in bad
            reply, _ = await turns.tool("remove_artifact_or_reference", {"id": ids[0]})
            assert reply.startswith(f"Removed reference: {ids[0]}")
            reply, _ = await turns.tool("remove_artifact_or_reference", {"id": "nobody"})
            assert reply == "No artifact or reference with id nobody."

            # ahp_resource: a file: URI through the filesystem port.
            reply, _ = await turns.tool(
                "ahp_resource", {"method": "resourceRead", "params": {"uri": (work / "notes.txt").as_uri()}}
            )
            assert json.loads(reply)["data"] == "read me through the host"
            reply, call = await turns.tool(
                "ahp_resource", {"method": "resourceRead", "params": {"uri": "nowhere://x/y"}}
            )
            assert "is not a resource this host mediates" in reply and "error -32009" in reply

            # ahp_resource: a resource a second real client publishes, forwarded to it and answered.
            async with rpc(running.url) as editor, trio.open_nursery() as nursery:
                await editor.initialize("editor", subscriptions=())
                nursery.start_soon(publish, editor)
                reply, call = await turns.tool(
                    "ahp_resource", {"method": "resourceRead", "params": {"uri": "buffer://editor/unsaved.md"}}
                )
                assert json.loads(reply) == {"data": "unsaved words", "encoding": "utf-8"}
                assert call["status"] == "completed"
                reply, _ = await turns.tool(
                    "ahp_resource", {"method": "resourceRead", "params": {"uri": "buffer://editor/gone.md"}}
                )
                assert "buffer://editor/gone.md is not open in the editor (error -32008)" in reply
                assert [a["uri"] for a in PUBLISHED] == ["buffer://editor/unsaved.md", "buffer://editor/gone.md"]
                nursery.cancel_scope.cancel()

            # create_session: a new session in another folder, started with the prompt given.
            reply, _ = await turns.tool("create_session", {"workspace": str(other), "prompt": "hello from an agent"})
            made = json.loads(reply)
            assert made["workingDirectory"] == other.as_uri()
            [added] = [n["params"] for n in turns.notes if n.get("method") == "root/sessionAdded"]
            assert added["summary"]["resource"] == made["session"]
            fits("/notifications/root~1sessionAdded", added)
            sub = await alice.call("subscribe", {"channel": made["chat"]})
            state = sub["result"]["snapshot"]["state"]
            if not state["turns"] or state.get("activeTurn"):
                await until(alice, is_action("chat/turnComplete", made["chat"]), timeout=240)
                state = (await alice.call("subscribe", {"channel": made["chat"]}))["result"]["snapshot"]["state"]
            assert state["turns"][0]["message"]["text"] == "hello from an agent"
            assert state["turns"][0]["message"]["origin"] == {"kind": "agent"}

            # send_message and get_session_context on the session it made; then delete it.
            reply, _ = await turns.tool("send_message", {"session": made["session"], "message": "and a second one"})
            assert json.loads(reply)["chat"] == made["chat"]
            if not any(is_action("chat/turnComplete", made["chat"])(n) for n in turns.notes):
                await until(alice, is_action("chat/turnComplete", made["chat"]), timeout=240)
            context, _ = await turns.tool("get_session_context", {"session": made["session"]})
            assert [t["message"] for t in json.loads(context)["turns"]] == ["hello from an agent", "and a second one"]
            refused, _ = await turns.tool("delete_session", {"session": uri})
            assert "refuses to delete the current session" in refused
            reply, _ = await turns.tool("delete_session", {"session": made["session"]})
            assert json.loads(reply) == {"session": made["session"], "deleted": True}
            listed = (await alice.call("listSessions", {"channel": ROOT}))["result"]["items"]
            assert [row["resource"] for row in listed] == [listed_as(uri)]

    # After a restart the artifact is still the session's, on its row and its state.
    async with daemon(tmp_path, data, "second") as running:
        async with rpc(running.url) as alice:
            assert (await alice.initialize("alice"))["_meta"]["vscode.removeSessionArtifact"] is True
            [row] = (await alice.call("listSessions", {"channel": ROOT}))["result"]["items"]
            assert [a["id"] for a in row["_meta"][KEY]] == ids[1:]
            state = (await alice.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert [a["label"] for a in state["_meta"][KEY]] == ["Plan"]
            assert [t["name"] for t in state["serverTools"]] == TOOLS
            # The agent started again (session/load) is handed the server again and still sees it.
            await alice.call("subscribe", {"channel": chat})
            listed, _ = await Turns(alice, chat).tool("list_artifacts_and_references")
            assert listed.split()[0] == ids[1]

            # The window takes the pill off with its own request, which initialize said it may make.
            reply = await alice.call("vscode/removeSessionArtifact", {"session": uri, "artifactId": "nobody"})
            assert reply["error"]["code"] == -32602 and "nobody" in reply["error"]["message"], reply
            reply = await alice.call(
                "vscode/removeSessionArtifact", {"session": "ahp-session:/none", "artifactId": ids[1]}
            )
            assert reply["error"]["code"] == -32001, reply
            reply = await alice.call("vscode/removeSessionArtifact", {"session": uri})
            assert reply["error"]["code"] == -32602 and "artifactId" in reply["error"]["message"], reply
            alice.notes.clear()
            reply = await alice.call("vscode/removeSessionArtifact", {"session": uri, "artifactId": ids[1]})
            assert reply["result"] == {}, reply
            notes = await until(alice, is_action("session/metaChanged", uri))
            assert KEY not in (action_of(notes[-1]).get("_meta") or {})  # the last one takes the key with it
            rows = (await alice.call("listSessions", {"channel": ROOT}))["result"]["items"]
            [row] = [r for r in rows if r["resource"] == listed_as(uri)]
            assert KEY not in (row.get("_meta") or {})
