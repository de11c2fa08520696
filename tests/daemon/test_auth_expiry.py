"""Lent tokens that run out, and ``authenticate`` on a plain install, against a
real ``ahpd run`` and real WebSocket clients.

``auth/required`` with ``reason: 'expired'`` reaches the one connection whose
token ran out, at the moment it does. Whether a notification did *not*
reach a connection is read by order, never by waiting: a ``ping`` answered
after the moment it would have been sent shows everything sent before it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ahpd.ports import github as github_port

from .helpers import ROOT, Rpc, fits, rpc, running_daemon, wire_clean

ANTHROPIC = "https://api.anthropic.com"
GITHUB = github_port.RESOURCE


def _expired(note: dict) -> bool:
    return note.get("method") == "auth/required"


async def _expiry(client: Rpc) -> dict:
    while True:
        note = await client.next_note(timeout=60)
        if _expired(note):
            return note["params"]


async def _told_nothing(client: Rpc) -> None:
    """Nothing of ``auth/required`` reached ``client`` before now."""
    assert "result" in await client.call("ping", {"channel": ROOT})
    assert not [n for n in client.notes if _expired(n)], client.notes


async def _lend(client: Rpc, token: str, expires_in: int | None = None) -> None:
    params = {"channel": ROOT, "resource": ANTHROPIC, "token": token}
    if expires_in is not None:
        params["expiresIn"] = expires_in
    assert (await client.call("authenticate", params))["result"] == {}


async def test_a_token_that_runs_out_is_said_to_its_own_connection_only(tmp_path: Path) -> None:
    pytest.importorskip("claude_agent_sdk")  # the agent that advertises a resource
    from .test_claude_sessions import _env

    home = tmp_path / "home"
    home.mkdir()
    async with running_daemon(
        tmp_path / "d", "--sessions", "memory", "--wire", str(tmp_path / "wire.jsonl"), env=_env(None, str(home))
    ) as daemon:
        async with rpc(daemon.url) as a, rpc(daemon.url) as b:
            init = await a.initialize("a")
            await b.initialize("b")
            agents = init["snapshots"][0]["state"]["agents"]
            [record] = [
                r for agent in agents for r in agent.get("protectedResources") or [] if r["resource"] == ANTHROPIC
            ]

            await _lend(a, "sk-a", expires_in=1)
            await _lend(b, "sk-b")  # no expiry: it stays
            said = await _expiry(a)
            fits("/notifications/auth~1required", said)
            assert said == {"channel": ROOT, "resource": record, "reason": "expired"}
            await _told_nothing(b)

            # A token replaced before it runs out is not said to run out: a's
            # would have gone at one second, before b's at two.
            await _lend(a, "sk-a2", expires_in=1)
            await _lend(a, "sk-a3")
            await _lend(b, "sk-b2", expires_in=2)
            assert (await _expiry(b))["reason"] == "expired"
            await _told_nothing(a)

            # A resource nobody advertises is refused, naming the ones that are.
            refused = await a.call("authenticate", {"channel": ROOT, "resource": "https://example.com", "token": "x"})
            assert refused["error"]["code"] == -32602
            assert ANTHROPIC in refused["error"]["message"] and "https://example.com" in refused["error"]["message"]
            data = refused["error"]["data"]
            assert data["path"] == "$.resource"
            assert sorted(r["resource"] for r in data["resources"]) == [ANTHROPIC, GITHUB]
            assert record in data["resources"]
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(tmp_path / "wire.jsonl")


async def test_authenticate_on_a_plain_install_names_what_is_advertised(tmp_path: Path) -> None:
    """No Claude Code extra (a ``claude_agent_sdk`` that is not the installed
    distribution is not taken for it) and no users directory: only the demo
    agent, which protects nothing of its own."""
    shadow = tmp_path / "shadow" / "claude_agent_sdk"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    async with running_daemon(tmp_path / "d", "--sessions", "memory", env={"PYTHONPATH": str(shadow.parent)}) as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize("plain")
            agents = init["snapshots"][0]["state"]["agents"]
            assert [a["provider"] for a in agents] == ["demo"]
            # Only the host's own GitHub resource, which every agent advertises (the pull request beside a branch).
            assert [r["resource"] for a in agents for r in a.get("protectedResources") or []] == [GITHUB]
            refused = await client.call("authenticate", {"channel": ROOT, "resource": ANTHROPIC, "token": "sk"})
            error = refused["error"]
            assert error["code"] == -32602
            assert "not a protected resource any agent here advertises" in error["message"]
            assert ANTHROPIC in error["message"] and GITHUB in error["message"]
            assert error["data"] == {"path": "$.resource", "resources": [github_port.RECORD]}
            assert "result" in await client.call("ping", {"channel": ROOT})  # and it goes on serving
        daemon.terminate()
        assert await daemon.wait() == 0
