"""``session/serverToolsChanged`` when the embedder changes the host's tools.

A Host in the test's own trio run (so the embedder's ``set_tools`` can be
called), real WebSocket clients, and the demo agent as a real ACP
subprocess: every subscriber of every running session is told the new set
in full, and the agent's MCP server offers that set and refuses the rest.
"""

from __future__ import annotations

import json

from ahpd.host import server_tools
from tests.daemon.helpers import rpc
from tests.daemon.test_server_tools import until
from tests.daemon.test_sessions import action_of, create, dispatch, fits, is_action, start_turn
from tests.host.live import ending_of, live_host


async def test_every_subscriber_of_every_session_is_told_the_new_set(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with live_host(tmp_path) as live, rpc(live.url) as alice, rpc(live.url) as bob:
        await alice.initialize("alice")
        await bob.initialize("bob")
        first, chat = await create(alice, work)
        second, _ = await create(alice, work)
        for client in (alice, bob):
            for uri in (first, second):
                state = (await client.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["serverTools"] == server_tools.DEFAULT_TOOLS

        fewer = [t for t in server_tools.DEFAULT_TOOLS if t["name"] != "delete_session"]
        server_tools.set_tools(live.host, fewer)
        for client in (alice, bob):
            for uri in (first, second):
                notes = await until(client, is_action("session/serverToolsChanged", uri))
                fits("/notifications/action", notes[-1]["params"])
                assert action_of(notes[-1])["tools"] == fewer  # the full set, not a difference
        server_tools.set_tools(live.host, fewer)  # the same set again says nothing
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
        assert answer == {"content": [{"type": "text", "text": "delete_session is not a tool this host offers"}],
                          "isError": True}
        answer = await server_tools.call(live.host, "ahp-chat:/gone", "list_sessions", {})
        assert answer["isError"] and "is gone" in answer["content"][0]["text"]
        answer = await server_tools.call(live.host, chat, "list_sessions", ["not", "an", "object"])
        assert answer["isError"] and "takes an object" in answer["content"][0]["text"]
        listed = json.loads((await server_tools.call(live.host, chat, "list_sessions", {}))["content"][0]["text"])
        assert {row["session"] for row in listed} == {first, second}
