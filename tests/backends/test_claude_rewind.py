"""A Claude conversation rewound to an earlier point: the real bundled CLI
against the fake Messages API, offline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from ahpd.backends.port import BackendError  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402
from tests.backends.claude_fixtures.harness import conversation  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_api.FakeAnthropic]:
    home = tmp_path / "home"
    home.mkdir()
    for name in fake_api.CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    with fake_api.FakeAnthropic().running() as fake:
        for name, value in fake_api.cli_env(fake.url, str(home)).items():
            monkeypatch.setenv(name, value)
        yield fake


async def test_a_rewind_drops_what_came_after_and_a_later_resume_keeps_it_dropped(
    api: fake_api.FakeAnthropic,
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    api.add(
        fake_api.text("ANSWER-ONE"),
        fake_api.text("ANSWER-TWO"),
        fake_api.text("ANSWER-THREE"),
        fake_api.text("ANSWER-FOUR"),
    )
    backend = ClaudeBackend()
    async with conversation(backend, cwd) as (conv, _):
        assert conv.rewind_point is None  # nothing said yet
        await conv.prompt("PROMPT-ONE")
        kept = conv.rewind_point
        assert kept is not None
        await conv.prompt("PROMPT-TWO")
        assert conv.rewind_point not in (None, kept)
        await conv.rewind(kept)
        assert conv.rewind_point == kept
        await conv.prompt("PROMPT-THREE")
        backend_id = conv.backend_id
    assert fake_api.prompts(api.requests[2]) == ["PROMPT-ONE", "PROMPT-THREE"]
    # The session id is kept: resuming it later reaches the rewound conversation.
    async with conversation(backend, cwd, resume_id=backend_id) as (conv, _):
        assert conv.backend_id == backend_id
        await conv.prompt("PROMPT-FOUR")
    assert fake_api.prompts(api.requests[3]) == ["PROMPT-ONE", "PROMPT-THREE", "PROMPT-FOUR"]
    assert "ANSWER-TWO" not in repr(api.requests[3]["messages"])


async def test_a_rewind_to_the_start_begins_again_under_the_same_id(
    api: fake_api.FakeAnthropic,
    tmp_path: Path,
) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    api.add(fake_api.text("ANSWER-ONE"), fake_api.text("ANSWER-AGAIN"))
    async with conversation(ClaudeBackend(), cwd) as (conv, _):
        backend_id = conv.backend_id
        await conv.prompt("PROMPT-ONE")
        await conv.rewind(None)
        assert conv.backend_id == backend_id and conv.rewind_point is None
        outcome = await conv.prompt("PROMPT-AGAIN")
    assert outcome.stop_reason == "end_turn"
    assert fake_api.prompts(api.requests[-1]) == ["PROMPT-AGAIN"]


async def test_no_rewind_while_a_turn_runs(api: fake_api.FakeAnthropic, tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    api.add(fake_api.text("slow", hold_after=3))
    async with conversation(ClaudeBackend(), cwd) as (conv, _):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conv.prompt, "PROMPT-ONE")
            await trio.to_thread.run_sync(api.holding.wait, abandon_on_cancel=True)  # the fake API holds it
            with pytest.raises(BackendError, match="a turn is running"):
                await conv.rewind(None)
            api.release()


async def test_the_transcript_names_each_turns_point_and_a_resumed_cli_is_rewound_there_at_once(
    api: fake_api.FakeAnthropic,
    tmp_path: Path,
) -> None:
    """A past turn read off the transcript has the point the live turn
    had, and a CLI resumed and rewound before it ever read a message (the
    next turn after a daemon restart) drops what came after."""
    cwd = tmp_path / "work"
    cwd.mkdir()
    api.add(fake_api.text("ANSWER-ONE"), fake_api.text("ANSWER-TWO"), fake_api.text("ANSWER-THREE"))
    backend = ClaudeBackend()
    async with conversation(backend, cwd) as (conv, _):
        await conv.prompt("PROMPT-ONE")
        one = conv.rewind_point
        await conv.prompt("PROMPT-TWO")
        two = conv.rewind_point
        backend_id = conv.backend_id
    history = await backend.read_history(backend_id)
    assert [(h.text, h.point) for h in history] == [("PROMPT-ONE", one), ("PROMPT-TWO", two)]
    async with conversation(backend, cwd, resume_id=backend_id) as (conv, _):
        await conv.rewind(history[0].point)
        await conv.prompt("PROMPT-THREE")
    assert fake_api.prompts(api.requests[-1]) == ["PROMPT-ONE", "PROMPT-THREE"]
    assert "ANSWER-TWO" not in repr(api.requests[-1]["messages"])
