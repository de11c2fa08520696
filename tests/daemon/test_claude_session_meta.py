"""What a Claude session says about the CLI behind it and hands to it: the
model it is on (``_meta['ahpd.model']``) and the shell init scripts sourced
before its commands. The real bundled CLI against the fake Messages API,
whose requests say which model the CLI asked for and what its shell answered."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.host.sessions.store import _name  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import action_of, create, daemon_in_process, dispatch, is_action, listed_as, rpc, start_turn, until  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402
from .test_session_config import _applied, _refused, _turn  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


async def test_a_claude_session_says_the_model_it_is_on(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann, rpc(daemon.url) as bob:
                await ann.initialize("ann")
                await bob.initialize("bob")
                await bob.call("subscribe", {"channel": "ahp-root://"})

                # Nobody named a model: the session says the one the CLI chose,
                # which is the one it then asks the API for.
                uri, chat = await create(ann, work, provider="claude")
                await bob.call("subscribe", {"channel": uri})
                api.add(fake_api.text("one"))
                await _turn(ann, chat, "hello", 1)
                asked = api.requests[-1]["model"]
                state = (await ann.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["_meta"]["ahpd.model"] == asked
                heard = await until(bob, is_action("session/metaChanged", uri))
                assert action_of(heard[-1])["_meta"]["ahpd.model"] == asked
                # The root's row carries it too.
                row = await until(
                    bob,
                    lambda n: (
                        n.get("method") == "root/sessionSummaryChanged"
                        and n["params"]["session"] == listed_as(uri, "claude")
                        and "ahpd.model" in (n["params"]["changes"].get("_meta") or {})
                    ),
                )
                assert row[-1]["params"]["changes"]["_meta"]["ahpd.model"] == asked

                # Switched live: said at once, before any turn, to everyone.
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"model": "haiku"}}, 2)
                heard = await until(bob, is_action("session/metaChanged", uri))
                assert action_of(heard[-1])["_meta"]["ahpd.model"] == "haiku"
                api.add(fake_api.text("two"))
                await _turn(ann, chat, "again", 3)
                assert "haiku" in api.requests[-1]["model"]
                state = (await ann.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["_meta"]["ahpd.model"] == "haiku"

                # A session made with a model says it once its CLI runs.
                other, other_chat = await create(ann, work, provider="claude", config={"model": "sonnet"})
                api.add(fake_api.text("three"))
                await _turn(ann, other_chat, "hi", 4)
                assert "sonnet" in api.requests[-1]["model"]
                state = (await ann.call("subscribe", {"channel": other}))["result"]["snapshot"]["state"]
                assert state["_meta"]["ahpd.model"] == "sonnet"
        daemon.terminate()
        await daemon.wait()


def _files_holding(script: str) -> list[Path]:
    """The shell init files (in the temporary folder) that hold ``script``."""
    return [p for p in Path(tempfile.gettempdir()).glob("ahpd-shell-init-*.sh") if p.read_text() == script]


def _said(api: fake_api.FakeAnthropic, call_id: str) -> str:
    """What the CLI's shell tool answered for ``call_id``, as the model was shown it."""
    block = next(b for b in api.tool_results() if b.get("tool_use_id") == call_id)
    content = block.get("content")
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return str(content)


