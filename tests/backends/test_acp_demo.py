"""The ACP backend driving the shipped demo agent, a real ACP subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from ahpd.backends.port import BackendError, InputRequest, PermissionRequest, Update
from ahpd.protocol.strict_schema import validator
from tests.backends.acp_agents.harness import Recorder, conversation, demo_backend, reaped


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


async def test_a_turn_streams_thought_then_reply_in_order(home: Path, cwd: Path) -> None:
    backend = demo_backend(home)
    async with conversation(backend, cwd) as (conv, rec):
        assert conv.backend_id
        result = await conv.prompt("hello there, demo")
        assert result.stop_reason == "end_turn"
        assert result.usage is not None and result.usage["inputTokens"] == 3 and result.usage["outputTokens"] > 0
        validator("/$defs/UsageInfo").validate(result.usage)
        kinds = [u["sessionUpdate"] for u in rec.updates() if u["sessionUpdate"] != "available_commands_update"]
        first_message = kinds.index("agent_message_chunk")
        assert "agent_thought_chunk" in kinds[:first_message]
        assert "agent_thought_chunk" not in kinds[first_message:]
        # Chunks arrive in order: joined, they are the reply.
        assert rec.text() == "Demo agent here. You said: “hello there, demo”"
        assert rec.text("agent_thought_chunk").startswith("Reading the prompt (3 words). ")
        validator("/$defs/AgentInfo").validate(backend.agent_info())


async def test_permission_allow_and_reject_round_trip(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow-once"
        assert (await conv.prompt("permission")).stop_reason == "end_turn"
        (request,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
        assert request.tool_call["title"] == "Run the demo tool"
        assert {o.option_id: o.kind for o in request.options} == {
            "allow-once": "allow_once",
            "reject-once": "reject_once",
        }
        # The tool call was announced before the permission request.
        index = rec.events.index(request)
        starts = [
            i for i, e in enumerate(rec.events) if isinstance(e, Update) and e.update["sessionUpdate"] == "tool_call"
        ]
        assert starts and starts[0] < index
        assert "ran with your permission" in rec.text()

        rec.clear()
        rec.on_permission = lambda req: "reject-once"
        await conv.prompt("tool")
        assert "You rejected the demo tool" in rec.text()

        # Answered later, from another trio task (the usual case for a host).
        rec.clear()
        rec.on_permission = None
        async with trio.open_nursery() as nursery:
            results = []

            async def turn() -> None:
                results.append(await conv.prompt("permission"))

            nursery.start_soon(turn)
            await rec.asked.wait()
            (request,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
            await trio.sleep(0.05)
            conv.answer_permission(request.request_id, "allow-once")
            conv.answer_permission(request.request_id, "reject-once")  # a second answer is ignored
        assert results[0].stop_reason == "end_turn"
        assert "ran with your permission" in rec.text()


async def test_unanswered_permission_is_cancelled_by_cancel(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        async with trio.open_nursery() as nursery:
            results = []

            async def turn() -> None:
                results.append(await conv.prompt("permission"))

            nursery.start_soon(turn)
            await rec.asked.wait()
            await conv.cancel()
        assert results[0].stop_reason == "cancelled"


async def test_files_inside_the_folder_and_refusal_outside(home: Path, cwd: Path, tmp_path: Path) -> None:
    (cwd / "notes.txt").write_text("first line\nsecond line\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read\n")
    (cwd / "link.txt").symlink_to(secret)
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        await conv.prompt("read notes.txt")
        assert "The first line of `notes.txt` is: “first line”." in rec.text()

        rec.clear()
        rec.on_permission = lambda req: "allow-once"  # writing asks first
        await conv.prompt("write sub/new.txt fresh words")
        assert (cwd / "sub" / "new.txt").read_text() == "fresh words\n"

        for target in (str(secret), "link.txt", "../secret.txt"):
            rec.clear()
            await conv.prompt(f"read {target}")
            assert "access refused" in rec.text(), target
            assert "do not read" not in json.dumps([e.update for e in rec.events if isinstance(e, Update)])

        rec.clear()
        await conv.prompt(f"write {tmp_path / 'evil.txt'} pwned")
        assert "access refused" in rec.text()
        assert not (tmp_path / "evil.txt").exists()


async def test_terminal_runs_under_a_pty_with_exit_code(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow-once"  # running asks first
        await conv.prompt("run test -t 1 && pwd && exit 7")
        text = rec.text()
        assert "exited with code 7" in text, text
        assert f"Its output begins: “{cwd.resolve()}”" in text  # noqa: ASYNC240 - a test's look at a local path
        done = [u for u in rec.updates("tool_call_update") if u.get("status") in ("completed", "failed")]
        assert done[-1]["rawOutput"]["exitCode"] == 7


async def test_ask_maps_elicitation_to_an_input_request(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        answer = {"answer": {"state": "submitted", "value": {"kind": "selected", "value": "no"}}}
        rec.on_input = lambda req: ("accept", answer)
        await conv.prompt("ask")
        (request,) = [e for e in rec.events if isinstance(e, InputRequest)]
        assert request.message == "Shall the demo agent carry on?"
        (question,) = request.questions
        validator("/$defs/ChatInputQuestion").validate(question)
        assert question["kind"] == "single-select"
        assert [o["id"] for o in question["options"]] == ["yes", "no"]
        assert "you answered **no**" in rec.text()

        rec.clear()
        rec.on_input = lambda req: ("decline", None)
        await conv.prompt("ask")
        assert "you declined to answer" in rec.text()


async def test_cancel_returns_cancelled_promptly(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        async with trio.open_nursery() as nursery:
            results = []

            async def turn() -> None:
                results.append(await conv.prompt("slow"))

            nursery.start_soon(turn)
            await rec.until(lambda: rec.updates("agent_message_chunk"))
            cancelled_at = trio.current_time()
            await conv.cancel()
        assert results[0].stop_reason == "cancelled"
        assert trio.current_time() - cancelled_at < 2.0
        assert not rec.text().endswith("40.")  # the reply was cut short


async def test_prompt_error_is_a_backend_error_in_the_agents_words(home: Path, cwd: Path) -> None:
    async with conversation(demo_backend(home), cwd) as (conv, rec):
        with pytest.raises(BackendError) as caught:
            await conv.prompt("fail")
        assert caught.value.message == "the demo agent was asked to fail"
        # The conversation goes on.
        assert (await conv.prompt("hello again")).stop_reason == "end_turn"


async def test_load_after_restart_replays_history_and_list_delete(home: Path, cwd: Path) -> None:
    backend = demo_backend(home)
    async with conversation(backend, cwd) as (conv, rec):
        await conv.prompt("remember the walrus")
        session_id = conv.backend_id
        first_pid = conv.pid
    assert reaped(first_pid)

    async with conversation(backend, cwd, resume_id=session_id) as (conv, rec):
        assert conv.backend_id == session_id
        assert rec.text("user_message_chunk") == "remember the walrus"
        assert "You said: “remember the walrus”" in rec.text()
        rec.clear()
        await conv.prompt("and now?")
        assert "You said: “and now?”" in rec.text()

    listed = await backend.list_conversations()
    assert [c.backend_id for c in listed] == [session_id]
    assert listed[0].title == "remember the walrus"
    assert listed[0].cwd == str(cwd)
    assert await backend.delete_conversation(session_id) is True
    assert await backend.list_conversations() == []


async def test_loading_an_unknown_conversation_fails_clearly(home: Path, cwd: Path) -> None:
    backend = demo_backend(home)
    async with trio.open_nursery() as nursery:
        with pytest.raises(BackendError) as caught:
            await nursery.start(
                lambda task_status: backend.run_conversation(
                    cwd=cwd, events=Recorder(), resume_id="0" * 32, task_status=task_status
                )
            )
    assert caught.value.message == "session/load: Resource not found: no such session"


async def test_the_agent_is_reaped_when_the_chat_is_cancelled(home: Path, cwd: Path) -> None:
    async with trio.open_nursery() as nursery:
        rec = Recorder()
        conv = await nursery.start(
            lambda task_status: demo_backend(home).run_conversation(cwd=cwd, events=rec, task_status=task_status)
        )
        pid = conv.pid
        assert not reaped(pid)
        nursery.start_soon(conv.prompt, "slow")
        await rec.until(lambda: rec.updates("agent_message_chunk"))  # mid-turn: the reply has begun
        nursery.cancel_scope.cancel()
    assert reaped(pid)
    with pytest.raises(BackendError):
        await conv.prompt("anyone there?")
