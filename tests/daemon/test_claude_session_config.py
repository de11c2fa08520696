"""Session config, working directories and auto-approve reaching Claude
Code: the real bundled CLI against the fake Messages API, whose requests
say which model the CLI was asked to use and what it was told it may touch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import action_of, create, daemon_in_process, is_action, rpc, until  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402
from .test_session_config import _applied, _refused, _turn  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


def _system(body: dict) -> str:
    system = body.get("system")
    return json.dumps(system) if not isinstance(system, str) else system


def _environment(body: dict) -> str:
    """The environment the CLI last told the model about (its directories)."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content")
        for block in reversed(content if isinstance(content, list) else [{"text": content}]):
            text = block.get("text") if isinstance(block, dict) else None
            if isinstance(text, str) and "# Environment" in text:
                return text
    raise AssertionError("the CLI told the model no environment")


async def test_model_effort_directories_and_auto_approve_reach_claude(tmp_path: Path) -> None:
    home, work, extra, moved = (tmp_path / n for n in ("home", "work", "extra", "moved"))
    for folder in (home, work, extra, moved):
        folder.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
                await ann.initialize("ann")
                await bob.initialize("bob")
                resolved = (
                    await ann.call(
                        "resolveSessionConfig",
                        {"channel": "ahp-root://", "provider": "claude", "config": {"model": "sonnet"}},
                        timeout=120,
                    )
                )["result"]
                props = resolved["schema"]["properties"]
                assert {"sonnet", "haiku", "opus"} <= set(props["model"]["enum"]) and props["model"]["sessionMutable"]
                # Each model carries its own thinking level: no session-wide effort key beside it.
                assert "effortLevel" not in props
                assert resolved["values"] == {"model": "sonnet"}
                root = (await ann.call("subscribe", {"channel": "ahp-root://"}))["result"]["snapshot"]["state"]
                claude = next(a for a in root["agents"] if a["provider"] == "claude")
                assert claude["capabilities"]["multipleWorkingDirectories"]["primaryReplacement"] is True
                levels = {
                    m["id"]: m["configSchema"]["properties"]["thinkingLevel"]["enum"]
                    for m in claude["models"]
                    if m.get("configSchema")
                }
                level = next(lvl for lvl in levels["opus"] if lvl != "medium")

                uri, chat = await create(
                    ann,
                    work,
                    provider="claude",
                    workingDirectories=[work.as_uri(), extra.as_uri()],
                    config={"model": "sonnet"},
                )
                await bob.call("subscribe", {"channel": uri})
                api.add(fake_api.text("one"))
                await _turn(ann, chat, "hello", 1)
                body = api.requests[-1]
                assert "sonnet" in body["model"]
                env = _environment(body)
                assert f"Primary working directory: {work.resolve()}" in env
                assert f"Additional working directories:\n  - {extra.resolve()}" in env

                # The model, live; everyone sees the change.
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"model": "haiku"}}, 2)
                heard = await until(bob, is_action("session/configChanged", uri))
                assert action_of(heard[-1])["config"] == {"model": "haiku"}
                api.add(fake_api.text("two"))
                await _turn(ann, chat, "again", 3)
                assert "haiku" in api.requests[-1]["model"]
                reason = await _refused(ann, uri, {"type": "session/configChanged", "config": {"model": "gpt-9"}}, 4)
                assert "offers no model 'gpt-9'" in reason

                # A turn's model and thinking level: the CLI starts again, resumed, with the effort.
                api.add(fake_api.text("three"))
                notes, reply = await _turn(
                    ann, chat, "think hard", 5, model={"id": "opus", "config": {"thinkingLevel": level}}
                )
                said = [action_of(n)["config"] for n in notes if is_action("session/configChanged", uri)(n)]
                assert said == [{"model": "opus", "effortLevel": level}]
                body = api.requests[-1]
                assert "opus" in body["model"] and body["output_config"]["effort"] == level
                assert reply == "three"
                # Resumed: the conversation so far went with it.
                assert "again" in json.dumps(body["messages"])

                # Directories: the primary moves, the extra goes; resumed each time.
                await _applied(
                    ann,
                    uri,
                    {
                        "type": "session/workingDirectoryReplaced",
                        "directory": work.as_uri(),
                        "replacement": moved.as_uri(),
                    },
                    6,
                )
                await _applied(ann, uri, {"type": "session/workingDirectoryRemoved", "directory": extra.as_uri()}, 7)
                api.add(fake_api.text("four"))
                await _turn(ann, chat, "where now", 8)
                body = api.requests[-1]
                env = _environment(body)  # the CLI, resumed, says what moved
                assert f"Primary working directory: {moved.resolve()} (was {work.resolve()})" in env
                assert f"Additional working directories removed:\n  - {extra.resolve()}" in env
                assert "think hard" in json.dumps(body["messages"])

                # globalAutoApproveEnabled: can_use_tool is answered by the setting.
                await _applied(
                    ann, "ahp-root://", {"type": "root/configChanged", "config": {"globalAutoApproveEnabled": True}}, 9
                )
                target = moved / "auto.txt"
                api.add(
                    fake_api.tool_use("toolu_auto", "Write", {"file_path": str(target), "content": "approved\n"}),
                    fake_api.text("Written."),
                )
                notes, _ = await _turn(ann, chat, "write it", 10)
                assert not any(is_action("session/inputNeededSet")(n) for n in notes)
                ready = [action_of(n) for n in notes if is_action("chat/toolCallReady", chat)(n)]
                assert [r.get("confirmed") for r in ready] == ["setting"]
                assert target.read_text() == "approved\n"
        daemon.terminate()
        await daemon.wait()


async def test_a_turn_s_own_model_is_the_model_that_turn_runs_on(tmp_path: Path) -> None:
    """Issue 26, row 12: ``Message.model`` alone (no thinking level), on the
    first turn of a session made with no config and on a later one, is the
    model the CLI asks the Messages API with for that very turn."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann:
                await ann.initialize("ann")
                uri, chat = await create(ann, work, provider="claude")
                for seq, model in enumerate(("haiku", "opus", "sonnet"), start=1):
                    api.add(fake_api.text(f"on {model}"))
                    notes, reply = await _turn(ann, chat, f"turn {seq}", seq, model={"id": model})
                    assert reply == f"on {model}"
                    assert model in api.requests[-1]["model"], (model, api.requests[-1]["model"])
                    said = [action_of(n)["config"] for n in notes if is_action("session/configChanged", uri)(n)]
                    assert said in ([{"model": model}], []), said
            daemon.terminate()
            await daemon.wait()
