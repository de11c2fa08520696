"""The demo agent end to end: a real subprocess, real ACP, the library's client side."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from acp import RequestError

from ahpd.demo_agent import script as sc

from .harness import TIMEOUT, DemoClient, demo_agent, run, text

ECHO_PREFIX = "Demo agent here. You said: "


async def new_session(agent, cwd: Path) -> str:
    response = await asyncio.wait_for(agent.conn.new_session(cwd=str(cwd)), TIMEOUT)
    return response.session_id


async def prompt(agent, session_id: str, *parts: str):
    return await asyncio.wait_for(agent.conn.prompt(session_id=session_id, prompt=text(*parts)), TIMEOUT)


def tool_updates(client: DemoClient, session_id: str) -> list:
    return client.updates(session_id, "tool_call") + client.updates(session_id, "tool_call_update")


def final_status(client: DemoClient, session_id: str, call_id: str) -> str | None:
    status = None
    for update in client.updates(session_id):
        if update.session_update in ("tool_call", "tool_call_update") and update.tool_call_id == call_id:
            status = update.status or status
    return status


def test_initialize_advertises_capabilities(tmp_path: Path) -> None:
    async def body() -> None:
        async with demo_agent(tmp_path / "home", DemoClient(tmp_path)) as agent:
            raw = agent.wire[0]["result"]
            assert raw["protocolVersion"] == 1
            caps = raw["agentCapabilities"]
            assert caps["loadSession"] is True
            assert caps["promptCapabilities"] == {"image": False, "audio": False, "embeddedContext": True}
            assert set(caps["sessionCapabilities"]) == {"list", "delete", "resume", "close", "additionalDirectories"}
            assert raw["agentInfo"]["name"] == "ahpd-demo-agent"
            assert raw["authMethods"] == []

    run(body())


def test_new_session_gives_modes_then_commands(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            response = await asyncio.wait_for(agent.conn.new_session(cwd=str(tmp_path)), TIMEOUT)
            assert response.modes.current_mode_id == "default"
            assert [m.id for m in response.modes.available_modes] == ["default", "auto"]
            sid = response.session_id
            [update] = await client.wait_for(lambda: client.updates(sid, "available_commands_update"))
            commands = {c.name: c for c in update.available_commands}
            assert set(commands) == {"help", "echo"}
            assert commands["echo"].input.root.hint
            # The client learns the session id before any update for it.
            answer = next(i for i, m in enumerate(agent.wire) if "sessionId" in m.get("result", {}))
            first_update = next(i for i, m in enumerate(agent.wire) if m.get("method") == "session/update")
            assert answer < first_update

            with pytest.raises(RequestError) as error:
                await agent.conn.new_session(cwd="relative/dir")
            assert error.value.code == -32602

    run(body())


def test_default_turn_streams_thought_then_reply(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            response = await prompt(agent, sid, "Hello there, agent")
            assert response.stop_reason == "end_turn"
            assert response.usage.input_tokens == 3
            assert response.usage.total_tokens > response.usage.output_tokens > 0

            kinds = [
                u.session_update
                for u in client.updates(sid)
                if u.session_update in ("agent_thought_chunk", "agent_message_chunk")
            ]
            thoughts = kinds.count("agent_thought_chunk")
            assert 2 <= thoughts <= 3
            assert kinds[:thoughts] == ["agent_thought_chunk"] * thoughts
            assert len(kinds) - thoughts >= 2 and set(kinds[thoughts:]) == {"agent_message_chunk"}
            assert client.reply(sid) == ECHO_PREFIX + "“Hello there, agent”"
            message_ids = {u.message_id for u in client.updates(sid, "agent_message_chunk")}
            thought_ids = {u.message_id for u in client.updates(sid, "agent_thought_chunk")}
            assert len(message_ids) == len(thought_ids) == 1 and message_ids != thought_ids
            [info] = client.updates(sid, "session_info_update")
            assert info.title == "Hello there, agent"

            # Slash commands.
            await prompt(agent, sid, "/echo run this verbatim")
            assert client.reply(sid).endswith("run this verbatim")
            assert not client.requests("create_terminal")
            await prompt(agent, sid, "/help")
            assert "| `slow` |" in client.reply(sid)

    run(body())


@pytest.mark.parametrize(("choice", "status"), [("allow-once", "completed"), ("reject-once", "failed")])
def test_permission_allowed_or_rejected(tmp_path: Path, choice: str, status: str) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission=choice)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            response = await prompt(agent, sid, "please use a tool")
            assert response.stop_reason == "end_turn"

            [start] = client.updates(sid, "tool_call")
            assert start.kind == "execute" and start.title and start.raw_input["command"]
            [asked] = client.requests("request_permission")
            assert asked["tool_call"].tool_call_id == start.tool_call_id
            assert {o.kind for o in asked["options"]} == {"allow_once", "reject_once"}
            assert final_status(client, sid, start.tool_call_id) == status
            if status == "completed":
                assert "ran with your permission" in client.reply(sid)
            else:
                assert "You rejected the demo tool" in client.reply(sid)

    run(body())


def test_write_and_run_ask_first_and_a_rejection_leaves_things_alone(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission="reject-once")
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "write kept.txt never\nrun touch ran.txt")
            asked = client.requests("request_permission")
            assert [a["tool_call"].kind for a in asked] == ["edit", "execute"]
            assert not client.requests("write_text_file") and not client.requests("create_terminal")
            assert not (tmp_path / "kept.txt").exists() and not (tmp_path / "ran.txt").exists()
            calls = client.updates(sid, "tool_call")
            assert [final_status(client, sid, c.tool_call_id) for c in calls] == ["failed", "failed"]
            reply = client.reply(sid)
            assert "You rejected writing `kept.txt`" in reply and "You rejected running `touch ran.txt`" in reply

    run(body())


def test_cancel_while_asking_permission(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission="cancelled")
        client.permission_gate = asyncio.Event()
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            turn = asyncio.ensure_future(prompt(agent, sid, "permission please"))
            await client.wait_for(lambda: client.requests("request_permission"))
            await agent.conn.cancel(session_id=sid)
            response = await turn
            assert response.stop_reason == "cancelled"
            client.permission_gate.set()  # a client answers "cancelled" to what was pending
            [start] = client.updates(sid, "tool_call")
            assert final_status(client, sid, start.tool_call_id) == "failed"

            # The session goes on.
            client.permission_gate = None
            client.permission = "allow-once"
            assert (await prompt(agent, sid, "tool again")).stop_reason == "end_turn"

    run(body())


def test_permission_answered_cancelled_ends_turn(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission="cancelled")
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            assert (await prompt(agent, sid, "permission")).stop_reason == "cancelled"

    run(body())


def test_auto_mode_runs_tool_without_asking(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission="reject-once")
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            await asyncio.wait_for(agent.conn.set_session_mode(session_id=sid, mode_id="auto"), TIMEOUT)
            [mode] = client.updates(sid, "current_mode_update")
            assert mode.current_mode_id == "auto"
            await prompt(agent, sid, "tool")
            assert not client.requests("request_permission")
            [start] = client.updates(sid, "tool_call")
            assert final_status(client, sid, start.tool_call_id) == "completed"
            with pytest.raises(RequestError):
                await agent.conn.set_session_mode(session_id=sid, mode_id="nonsense")

    run(body())


def test_read_and_write_through_client_fs(tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "notes.txt").write_text("first line\nsecond line\n")
        (tmp_path / "old.txt").write_text("before\n")
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "read notes.txt")
            [read] = client.requests("read_text_file")
            assert read["path"] == str(tmp_path / "notes.txt")
            [start] = client.updates(sid, "tool_call")
            assert start.kind == "read" and start.locations[0].path == str(tmp_path / "notes.txt")
            assert final_status(client, sid, start.tool_call_id) == "completed"
            assert "“first line”" in client.reply(sid)

            await prompt(agent, sid, "write out.txt hello from the test")
            assert (tmp_path / "out.txt").read_text() == "hello from the test\n"
            edit = client.updates(sid, "tool_call")[-1]
            assert edit.kind == "edit"
            [diff] = edit.content
            assert diff.type == "diff" and diff.new_text == "hello from the test\n" and diff.old_text is None
            assert final_status(client, sid, edit.tool_call_id) == "completed"

            await prompt(agent, sid, "write old.txt after")
            diff = client.updates(sid, "tool_call")[-1].content[0]
            assert (diff.old_text, diff.new_text) == ("before\n", "after\n")

            await prompt(agent, sid, "read missing.txt")
            failed = client.updates(sid, "tool_call")[-1]
            assert final_status(client, sid, failed.tool_call_id) == "failed"
            assert "could not read `missing.txt`" in client.reply(sid)

    run(body())


def test_without_client_capabilities_it_says_it_cannot(tmp_path: Path) -> None:
    async def body() -> None:
        (tmp_path / "notes.txt").write_text("x\n")
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client, fs=False, terminal=False) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "read notes.txt\nwrite b.txt hi\nrun echo hi")
            reply = client.reply(sid)
            assert "cannot read" in reply and "cannot write" in reply and "cannot run" in reply
            assert not client.requests() and not client.updates(sid, "tool_call")

    run(body())


def test_run_a_command_in_a_client_terminal(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            response = await prompt(agent, sid, "run echo hi")
            assert response.stop_reason == "end_turn"
            [created] = client.requests("create_terminal")
            assert (created["command"], created["args"], created["cwd"]) == ("sh", ["-c", "echo hi"], str(tmp_path))
            [terminal_id] = client.terminals
            assert client.terminals[terminal_id].released
            methods = [name for tag, name, _ in client.events if tag == "request"]
            assert methods == [
                "request_permission",
                "create_terminal",
                "wait_for_terminal_exit",
                "terminal_output",
                "release_terminal",
            ]
            [start] = client.updates(sid, "tool_call")
            assert start.kind == "execute"
            embedded = [
                c for u in client.updates(sid, "tool_call_update") for c in (u.content or []) if c.type == "terminal"
            ]
            assert [c.terminal_id for c in embedded] == [terminal_id]
            assert final_status(client, sid, start.tool_call_id) == "completed"
            assert "`echo hi` exited with code 0" in client.reply(sid)
            assert "“hi”" in client.reply(sid)

            await prompt(agent, sid, "run exit 3")
            assert "exited with code 3" in client.reply(sid)
            assert final_status(client, sid, client.updates(sid, "tool_call")[-1].tool_call_id) == "failed"

    run(body())


def test_plan_progresses(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "make a plan")
            plans = [[e.status for e in u.entries] for u in client.updates(sid, "plan")]
            assert plans == [
                ["in_progress", "pending", "pending"],
                ["completed", "in_progress", "pending"],
                ["completed", "completed", "in_progress"],
                ["completed", "completed", "completed"],
            ]
            assert all(len(u.entries) == 3 for u in client.updates(sid, "plan"))

    run(body())


def test_ask_through_elicitation(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, answer="no")
        async with demo_agent(tmp_path / "home", client, elicitation=True) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "ask me")
            [asked] = client.requests("create_elicitation")
            assert asked["mode"].session_id == sid
            assert "answer" in asked["mode"].requested_schema.properties
            assert not client.requests("request_permission")
            assert "you answered **no**" in client.reply(sid)

    run(body())


def test_ask_without_elicitation_uses_a_permission_request(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path, permission="yes")
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "ask")
            [asked] = client.requests("request_permission")
            assert [o.option_id for o in asked["options"]] == ["yes", "no"]
            assert asked["tool_call"].title.startswith("Question:")
            assert "you answered **yes**" in client.reply(sid)

    run(body())


def test_slow_reply_stops_promptly_on_cancel(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            loop = asyncio.get_running_loop()
            turn = asyncio.ensure_future(prompt(agent, sid, "go slow"))
            await client.wait_for(lambda: client.updates(sid, "agent_message_chunk"))
            cancelled_at = loop.time()
            await agent.conn.cancel(session_id=sid)
            response = await turn
            assert response.stop_reason == "cancelled"
            # 40 chunks 0.1 s apart: stopping early shows as missing chunks.
            assert len(client.updates(sid, "agent_message_chunk")) < 40
            assert loop.time() - cancelled_at < 3.0

            # What was streamed is what is kept.
            listed = await agent.conn.list_sessions()
            assert listed.sessions[0].session_id == sid
        path = tmp_path / "home" / f"{sid}.json"
        stored = json.loads(path.read_text())
        assert stored["messages"][-1] == {
            "id": client.updates(sid, "agent_message_chunk")[0].message_id,
            "role": "agent",
            "text": client.reply(sid),
        }

    run(body())


def test_slow_reply_without_cancel_has_forty_chunks(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client, args=("--slow-delay", "0.005")) as agent:
            sid = await new_session(agent, tmp_path)
            assert (await prompt(agent, sid, "slow")).stop_reason == "end_turn"
            assert len(client.updates(sid, "agent_message_chunk")) == 40

    run(body())


def test_fail_answers_a_json_rpc_error(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            with pytest.raises(RequestError) as error:
                await prompt(agent, sid, "please fail")
            assert "the demo agent was asked to fail" in str(error.value)
            assert client.updates(sid, "agent_thought_chunk")
            assert (await prompt(agent, sid, "and now?")).stop_reason == "end_turn"

            with pytest.raises(RequestError) as error:
                await prompt(agent, "no-such-session", "hello")
            assert error.value.code == -32002

    run(body())


def test_load_after_restart_replays_history(tmp_path: Path) -> None:
    async def body() -> None:
        home = tmp_path / "home"
        first = DemoClient(tmp_path)
        async with demo_agent(home, first) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "hello one")
            await prompt(agent, sid, "/echo two")

        second = DemoClient(tmp_path)
        async with demo_agent(home, second) as agent:
            listed = await agent.conn.list_sessions()
            assert [(s.session_id, s.title) for s in listed.sessions] == [(sid, "hello one")]

            with pytest.raises(RequestError) as error:
                await prompt(agent, sid, "not loaded yet")
            assert error.value.code == -32002

            await asyncio.wait_for(agent.conn.load_session(cwd=str(tmp_path), session_id=sid), TIMEOUT)
            replay = [
                (u.session_update, u.content.text)
                for u in second.updates(sid)
                if u.session_update in ("user_message_chunk", "agent_message_chunk")
            ]
            assert replay == [
                ("user_message_chunk", "hello one"),
                ("agent_message_chunk", ECHO_PREFIX + "“hello one”"),
                ("user_message_chunk", "/echo two"),
                ("agent_message_chunk", "two"),
            ]
            # Replayed messages keep the ids the client first saw.
            assert second.updates(sid, "agent_message_chunk")[0].message_id == (
                first.updates(sid, "agent_message_chunk")[0].message_id
            )
            # The load is answered after the replay.
            load_answer = max(i for i, m in enumerate(agent.wire) if "result" in m)
            last_replayed = max(
                i
                for i, m in enumerate(agent.wire)
                if m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"].endswith("message_chunk")
            )
            assert last_replayed < load_answer
            assert second.updates(sid, "available_commands_update")

            await prompt(agent, sid, "three")
            assert second.reply(sid).endswith("“three”")

            with pytest.raises(RequestError) as error:
                await agent.conn.load_session(cwd=str(tmp_path), session_id="no-such-session")
            assert error.value.code == -32002

    run(body())


def test_resume_and_close(tmp_path: Path) -> None:
    async def body() -> None:
        home = tmp_path / "home"
        async with demo_agent(home, DemoClient(tmp_path)) as agent:
            sid = await new_session(agent, tmp_path)
            await prompt(agent, sid, "first")

        client = DemoClient(tmp_path)
        async with demo_agent(home, client) as agent:
            response = await asyncio.wait_for(agent.conn.resume_session(session_id=sid, cwd=str(tmp_path)), TIMEOUT)
            assert response.modes.current_mode_id == "default"
            assert not client.updates(sid, "user_message_chunk")  # no replay
            assert (await prompt(agent, sid, "second")).stop_reason == "end_turn"
            await asyncio.wait_for(agent.conn.close_session(session_id=sid), TIMEOUT)
            with pytest.raises(RequestError):
                await prompt(agent, sid, "after close")

        stored = json.loads((home / f"{sid}.json").read_text())
        assert [m["text"] for m in stored["messages"] if m["role"] == "user"] == ["first", "second"]

    run(body())


def test_list_and_delete(tmp_path: Path) -> None:
    async def body() -> None:
        one, two = tmp_path / "one", tmp_path / "two"
        one.mkdir()
        two.mkdir()
        async with demo_agent(tmp_path / "home", DemoClient(tmp_path)) as agent:
            a = await new_session(agent, one)
            b = await new_session(agent, two)
            await prompt(agent, a, "in one")
            listed = await agent.conn.list_sessions()
            assert [s.session_id for s in listed.sessions] == [a, b]  # most recently updated first
            assert listed.next_cursor is None
            only_two = await agent.conn.list_sessions(cwd=str(two))
            assert [(s.session_id, s.cwd) for s in only_two.sessions] == [(b, str(two))]
            assert only_two.sessions[0].updated_at

            assert await agent.call("session/delete", {"sessionId": a}) == {}
            assert [s.session_id for s in (await agent.conn.list_sessions()).sessions] == [b]
            assert not (tmp_path / "home" / f"{a}.json").exists()
            with pytest.raises(RequestError) as error:
                await agent.call("session/delete", {"sessionId": a})
            assert error.value.code == -32002
            with pytest.raises(RequestError):
                await prompt(agent, a, "gone")

    run(body())


def test_stdin_closing_mid_turn_ends_the_agent_cleanly(tmp_path: Path) -> None:
    async def body() -> None:
        client = DemoClient(tmp_path)
        async with demo_agent(tmp_path / "home", client) as agent:
            sid = await new_session(agent, tmp_path)
            turn = asyncio.ensure_future(prompt(agent, sid, "slow"))
            await client.wait_for(lambda: client.updates(sid, "agent_message_chunk"))
        # demo_agent() checked: exit status 0, nothing on stderr.
        with pytest.raises(ConnectionError):
            await turn
        stored = json.loads((tmp_path / "home" / f"{sid}.json").read_text())
        assert [m["role"] for m in stored["messages"]] == ["user", "agent"]
        kept = stored["messages"][1]["text"]
        assert kept and sc.reply(sc.parse("slow"), []).startswith(kept)

    run(body())


def test_bad_requests_are_refused_and_the_agent_keeps_serving(tmp_path: Path) -> None:
    async def body() -> None:
        async with demo_agent(tmp_path / "home", DemoClient(tmp_path), args=("--log-level", "error")) as agent:
            with pytest.raises(RequestError) as error:
                await agent.call("session/frobnicate", {})
            assert (error.value.code, str(error.value), error.value.data) == (
                -32601,
                "Method not found",
                {"method": "session/frobnicate"},
            )
            for params, field, kind in (
                ({"mcpServers": []}, "cwd", "missing"),
                ({"cwd": 7, "mcpServers": []}, "cwd", "string_type"),
                ({"cwd": str(tmp_path)}, "mcpServers", "missing"),
            ):
                with pytest.raises(RequestError) as error:
                    await agent.call("session/new", params)
                assert (error.value.code, str(error.value)) == (-32602, "Invalid params")
                [problem] = error.value.data["errors"]
                assert (problem["loc"], problem["type"]) == ([field], kind)
            with pytest.raises(RequestError) as error:
                await agent.call("session/prompt", None)
            assert error.value.code == -32602

            # Lines that are not a JSON-RPC message are skipped, even a JSON value that is not an object.
            assert agent.process.stdin is not None
            agent.process.stdin.write(b"this is not JSON\n[1, 2]\n\n")
            await agent.process.stdin.drain()
            assert (await asyncio.wait_for(agent.conn.list_sessions(), TIMEOUT)).sessions == []
            sid = await new_session(agent, tmp_path)
            assert (await prompt(agent, sid, "still here")).stop_reason == "end_turn"

    run(body())
