"""The Claude backend end to end: the real bundled CLI against a fake Messages API.

Everything is offline: the CLI is pointed at :mod:`fake_api` on 127.0.0.1
with a fake key, and ``HOME`` is a temporary folder, so its transcripts and
settings are the test's own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from ahpd.backends.port import BackendError, PermissionRequest  # noqa: E402
from ahpd.protocol.strict_schema import validator  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402
from tests.backends.claude_fixtures.harness import conversation, tool_updates  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    for name in fake_api.CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def api(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_api.FakeAnthropic]:
    with fake_api.FakeAnthropic().running() as fake:
        for name, value in fake_api.cli_env(fake.url, str(home)).items():
            monkeypatch.setenv(name, value)
        yield fake


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


async def _held(api: fake_api.FakeAnthropic) -> None:
    """Until the fake API holds a reply back (its thread sets ``holding``)."""
    await trio.to_thread.run_sync(api.holding.wait, abandon_on_cancel=True)


async def test_streamed_thinking_text_and_usage(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    api.add(fake_api.message(("thinking", "The user says hello."), ("text", "Hello from the fake API")))
    async with conversation(ClaudeBackend(), cwd) as (conv, rec):
        outcome = await conv.prompt("hello, fake model")
    assert rec.text("agent_thought_chunk") == "The user says hello."
    assert rec.text() == "Hello from the fake API"
    # Streamed: more than one chunk, and the finished block did not repeat them.
    assert len(rec.updates("agent_message_chunk")) == 2
    assert outcome.stop_reason == "end_turn"
    usage = outcome.usage
    validator("/$defs/UsageInfo").validate(usage)
    assert usage["inputTokens"] == 11 and usage["outputTokens"] == 7 and usage["cacheReadTokens"] == 3
    assert usage["model"] == fake_api.MODEL
    assert usage["_meta"]["ahpd.cacheWriteTokens"] == 2
    assert usage["_meta"]["ahpd.cost"]["currency"] == "USD" and usage["_meta"]["ahpd.cost"]["amount"] > 0
    assert "hello, fake model" in repr(api.requests[0]["messages"])


async def test_bash_asks_permission_approved_then_denied(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    api.add(
        fake_api.tool_use(
            "toolu_ok", "Bash", {"command": "touch approved.txt", "description": "Make a file"}, thought="A file, then."
        ),
        fake_api.text("Made it."),
        fake_api.tool_use("toolu_no", "Bash", {"command": "touch denied.txt", "description": "Make another"}),
        fake_api.text("You said no."),
    )
    async with conversation(ClaudeBackend(), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow"
        assert (await conv.prompt("make a file")).stop_reason == "end_turn"
        (asked,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
        assert asked.tool_call["toolCallId"] == "toolu_ok"
        assert asked.tool_call["title"] == "Run touch approved.txt"
        updates = tool_updates(rec, "toolu_ok")
        assert updates[0]["sessionUpdate"] == "tool_call" and updates[0]["kind"] == "execute"
        assert updates[-1]["status"] == "completed"
        assert (cwd / "approved.txt").exists()
        assert rec.text() == "Made it."

        rec.clear()
        rec.on_permission = lambda req: "deny"
        assert (await conv.prompt("make another")).stop_reason == "end_turn"
        assert tool_updates(rec, "toolu_no")[-1]["status"] == "failed"
        assert not (cwd / "denied.txt").exists()
    denied = [r for r in api.tool_results() if r["tool_use_id"] == "toolu_no"]
    assert denied and denied[0]["is_error"] is True


async def test_an_edit_asks_with_its_diff(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    target = cwd / "notes.txt"
    target.write_text("alpha\nbeta\n")
    api.add(
        fake_api.tool_use("toolu_read", "Read", {"file_path": str(target)}),
        fake_api.tool_use(
            "toolu_edit", "Edit", {"file_path": str(target), "old_string": "beta", "new_string": "gamma"}
        ),
        fake_api.text("Edited."),
    )
    async with conversation(ClaudeBackend(), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow"
        await conv.prompt("change beta to gamma")
    (asked,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
    assert asked.tool_call["toolCallId"] == "toolu_edit" and asked.tool_call["kind"] == "edit"
    assert asked.tool_call["content"] == [
        {"type": "diff", "path": str(target), "oldText": "alpha\nbeta\n", "newText": "alpha\ngamma\n"}
    ]
    assert target.read_text() == "alpha\ngamma\n"
    read = tool_updates(rec, "toolu_read")
    assert read[0]["kind"] == "read" and read[-1]["status"] == "completed"


async def test_cancel_mid_turn(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    api.add(fake_api.text("This answer never finishes", hold_after=3), fake_api.text("Next answer."))
    async with conversation(ClaudeBackend(), cwd) as (conv, rec):
        outcomes: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                outcomes.append(await conv.prompt("go on"))

            nursery.start_soon(turn)
            await rec.until(lambda: rec.text() != "")
            await conv.cancel()
        assert outcomes[0].stop_reason == "cancelled"
        rec.clear()
        assert (await conv.prompt("next")).stop_reason == "end_turn"
        assert rec.text() == "Next answer."


async def test_resume_by_id_after_a_restart(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    api.add(fake_api.text("First answer."), fake_api.text("Second answer."))
    async with conversation(ClaudeBackend(), cwd) as (conv, _):
        await conv.prompt("remember the word pelican")
        backend_id = conv.backend_id
    # A new backend: what a daemon that restarted has.
    async with conversation(ClaudeBackend(), cwd, resume_id=backend_id) as (conv, rec):
        assert conv.backend_id == backend_id
        await conv.prompt("which word?")
        assert rec.text() == "Second answer."
    history = api.requests[-1]["messages"]
    said = repr(history)
    assert "remember the word pelican" in said and "First answer." in said


async def test_a_session_stored_under_the_id_the_client_chose(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    chosen = "3b2d8f9e-8c1a-4d55-9d7e-5a0c2f1e7b64"
    api.add(fake_api.text("Hi."))
    claude = ClaudeBackend()
    async with conversation(claude, cwd, session_id=chosen) as (conv, _):
        await conv.prompt("name this one")
    listed = await claude.list_conversations()
    assert [c.backend_id for c in listed] == [chosen]
    assert listed[0].cwd == str(cwd.resolve()) and "name this one" in listed[0].title  # noqa: ASYNC240 - a test's look at a local path
    assert listed[0].modified_at and listed[0].modified_at.endswith("Z")
    assert await claude.delete_conversation(chosen) is True
    assert await claude.list_conversations() == []
    assert await claude.delete_conversation(chosen) is False


async def test_a_pushed_token_reaches_the_cli(
    api: fake_api.FakeAnthropic, cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    api.add(fake_api.text("Authorised."))
    async with conversation(ClaudeBackend(), cwd, api_key="sk-ant-pushed") as (conv, rec):
        await conv.prompt("hi")
    assert rec.text() == "Authorised."


async def test_no_credentials_ends_the_turn_with_the_clis_words(home: Path, cwd: Path) -> None:
    async with conversation(ClaudeBackend(), cwd) as (conv, _):
        with pytest.raises(BackendError, match="Not logged in"):
            await conv.prompt("hello?")


async def test_the_boot_probe_lists_models(api: fake_api.FakeAnthropic) -> None:
    claude = ClaudeBackend()
    assert await claude.probe() is True
    info = claude.agent_info()
    validator("/$defs/AgentInfo").validate(info)
    assert info["models"] and all(m["provider"] == "claude" for m in info["models"])
    assert any("thinkingLevel" in m.get("configSchema", {}).get("properties", {}) for m in info["models"])
    assert claude.commands and all(c["name"] for c in claude.commands)
    assert api.requests == []  # no model was called


async def test_a_steering_message_joins_the_running_turn(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    (cwd / "x.txt").write_text("x\n")
    first = fake_api.tool_use("toolu_r", "Read", {"file_path": str(cwd / "x.txt")})
    first.insert(3, fake_api.HOLD)
    api.add(first, fake_api.text("Tabs it is."))
    async with conversation(ClaudeBackend(), cwd) as (conv, rec):
        outcomes: list[Any] = []
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                outcomes.append(await conv.prompt("start"))

            nursery.start_soon(turn)
            await _held(api)
            await conv.steer("and also, use tabs")
            api.release()
        assert outcomes[0].stop_reason == "end_turn"
        assert rec.text() == "Tabs it is."
    # One turn, two model calls; the second carries the steering message.
    assert len(api.requests) == 2
    assert "and also, use tabs" in repr(api.requests[1]["messages"][-1])


async def test_a_past_session_reads_back_as_the_turns_it_streamed(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    api.add(
        fake_api.tool_use("toolu_h", "Bash", {"command": "touch h.txt"}, thought="Make it."),
        fake_api.text("Done."),
        fake_api.text("Second."),
    )
    claude = ClaudeBackend()
    async with conversation(claude, cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow"
        await conv.prompt("first question")
        await conv.prompt("second question")
        backend_id = conv.backend_id
        live = [u for u in rec.updates() if u["sessionUpdate"] != "available_commands_update"]
    first, second = await ClaudeBackend().read_history(backend_id)
    assert (first.text, second.text) == ("first question", "second question")
    kinds = [u["sessionUpdate"] for u in first.updates]
    assert kinds == ["agent_thought_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]
    assert first.updates[1]["toolCallId"] == "toolu_h" and first.updates[1]["title"] == "Run touch h.txt"
    assert first.updates[2]["status"] == "completed"
    assert "".join(u["content"]["text"] for u in second.updates) == "Second."
    assert first.usage is not None and first.usage["model"] == fake_api.MODEL
    validator("/$defs/UsageInfo").validate(first.usage)
    # The same text as streamed live, whole rather than in pieces.
    assert "".join(u["content"]["text"] for u in live if u["sessionUpdate"] == "agent_message_chunk") == "Done.Second."


async def test_a_cli_that_dies_mid_turn_fails_the_turn(api: fake_api.FakeAnthropic, cwd: Path) -> None:
    import os
    import signal

    api.add(fake_api.text("Never finished", hold_after=3))
    claude = ClaudeBackend()
    async with trio.open_nursery() as nursery:
        conv = await nursery.start(
            lambda task_status: claude.run_conversation(cwd=cwd, events=lambda e: None, task_status=task_status)
        )
        pid = claude.server_info["pid"]  # the CLI's own, from initialize

        async def kill_when_asked() -> None:
            await _held(api)
            os.kill(pid, signal.SIGKILL)

        nursery.start_soon(kill_when_asked)
        with pytest.raises(BackendError, match="exit code|exited|terminated|signal"):
            await conv.prompt("go")
    # run_conversation returned on its own once the CLI was gone.
    assert conv.end_reason
