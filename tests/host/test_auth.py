"""``authenticate``: tokens lent per connection for advertised resources."""

from __future__ import annotations

import trio

from ahpd.host.auth import token_for
from ahpd.host.host import Host

from .harness import connect

ANTHROPIC = "https://api.anthropic.com"


class Advertising:
    """A backend description that protects a resource (no agent is started)."""

    provider = "guarded"

    def agent_info(self) -> dict:
        return {"provider": "guarded", "displayName": "G", "description": "d", "models": [],
                "protectedResources": [{"resource": ANTHROPIC, "required": False}]}


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
