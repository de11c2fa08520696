"""``authenticate``: tokens lent per connection for advertised resources."""

from __future__ import annotations

import trio

from ahpd.host.kernel.auth import token_for
from ahpd.host.assembly import Host

from ..harness import connect

ANTHROPIC = "https://api.anthropic.com"


class Advertising:
    """A backend description that protects a resource (no agent is started)."""

    provider = "guarded"

    def agent_info(self) -> dict:
        return {
            "provider": "guarded",
            "displayName": "G",
            "description": "d",
            "models": [],
            "protectedResources": [{"resource": ANTHROPIC, "required": False}],
        }


async def test_a_token_is_kept_per_connection_and_can_be_taken_back(autojump_clock) -> None:
    host = Host(backends={"guarded": Advertising()})
    async with trio.open_nursery() as nursery:
        a = await connect(nursery, host, "a")
        b = await connect(nursery, host, "b")
        await a.initialize("a")
        await b.initialize("b")
        reply = await a.call("authenticate", {"resource": ANTHROPIC, "token": "sk-a", "expiresIn": 60})
        assert reply["result"] == {}
        [peer_a] = [p for p in host.peers if p.client_id == "a"]
        [peer_b] = [p for p in host.peers if p.client_id == "b"]
        assert token_for(peer_a, ANTHROPIC) == "sk-a"
        assert token_for(peer_b, ANTHROPIC) is None  # never shared
        await trio.sleep(61)
        assert token_for(peer_a, ANTHROPIC) is None  # expired: neither spent nor kept
        await a.call("authenticate", {"resource": ANTHROPIC, "token": "sk-a2"})
        assert token_for(peer_a, ANTHROPIC) == "sk-a2"
        await a.call("authenticate", {"resource": ANTHROPIC, "token": ""})
        assert token_for(peer_a, ANTHROPIC) is None  # signed out
        bad = await a.call("authenticate", {"resource": "https://example.com", "token": "x"})
        assert bad["error"]["code"] == -32602 and bad["error"]["data"]["path"] == "$.resource"
        nursery.cancel_scope.cancel()


class Unguarded:
    """No resource at all: a plain install's agents."""

    provider = "plain"

    def agent_info(self) -> dict:
        return {"provider": "plain", "displayName": "P", "description": "d", "models": []}


async def test_a_token_that_runs_out_is_dropped_and_said_to_its_lender_only(autojump_clock) -> None:
    host = Host(backends={"guarded": Advertising()})
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        a = await connect(nursery, host, "a")
        b = await connect(nursery, host, "b")
        c = await connect(nursery, host, "c")
        for client, name in ((a, "a"), (b, "b"), (c, "c")):
            await client.initialize(name)
        await a.call(
            "authenticate", {"channel": "ahp-root://", "resource": ANTHROPIC, "token": "sk-a", "expiresIn": 60}
        )
        await b.call(
            "authenticate", {"channel": "ahp-root://", "resource": ANTHROPIC, "token": "sk-b", "expiresIn": 30}
        )
        await b.call("authenticate", {"channel": "ahp-root://", "resource": ANTHROPIC, "token": "sk-b2"})  # replaced
        await c.call(
            "authenticate", {"channel": "ahp-root://", "resource": ANTHROPIC, "token": "sk-c", "expiresIn": 60}
        )
        [peer_a, peer_b, peer_c] = sorted(host.peers, key=lambda p: p.client_id)
        c.close()  # gone: its clock goes with it
        await trio.sleep(59)
        assert [n for n in a.pending() + b.pending() if n.get("method") == "auth/required"] == []
        assert peer_c.token_clocks == {}  # stopped when it went, not left to run out
        await trio.sleep(2)
        [told] = [n for n in a.pending() if n.get("method") == "auth/required"]
        assert told["params"] == {
            "channel": "ahp-root://",
            "reason": "expired",
            "resource": {"resource": ANTHROPIC, "required": False},
        }
        assert token_for(peer_a, ANTHROPIC) is None and peer_a.tokens == {} and peer_a.token_clocks == {}
        assert [n for n in b.pending() if n.get("method") == "auth/required"] == []
        assert token_for(peer_b, ANTHROPIC) == "sk-b2"  # no expiry: it stays
        nursery.cancel_scope.cancel()


async def test_authenticate_where_nothing_is_advertised_says_so() -> None:
    host = Host(backends={"plain": Unguarded()})
    async with trio.open_nursery() as nursery:
        a = await connect(nursery, host, "a")
        await a.initialize("a")
        bad = await a.call("authenticate", {"channel": "ahp-root://", "resource": ANTHROPIC, "token": "x"})
        assert bad["error"]["code"] == -32602
        assert "no agent on this host advertises one" in bad["error"]["message"]
        assert bad["error"]["data"] == {"path": "$.resource", "resources": []}
        nursery.cancel_scope.cancel()
