"""Session config, working directories and the auto-approve setting, acted
on: through a real daemon, two real WebSocket clients and the demo agent,
whose ``settings`` trigger word says what it runs with."""

from __future__ import annotations

import uuid
from typing import Any


from .helpers import (
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    fits,
    is_action,
    rpc,
    start_turn,
    until,
    wire_clean,
)

DEMO_SETTINGS = "Settings: model {model}, thinking {effort}, mode {mode}, cwd {cwd}, additional directories {extra}."


async def _turn(client: Rpc, chat: str, text: str, seq: int, **message: Any) -> tuple[list[dict], str]:
    """Run a turn; the notes up to its end and its reply."""
    action = start_turn(text)
    action["message"].update(message)
    await dispatch(client, chat, action, seq)
    notes = await until(
        client,
        lambda n: (
            (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error") and n["params"]["channel"] == chat
        ),
    )
    assert action_of(notes[-1])["type"] == "chat/turnComplete", action_of(notes[-1])
    state = (await client.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
    turn = state["turns"][-1]
    assert turn["id"] == action["turnId"]
    return notes, "".join(p.get("content", "") for p in turn["responseParts"] if p["kind"] == "markdown")


async def _refused(client: Rpc, channel: str, action: dict, seq: int) -> str:
    await dispatch(client, channel, action, seq)
    notes = await until(client, lambda n: n.get("params", {}).get("origin", {}).get("clientSeq") == seq)
    assert "rejectionReason" in notes[-1]["params"], notes[-1]
    return notes[-1]["params"]["rejectionReason"]


async def _applied(client: Rpc, channel: str, action: dict, seq: int) -> dict:
    await dispatch(client, channel, action, seq)
    notes = await until(client, lambda n: n.get("params", {}).get("origin", {}).get("clientSeq") == seq)
    assert "rejectionReason" not in notes[-1]["params"], notes[-1]["params"]["rejectionReason"]
    return notes[-1]["params"]


async def _quiet(client: Rpc) -> list[dict]:
    """What reached ``client`` before its answer to a ping (to check it heard
    nothing): once the sender has its answer, whatever the host sent others
    for that action is in their queues, ahead of any later answer."""
    await client.call("ping", {"channel": "ahp-root://"})
    heard, client.notes[:] = list(client.notes), []
    return heard


async def test_config_reaches_the_agent_and_is_refused_by_name(tmp_path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            init = await ann.initialize("ann")
            await bob.initialize("bob")
            demo = next(a for a in init["snapshots"][0]["state"]["agents"] if a["provider"] == "demo")
            assert demo["capabilities"]["multipleWorkingDirectories"] == {
                "immutablePrimary": True,
                "primaryReplacement": True,
            }

            # resolveSessionConfig: the agent's own properties, iteratively.
            resolved = (
                await ann.call(
                    "resolveSessionConfig",
                    {
                        "channel": "ahp-root://",
                        "provider": "demo",
                        "workingDirectory": work.as_uri(),
                        "config": {"model": "demo-deep"},
                    },
                )
            )["result"]
            fits("/commands/resolveSessionConfig/result", resolved)
            props = resolved["schema"]["properties"]
            assert props["model"]["enum"] == ["demo-swift", "demo-deep"]
            assert props["effortLevel"]["enum"] == ["low", "medium", "high"]
            assert props["mode"]["enum"] == ["default", "auto"]
            assert all(p["sessionMutable"] for p in props.values())
            assert resolved["values"] == {"model": "demo-deep", "effortLevel": "medium", "mode": "default"}
            again = (
                await ann.call(
                    "resolveSessionConfig",
                    {
                        "channel": "ahp-root://",
                        "provider": "demo",
                        "config": {**resolved["values"], "effortLevel": "high", "model": "no-such-model"},
                    },
                )
            )["result"]
            assert again["values"] == {"model": "demo-swift", "effortLevel": "high", "mode": "default"}

            uri, chat = await create(ann, work, provider="demo", config={"effortLevel": "low"})
            await bob.call("subscribe", {"channel": uri})
            await bob.call("subscribe", {"channel": chat})
            state = (await ann.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["config"]["values"] == {"model": "demo-swift", "effortLevel": "low", "mode": "default"}
            assert state["workingDirectories"] == [work.as_uri()]

            _, reply = await _turn(ann, chat, "settings please", 1)
            assert (
                DEMO_SETTINGS.format(model="demo-swift", effort="low", mode="default", cwd=work, extra="none") in reply
            )

            # A change reaches the running agent, and every subscriber sees it.
            change = {"type": "session/configChanged", "config": {"model": "demo-deep", "effortLevel": "high"}}
            await _applied(ann, uri, change, 2)
            seen = await until(bob, is_action("session/configChanged", uri))
            assert action_of(seen[-1]) == change
            _, reply = await _turn(ann, chat, "settings now", 3)
            assert "model demo-deep, thinking high, mode default" in reply

            # Refused by name: a key the agent does not take, a value it does not offer.
            reason = await _refused(ann, uri, {"type": "session/configChanged", "config": {"colour": "red"}}, 4)
            assert "takes no 'colour' setting" in reason and "model" in reason
            reason = await _refused(ann, uri, {"type": "session/configChanged", "config": {"model": "gpt-9"}}, 5)
            assert "offers no model 'gpt-9'" in reason and "demo-swift" in reason
            # Part of a change: the rest applies, the bad key is named.
            await dispatch(
                ann, uri, {"type": "session/configChanged", "config": {"mode": "auto", "effortLevel": "extreme"}}, 6
            )
            notes = await until(ann, lambda n: "rejectionReason" in n.get("params", {}))
            assert "offers no thinking 'extreme'" in notes[-1]["params"]["rejectionReason"]
            applied = [
                action_of(n)
                for n in notes
                if is_action("session/configChanged", uri)(n)
                and "rejectionReason" not in n["params"]
                and n["params"].get("origin", {}).get("clientSeq") == 6
            ]
            assert applied == [{"type": "session/configChanged", "config": {"mode": "auto"}}]
            heard = await until(bob, is_action("session/configChanged", uri))
            assert action_of(heard[-1])["config"] == {"mode": "auto"}
            assert not any("rejectionReason" in n.get("params", {}) for n in await _quiet(bob))

            # The agent in auto mode asks nothing: the mode reached it.
            notes, reply = await _turn(ann, chat, "use the permission tool", 7)
            assert "ran without asking (auto mode)" in reply
            assert not any(is_action("session/inputNeededSet")(n) for n in notes)

            # The agent moves its own mode: said as session/configChanged to everyone.
            notes, _ = await _turn(ann, chat, "mode default then settings", 8)
            moved = [action_of(n) for n in notes if is_action("session/configChanged", uri)(n)]
            assert moved == [{"type": "session/configChanged", "config": {"mode": "default"}}]
            heard = await until(bob, is_action("session/configChanged", uri))
            assert action_of(heard[-1])["config"] == {"mode": "default"}

            # A turn's message.model and thinking level: for this turn and the next.
            notes, reply = await _turn(
                ann, chat, "settings", 9, model={"id": "demo-swift", "config": {"thinkingLevel": "low"}}
            )
            said = [action_of(n) for n in notes if is_action("session/configChanged", uri)(n)]
            assert said == [{"type": "session/configChanged", "config": {"model": "demo-swift", "effortLevel": "low"}}]
            assert "model demo-swift, thinking low, mode default" in reply
            state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["config"]["values"] == {"model": "demo-swift", "effortLevel": "low", "mode": "default"}
            # The model alone (issue 26, row 12): the turn runs on it.
            notes, reply = await _turn(ann, chat, "settings", 10, model={"id": "demo-deep"})
            said = [action_of(n) for n in notes if is_action("session/configChanged", uri)(n)]
            assert said == [{"type": "session/configChanged", "config": {"model": "demo-deep"}}]
            assert "model demo-deep," in reply, reply
        daemon.terminate()
        await daemon.wait()


async def test_working_directories_restart_the_agent_resumed(tmp_path) -> None:
    work, extra, other, moved = (tmp_path / n for n in ("work", "extra", "other", "moved"))
    for folder in (work, extra, other, moved):
        folder.mkdir()
    data = tmp_path / "d"
    async with daemon_in_process(data, "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await ann.initialize("ann")
            await bob.initialize("bob")
            uri, chat = await create(
                ann, work, channel=f"demo:/{uuid.uuid4()}"
            )  # named as the host lists it: this test reaches its objects
            await bob.call("subscribe", {"channel": uri})
            _, reply = await _turn(ann, chat, "remember me; settings", 1)
            assert f"cwd {work}, additional directories none." in reply
            conversations = sorted((data / "demo-agent").glob("*.json"))
            assert len(conversations) == 1

            set_extra = {"type": "session/workingDirectorySet", "directory": extra.as_uri()}
            await _applied(ann, uri, set_extra, 2)
            heard = await until(bob, is_action("session/workingDirectorySet", uri))
            assert action_of(heard[-1]) == set_extra
            row = await until(
                bob,
                lambda n: (
                    n.get("method") == "root/sessionSummaryChanged" and "workingDirectories" in n["params"]["changes"]
                ),
            )
            assert row[-1]["params"]["changes"]["workingDirectories"] == [work.as_uri(), extra.as_uri()]
            _, reply = await _turn(ann, chat, "settings", 3)
            assert f"cwd {work}, additional directories {extra}." in reply
            # Resumed, not started afresh: still the one conversation, which remembers.
            assert sorted((data / "demo-agent").glob("*.json")) == conversations

            reason = await _refused(
                ann, uri, {"type": "session/workingDirectoryRemoved", "directory": work.as_uri()}, 4
            )
            assert "index 0" in reason and "never removed" in reason
            reason = await _refused(
                ann, uri, {"type": "session/workingDirectorySet", "directory": (tmp_path / "nowhere").as_uri()}, 5
            )
            assert "does not exist" in reason
            reason = await _refused(
                ann,
                uri,
                {
                    "type": "session/workingDirectoryReplaced",
                    "directory": other.as_uri(),
                    "replacement": moved.as_uri(),
                },
                6,
            )
            assert "is not one of the session's working directories" in reason

            # A chat holds a subset of its session's, never more, never without the primary.
            reason = await _refused(ann, chat, {"type": "chat/workingDirectorySet", "directory": other.as_uri()}, 7)
            assert "a chat holds a subset of its session's" in reason
            reason = await _refused(ann, chat, {"type": "chat/workingDirectoryRemoved", "directory": work.as_uri()}, 8)
            assert "primary" in reason

            # Index 0 moves only by replacement, and the agent follows it, resumed.
            replace = {
                "type": "session/workingDirectoryReplaced",
                "directory": work.as_uri(),
                "replacement": moved.as_uri(),
            }
            await _applied(ann, uri, replace, 9)
            heard = await until(bob, is_action("session/workingDirectoryReplaced", uri))
            assert action_of(heard[-1]) == replace
            state = (await bob.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
            assert state["workingDirectories"] == [moved.as_uri(), extra.as_uri()]
            _, reply = await _turn(ann, chat, "settings", 10)
            assert f"cwd {moved}, additional directories {extra}." in reply
            assert sorted((data / "demo-agent").glob("*.json")) == conversations

            removed = {"type": "session/workingDirectoryRemoved", "directory": extra.as_uri()}
            await _applied(ann, uri, removed, 11)
            _, reply = await _turn(ann, chat, "settings", 12)
            assert f"cwd {moved}, additional directories none." in reply

            # Not while a turn runs: refused, saying so, and nobody else hears of it.
            slow = start_turn("slow")
            await dispatch(ann, chat, slow, 13)
            await until(ann, is_action("chat/delta", chat))
            reason = await _refused(ann, uri, set_extra, 14)
            assert "a turn is running" in reason and "-32004" in reason
            assert not any(is_action("session/workingDirectorySet")(n) for n in await _quiet(bob))
            running = daemon.host.sessions.chat_owner[chat].turn
            await dispatch(ann, chat, {"type": "chat/turnCancelled", "turnId": slow["turnId"], "duration": 0}, 15)
            await until(ann, is_action("chat/turnCancelled", chat))
            # Cancelled is said at once; the turn is over for the host once its agent
            # has stopped the prompt (until then the directories stay as they are).
            await running.done.wait()

            # A side chat narrowed to the primary: its agent is granted nothing more.
            side = f"ahp-chat:/{uuid.uuid4()}"
            await ann.call("createChat", {"channel": uri, "chat": side})
            await ann.call("subscribe", {"channel": side})
            await _applied(ann, uri, set_extra, 16)
            await _applied(ann, side, {"type": "chat/workingDirectorySet", "directory": moved.as_uri()}, 17)
            _, reply = await _turn(ann, side, "settings", 18)
            assert f"cwd {moved}, additional directories none." in reply
            await _applied(ann, side, {"type": "chat/workingDirectorySet", "directory": extra.as_uri()}, 19)
            _, reply = await _turn(ann, side, "settings", 20)
            assert f"cwd {moved}, additional directories {extra}." in reply
            await _applied(ann, side, {"type": "chat/workingDirectoryRemoved", "directory": extra.as_uri()}, 21)
            _, reply = await _turn(ann, side, "settings", 22)
            assert f"cwd {moved}, additional directories none." in reply
        daemon.terminate()
        await daemon.wait()


async def test_global_auto_approve_answers_by_the_setting(tmp_path) -> None:
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory") as daemon:
        async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
            await ann.initialize("ann")
            await bob.initialize("bob")
            uri, chat = await create(ann, tmp_path)
            await bob.call("subscribe", {"channel": uri})
            await bob.call("subscribe", {"channel": chat})
            await _applied(
                ann, "ahp-root://", {"type": "root/configChanged", "config": {"globalAutoApproveEnabled": True}}, 1
            )
            notes, reply = await _turn(ann, chat, "use the tool", 2)
            assert "ran with your permission" in reply
            assert not any(is_action("session/inputNeededSet")(n) for n in notes)
            ready = [action_of(n) for n in notes if is_action("chat/toolCallReady", chat)(n)]
            assert [r["confirmed"] for r in ready] == ["setting"]
            heard = await until(bob, is_action("chat/turnComplete", chat))
            assert [action_of(n)["confirmed"] for n in heard if is_action("chat/toolCallReady")(n)] == ["setting"]
            state = (await bob.call("subscribe", {"channel": chat}))["result"]["snapshot"]["state"]
            call = next(p["toolCall"] for p in state["turns"][-1]["responseParts"] if p["kind"] == "toolCall")
            assert call["confirmed"] == "setting" and call["status"] == "completed"

            # Off again: the person is asked.
            await _applied(
                ann, "ahp-root://", {"type": "root/configChanged", "config": {"globalAutoApproveEnabled": False}}, 3
            )
            action = start_turn("use the tool")
            await dispatch(ann, chat, action, 4)
            asked = await until(ann, is_action("session/inputNeededSet", uri))
            call_id = action_of(asked[-1])["request"]["toolCall"]["toolCallId"]
            await dispatch(
                ann,
                chat,
                {
                    "type": "chat/toolCallConfirmed",
                    "turnId": action["turnId"],
                    "toolCallId": call_id,
                    "approved": True,
                    "confirmed": "user-action",
                },
                5,
            )
            await until(ann, is_action("chat/turnComplete", chat))
        daemon.terminate()
        await daemon.wait()


async def test_a_capture_of_config_and_directories_is_wire_check_clean(tmp_path) -> None:
    work, extra = tmp_path / "work", tmp_path / "extra"
    work.mkdir()
    extra.mkdir()
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as ann:
            await ann.initialize("ann")
            await ann.call(
                "resolveSessionConfig", {"channel": "ahp-root://", "provider": "demo", "config": {"model": "demo-deep"}}
            )
            uri, chat = await create(ann, work, config={"model": "demo-deep"})
            await _applied(
                ann, "ahp-root://", {"type": "root/configChanged", "config": {"globalAutoApproveEnabled": True}}, 1
            )
            await _applied(ann, uri, {"type": "session/configChanged", "config": {"effortLevel": "high"}}, 2)
            await _refused(ann, uri, {"type": "session/configChanged", "config": {"model": "gpt-9"}}, 3)
            await _applied(ann, uri, {"type": "session/workingDirectorySet", "directory": extra.as_uri()}, 4)
            await _refused(ann, uri, {"type": "session/workingDirectoryRemoved", "directory": work.as_uri()}, 5)
            notes, reply = await _turn(
                ann,
                chat,
                "mode auto, settings and the tool",
                6,
                model={"id": "demo-swift", "config": {"thinkingLevel": "low"}},
            )
            assert f"additional directories {extra}" in reply
            assert any(is_action("session/configChanged", uri)(n) for n in notes)
        daemon.terminate()
        await daemon.wait()
    wire_clean(capture)
