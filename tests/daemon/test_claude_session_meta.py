"""What a Claude session's state says about the CLI behind it: the model it
is on (``_meta['ahpd.model']``). The real bundled CLI against the fake
Messages API, whose requests say which model the CLI asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from tests.backends.claude_fixtures import fake_api  # noqa: E402

from .helpers import action_of, create, daemon_in_process, is_action, rpc, until  # noqa: E402
from .test_claude_sessions import _env  # noqa: E402
from .test_session_config import _applied, _turn  # noqa: E402

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
                        and n["params"]["session"] == uri
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