async def test_the_bash_shell_init_script_runs_before_each_claude_command(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    # Told apart from every other test's by the folder named in it.
    script = f"export AHPD_FOO=from-the-script  # {tmp_path}\necho noise-on-stderr >&2\nreturn 3\n"
    command = {"command": 'echo "foo=$AHPD_FOO"', "description": "Say foo"}
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann:
                await ann.initialize("ann")
                await _applied(
                    ann, "ahp-root://", {"type": "root/configChanged", "config": {"globalAutoApproveEnabled": True}}, 1
                )
                uri, chat = await create(ann, work, provider="claude")
                state = (await ann.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                prop = state["config"]["schema"]["properties"]["shellInitScripts"]
                assert prop["readOnly"] is True and prop["sessionMutable"] is True
                scripts = [{"shell": "bash", "script": script}, {"shell": "powershell", "script": "$x = 1"}]
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"shellInitScripts": scripts}}, 2)

                # Sourced first: what it exported is there, its stderr is not, its status is said.
                api.add(fake_api.tool_use("toolu_one", "Bash", command), fake_api.text("ok"))
                notes, _ = await _turn(ann, chat, "run it", 3)
                said = _said(api, "toolu_one")
                assert "foo=from-the-script" in said and "status 3" in said and "noise" not in said
                # The person is shown the command the model wrote.
                ready = [action_of(n) for n in notes if is_action("chat/toolCallReady", chat)(n)]
                assert [json.loads(r["toolInput"])["command"] for r in ready] == ['echo "foo=$AHPD_FOO"']
                [init] = await trio.to_thread.run_sync(_files_holding, script)

                # Rewritten on a change, live.
                scripts = [{"shell": "bash", "script": "export AHPD_FOO=second\n"}]
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"shellInitScripts": scripts}}, 4)
                api.add(fake_api.tool_use("toolu_two", "Bash", command), fake_api.text("ok"))
                await _turn(ann, chat, "again", 5)
                said = _said(api, "toolu_two")
                assert "foo=second" in said and "status" not in said

                # A PowerShell entry is kept and never sourced.
                scripts = [{"shell": "powershell", "script": "$env:AHPD_FOO = 'ps'"}]
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"shellInitScripts": scripts}}, 6)
                assert not await trio.to_thread.run_sync(init.exists)
                api.add(fake_api.tool_use("toolu_three", "Bash", command), fake_api.text("ok"))
                await _turn(ann, chat, "once more", 7)
                assert "foo=\n" in _said(api, "toolu_three") + "\n" and "ps" not in _said(api, "toolu_three")
                state = (await ann.call("subscribe", {"channel": uri}))["result"]["snapshot"]["state"]
                assert state["config"]["values"]["shellInitScripts"] == scripts

                # A list of the wrong shape is refused by name, and the one in force stays.
                reason = await _refused(
                    ann, uri, {"type": "session/configChanged", "config": {"shellInitScripts": [{"shell": "zsh"}]}}, 8
                )
                assert "shellInitScripts" in reason
                await _applied(ann, uri, {"type": "session/configChanged", "config": {"shellInitScripts": []}}, 9)
        daemon.terminate()
        await daemon.wait()


async def test_a_session_stored_with_the_sandbox_on_stays_sandboxed(tmp_path: Path) -> None:
    """A session a window switched the sandbox on for, under the reference
    host's key, still runs sandboxed after an upgrade that declares no such
    key: where the CLI cannot make a sandbox, it refuses to start the turn."""
    home, work, data = tmp_path / "home", tmp_path / "work", tmp_path / "d"
    home.mkdir()
    work.mkdir()
    with fake_api.FakeAnthropic().running() as api:
        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann:
                await ann.initialize("ann")
                uri, chat = await create(ann, work, provider="claude")
            daemon.terminate()
            await daemon.wait()
        head_file = data / "sessions" / _name(listed_as(uri, "claude")) / "session.json"
        head = json.loads(await trio.Path(head_file).read_text())
        head["config"]["values"]["sandboxEnabled"] = "on"
        await trio.Path(head_file).write_text(json.dumps(head))
        async with daemon_in_process(data, env=_env(api.url, str(home))) as daemon:
            async with rpc(daemon.url) as ann:
                await ann.initialize("ann")
                await ann.call("subscribe", {"channel": uri}, timeout=60)
                await ann.call("subscribe", {"channel": chat}, timeout=60)
                await dispatch(ann, chat, start_turn("touch something"), 1)
                notes = await until(
                    ann,
                    lambda n: (
                        (action_of(n) or {}).get("type") in ("chat/turnComplete", "chat/error")
                        and n["params"]["channel"] == chat
                    ),
                )
                ended = action_of(notes[-1])
                if shutil.which("bwrap") is None:  # no sandbox to be had here: the CLI's refusal, said
                    assert ended["type"] == "chat/error", ended
                    assert "sandbox required but unavailable" in ended["part"]["error"]["message"].lower()
                    assert api.requests == []  # no model was asked
                else:
                    assert ended["type"] == "chat/turnComplete", ended
            daemon.terminate()
            await daemon.wait()
