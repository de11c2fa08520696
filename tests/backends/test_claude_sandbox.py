"""A Claude preset's sandbox reaching the real bundled CLI (against the fake
Messages API): "on" never lets a shell command run outside a sandbox - where
the CLI cannot make one (no bubblewrap) it refuses to start, in its words -
"off" is no sandbox, and a session stored with the old "on" stays sandboxed
unless its preset says off."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

pytest.importorskip("claude_agent_sdk")

from ahpd.backends.claude.backend import ClaudeBackend  # noqa: E402
from ahpd.backends.port import BackendError  # noqa: E402
from ahpd.backends.registry import ConfigError, build_backends  # noqa: E402
from tests.backends.claude_fixtures import fake_api  # noqa: E402
from tests.backends.claude_fixtures.harness import conversation  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[fake_api.FakeAnthropic]:
    home = tmp_path / "home"
    home.mkdir()
    for name in fake_api.CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    with fake_api.FakeAnthropic().running() as fake:
        for name, value in fake_api.cli_env(fake.url, str(home)).items():
            monkeypatch.setenv(name, value)
        yield fake


async def _touch(api: fake_api.FakeAnthropic, backend: ClaudeBackend, cwd: Path, target: Path, **kwargs: Any) -> str:
    """Ask for ``touch <target>`` through Bash, allowed: a file outside the
    working folder, which a sandbox does not let a command write."""
    call = f"toolu_{target.stem}"
    async with conversation(backend, cwd, **kwargs) as (conv, rec):
        api.add(  # once the CLI runs: a CLI that refused to start asks nothing
            fake_api.tool_use(call, "Bash", {"command": f"touch {target}", "description": "Make a file"}),
            fake_api.text("Done."),
        )
        rec.on_permission = lambda req: "allow"
        await conv.prompt(f"make {target.name}")
    return repr([r for r in api.tool_results() if r["tool_use_id"] == call])


async def _sandboxed(
    api: fake_api.FakeAnthropic, backend: ClaudeBackend, cwd: Path, target: Path, **kwargs: Any
) -> None:
    """The command does not write ``target``: refused inside the sandbox, or
    - with no sandbox to be had here - the CLI does not start at all."""
    if shutil.which("bwrap") is None:
        refused: list[str] = []
        try:
            await _touch(api, backend, cwd, target, **kwargs)
        except* BackendError as group:
            refused = [e.message for e in group.exceptions if isinstance(e, BackendError)]
        assert refused and "sandbox required but unavailable" in refused[0].lower(), refused
    else:
        await _touch(api, backend, cwd, target, **kwargs)
    assert not await trio.Path(target).exists()


async def test_the_presets_sandbox_reaches_the_cli(api: fake_api.FakeAnthropic, tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    cwd.mkdir()
    said = await _touch(api, ClaudeBackend(sandbox="off"), cwd, tmp_path / "off.txt")
    assert await trio.Path(tmp_path / "off.txt").exists(), said
    await _sandboxed(api, ClaudeBackend(sandbox="on"), cwd, tmp_path / "on.txt")
    # A session stored while a window could switch it on: still on, under a preset that leaves it be...
    await _sandboxed(api, ClaudeBackend(), cwd, tmp_path / "stored.txt", config={"sandboxEnabled": "on"})
    # ... and off where the preset says off.
    said = await _touch(api, ClaudeBackend(sandbox="off"), cwd, tmp_path / "wins.txt", config={"sandboxEnabled": "on"})
    assert await trio.Path(tmp_path / "wins.txt").exists(), said


def test_a_claude_preset_is_configured_by_name(tmp_path: Path) -> None:
    config = {"agents": {"boxed": {"type": "claude", "sandbox": "on", "model": "haiku", "displayName": "Boxed"}}}
    backends = build_backends(config, [], tmp_path)
    boxed = backends["boxed"]
    assert isinstance(boxed, ClaudeBackend)
    assert (boxed.provider, boxed.sandbox, boxed.model, boxed.display_name) == ("boxed", "on", "haiku", "Boxed")
    assert isinstance(backends["claude"], ClaudeBackend) and backends["claude"].sandbox == "default"
    with pytest.raises(ConfigError, match=r"\[agents.loose\] sandbox is one of default, on, off, not 'maybe'"):
        build_backends({"agents": {"loose": {"type": "claude", "sandbox": "maybe"}}}, [], tmp_path)
