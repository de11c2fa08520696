"""The Claude backend over a fake CLI transport: the port's contract, in memory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from ahpd.backends.port import BackendError, PermissionRequest  # noqa: E402
from ahpd.backends.translate import TurnTranslator  # noqa: E402
from ahpd.protocol.strict_schema import validator  # noqa: E402
from tests.backends.claude_fixtures.fake_cli import (  # noqa: E402
    Ask,
    Die,
    FakeCLI,
    Hold,
    assistant,
    result,
    tool_result,
)
from tests.backends.claude_fixtures.harness import conversation, tool_updates  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def backend(fake: FakeCLI, seen: list[Any] | None = None) -> ClaudeBackend:
    def factory(options: Any) -> FakeCLI:
        if seen is not None:
            seen.append(options)
        return fake

    return ClaudeBackend(transport_factory=factory, cancel_grace=5.0)


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


async def test_agent_info_advertises_anthropic_and_the_models_the_cli_reports(cwd: Path) -> None:
    claude = backend(FakeCLI([]))
    info = claude.agent_info()
    validator("/$defs/AgentInfo").validate(info)
    assert info["provider"] == "claude" and info["displayName"] == "Claude Code"
    assert info["protectedResources"] == [{"resource": "https://api.anthropic.com", "required": False}]
    assert info["models"] == []
    async with conversation(claude, cwd) as (conv, rec):
        commands = rec.updates("available_commands_update")
        assert [c["name"] for c in commands[0]["availableCommands"]] == ["compact", "context"]
        assert commands[0]["availableCommands"][0]["input"] == {"hint": "<instructions>"}
    info = claude.agent_info()
    validator("/$defs/AgentInfo").validate(info)
    default, haiku = info["models"]
    assert default["id"] == "default" and default["name"] == "Default (recommended)"
    assert default["configSchema"]["properties"]["thinkingLevel"]["enum"] == ["low", "medium", "high"]
    assert "configSchema" not in haiku  # a model with no efforts draws no control


async def test_the_boot_probe_reads_models_without_a_turn() -> None:
    fake = FakeCLI([])
    claude = backend(fake)
    assert await claude.probe() is True
    assert [m["id"] for m in claude.agent_info()["models"]] == ["default", "haiku"]
    assert fake.closed and not fake.users()
    assert await backend(FakeCLI([])).probe() is True
    assert await claude.probe() is False  # nothing moved: no second agentsChanged


async def test_a_turn_streams_thinking_and_text_and_reports_usage(cwd: Path) -> None:
    fake = FakeCLI(
        [
            [
                assistant({"type": "thinking", "thinking": "Pondering.", "signature": "s"}, message_id="m1"),
                assistant({"type": "text", "text": "Hello there."}, message_id="m1"),
                result(),
            ]
        ]
    )
    async with conversation(backend(fake), cwd) as (conv, rec):
        outcome = await conv.prompt("hi")
    assert fake.users() == ["hi"]
    assert rec.text("agent_thought_chunk") == "Pondering."
    assert rec.text() == "Hello there."
    assert outcome.stop_reason == "end_turn"
    validator("/$defs/UsageInfo").validate(outcome.usage)
    assert outcome.usage == {
        "inputTokens": 100,
        "outputTokens": 20,
        "cacheReadTokens": 50,
        "model": "claude-sonnet-5-5",
        "_meta": {
            "ahpd.cacheWriteTokens": 10,
            "ahpd.reasoningTokens": 5,
            "ahpd.context": {"used": 160, "size": 200000},
            "ahpd.cost": {"amount": 0.0125, "currency": "USD"},
        },
    }


async def test_can_use_tool_asks_under_the_agents_own_id_allowed_then_denied(cwd: Path) -> None:
    bash = {"command": "touch x", "description": "Make x"}
    fake = FakeCLI(
        [
            [
                assistant({"type": "tool_use", "id": "toolu_A", "name": "Bash", "input": bash}),
                Ask("Bash", bash, "toolu_A"),
                tool_result("toolu_A", ""),
                result(),
            ],
            [
                assistant({"type": "tool_use", "id": "toolu_B", "name": "Bash", "input": bash}),
                Ask("Bash", bash, "toolu_B"),
                tool_result("toolu_B", "The user denied this tool call.", is_error=True),
                result(),
            ],
        ]
    )
    async with conversation(backend(fake), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow"
        await conv.prompt("make x")
        (request,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
        assert request.tool_call["toolCallId"] == "toolu_A"
        assert request.tool_call["title"] == "Run touch x"
        assert request.tool_call["rawInput"] == bash
        assert [(o.option_id, o.kind) for o in request.options] == [("allow", "allow_once"), ("deny", "reject_once")]
        updates = tool_updates(rec, "toolu_A")
        assert updates[0]["sessionUpdate"] == "tool_call" and updates[0]["kind"] == "execute"
        assert updates[-1]["status"] == "completed"

        rec.clear()
        rec.on_permission = lambda req: "deny"
        await conv.prompt("again")
        assert tool_updates(rec, "toolu_B")[-1]["status"] == "failed"
    assert fake.decisions[0] == {"behavior": "allow", "updatedInput": bash}
    assert fake.decisions[1]["behavior"] == "deny"


async def test_the_translator_draws_an_asked_tool_call_once(cwd: Path) -> None:
    bash = {"command": "rm -r build"}
    fake = FakeCLI(
        [
            [
                Ask("Bash", bash, "toolu_C"),  # the question overtakes the stream
                assistant({"type": "tool_use", "id": "toolu_C", "name": "Bash", "input": bash}),
                tool_result("toolu_C", "removed"),
                result(),
            ]
        ]
    )
    translator = TurnTranslator("t1")
    actions: list[dict[str, Any]] = []
    async with conversation(backend(fake), cwd) as (conv, rec):

        def answer(req: PermissionRequest) -> str:
            actions.extend(translator.permission(req))
            translator.confirmed("toolu_C", True)
            return "allow"

        rec.on_permission = answer
        original = rec.__call__

        def record(event: Any) -> None:
            if hasattr(event, "update"):
                actions.extend(translator.feed(event.update))
            original(event)

        conv._events = record  # type: ignore[attr-defined]
        await conv.prompt("clean")
    actions = [a for a in actions if a["type"].startswith("chat/toolCall")]
    kinds = [a["type"] for a in actions]
    assert kinds == ["chat/toolCallStart", "chat/toolCallReady", "chat/toolCallComplete"]
    assert "confirmed" not in actions[1] and actions[1]["invocationMessage"] == "Run rm -r build"
    assert actions[2]["result"]["success"] is True


async def test_an_edit_waiting_for_approval_carries_its_diff(cwd: Path) -> None:
    (cwd / "a.txt").write_text("one\ntwo\n")
    edit = {"file_path": str(cwd / "a.txt"), "old_string": "two", "new_string": "three"}
    fake = FakeCLI([[Ask("Edit", edit, "toolu_E"), tool_result("toolu_E", "ok"), result()]])
    async with conversation(backend(fake), cwd) as (conv, rec):
        rec.on_permission = lambda req: "allow"
        await conv.prompt("edit")
    (request,) = [e for e in rec.events if isinstance(e, PermissionRequest)]
    assert request.tool_call["kind"] == "edit"
    assert request.tool_call["content"] == [
        {"type": "diff", "path": str(cwd / "a.txt"), "oldText": "one\ntwo\n", "newText": "one\nthree\n"}
    ]


async def test_an_error_result_fails_the_turn_in_the_clis_words(cwd: Path) -> None:
    fake = FakeCLI(
        [
            [
                assistant({"type": "text", "text": "Not logged in · Please run /login"}, model="<synthetic>"),
                result(is_error=True, text="Not logged in · Please run /login", stop_reason="stop_sequence"),
            ],
            [assistant({"type": "text", "text": "fine now"}), result()],
        ]
    )
    async with conversation(backend(fake), cwd) as (conv, rec):
        with pytest.raises(BackendError, match="Not logged in"):
            await conv.prompt("hi")
        assert (await conv.prompt("again")).stop_reason == "end_turn"  # the conversation lives on


async def test_a_cli_that_dies_fails_the_turn_and_ends_the_conversation(cwd: Path) -> None:
    fake = FakeCLI([[assistant({"type": "text", "text": "partial"}), Die(exit_code=3)]])
    claude = backend(fake)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            conv = await nursery.start(
                lambda task_status: claude.run_conversation(cwd=cwd, events=lambda e: None, task_status=task_status)
            )
            with pytest.raises(BackendError, match="exit code 3"):
                await conv.prompt("hi")
        # run_conversation returned on its own: the nursery closed without a cancel.
    assert conv.end_reason and "exit code 3" in conv.end_reason
    with pytest.raises(BackendError, match="exit code 3"):
        await conv.prompt("anyone?")


async def test_cancel_interrupts_the_running_turn(cwd: Path) -> None:
    fake = FakeCLI([[assistant({"type": "text", "text": "Working"}), Hold()], [result()]])
    async with conversation(backend(fake), cwd) as (conv, rec):
        async with trio.open_nursery() as nursery:
            outcomes = []
            nursery.start_soon(lambda: _collect(conv.prompt("long"), outcomes))
            await rec.until(lambda: rec.text() == "Working")
            await conv.cancel()
        assert outcomes[0].stop_reason == "cancelled"
        assert any(m.get("request", {}).get("subtype") == "interrupt" for m in fake.written)
        assert (await conv.prompt("next")).stop_reason == "end_turn"


async def test_cancel_answers_a_pending_question(cwd: Path) -> None:
    fake = FakeCLI([[Ask("Bash", {"command": "make"}, "toolu_Q"), result()]])
    async with conversation(backend(fake), cwd) as (conv, rec):
        async with trio.open_nursery() as nursery:
            outcomes = []
            nursery.start_soon(lambda: _collect(conv.prompt("build"), outcomes))
            await rec.asked.wait()
            await conv.cancel()
        assert outcomes[0].stop_reason == "cancelled"
    assert fake.decisions[0]["behavior"] == "deny" and fake.decisions[0]["interrupt"] is True


async def test_a_steering_message_reaches_the_running_turn(cwd: Path) -> None:
    fake = FakeCLI(
        [
            [
                assistant({"type": "text", "text": "Working"}),
                Hold(),
                assistant({"type": "text", "text": "Steered."}),
                result(),
            ]
        ]
    )
    async with conversation(backend(fake), cwd) as (conv, rec):
        async with trio.open_nursery() as nursery:
            outcomes = []
            nursery.start_soon(lambda: _collect(conv.prompt("go"), outcomes))
            await rec.until(lambda: rec.text() == "Working")
            await conv.steer("use tabs, not spaces")
        assert outcomes[0].stop_reason == "end_turn"
    assert fake.users() == ["go", "use tabs, not spaces"]
    assert rec.text() == "WorkingSteered."


async def test_session_ids_token_and_resume_reach_the_cli(cwd: Path) -> None:
    seen: list[Any] = []
    chosen = "6f1c1c5e-2b7a-4b0e-9a57-0d3f5f8e2a11"
    claude = backend(FakeCLI([]), seen)
    async with conversation(claude, cwd, session_id=chosen, api_key="sk-pushed") as (conv, _):
        assert conv.backend_id == chosen
    assert seen[0].session_id == chosen and seen[0].resume is None
    assert seen[0].env["ANTHROPIC_API_KEY"] == "sk-pushed"
    assert seen[0].can_use_tool is not None and seen[0].include_partial_messages

    # The CLI wrote a transcript of it (a turn was had): it is resumed.
    transcript = (
        Path(os.environ.get("CLAUDE_CONFIG_DIR") or Path.home() / ".claude") / "projects" / "-w" / f"{chosen}.jsonl"
    )
    transcript.parent.mkdir(parents=True, exist_ok=True)
    transcript.write_text("")
    claude = backend(FakeCLI([]), seen)
    async with conversation(claude, cwd, resume_id=chosen) as (conv, _):
        assert conv.backend_id == chosen
    assert seen[1].resume == chosen and seen[1].session_id is None
    assert seen[1].env.get("ANTHROPIC_API_KEY") != "sk-pushed"
    assert seen[1].env.get("PATH") == os.environ.get("PATH")  # on top of the daemon's, never instead

    # One that never had a turn left no transcript, which the CLI refuses to
    # resume: it starts anew under the same id.
    unsaid = "0b8e7d6c-5a4f-4e3d-8c2b-1a0f9e8d7c6b"
    claude = backend(FakeCLI([]), seen)
    async with conversation(claude, cwd, resume_id=unsaid) as (conv, _):
        assert conv.backend_id == unsaid
    assert seen[2].resume is None and seen[2].session_id == unsaid

    with pytest.raises(BackendError, match="UUID"):
        await claude.run_conversation(cwd=cwd, events=lambda e: None, session_id="not-a-uuid")


async def _collect(awaitable: Any, into: list[Any]) -> None:
    into.append(await awaitable)
