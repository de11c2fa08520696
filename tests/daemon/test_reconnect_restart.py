"""A client that comes back after the daemon restarted: what it is answered
must bring its state to the host's, though the restarted host emitted no
action for what the restart changed (its terminals are gone, its turns were
ended). A replay of nothing would leave the client holding the old state;
the host answers snapshots instead. Found by the web console's browser test,
whose page kept a dead terminal listed after a restart."""

from __future__ import annotations

from typing import Any

import trio
from trio_websocket import ConnectionClosed

from ahpd import state as reducers

from .helpers import ROOT, action_of, is_action, rpc, running_daemon, until


async def test_a_client_back_after_a_restart_is_brought_to_the_hosts_state(tmp_path) -> None:
    data = tmp_path / "d"
    with trio.fail_after(120):
        async with running_daemon(data, "--no-web") as daemon:
            async with rpc(daemon.url) as client:
                held: dict[str, Any] = (await client.initialize("back"))["snapshots"][0]["state"]
                reply = await client.call(
                    "createTerminal", {"channel": "ahp-terminal:/t", "claim": {"kind": "client", "clientId": "back"}}
                )
                assert reply.get("result", "missing") is None, reply
                notes = await until(client, is_action("root/terminalsChanged", ROOT))
                assert [t["resource"] for t in notes[-1]["params"]["action"]["terminals"]] == ["ahp-terminal:/t"]
                # its shell ends: the terminal stays listed, exited, and nothing more moves
                await client.call("subscribe", {"channel": "ahp-terminal:/t"})
                exit_shell = {"type": "terminal/input", "data": "exit\r"}
                await client.notify(
                    "dispatchAction", {"channel": "ahp-terminal:/t", "clientSeq": 1, "action": exit_shell}
                )
                notes += await until(client, is_action("terminal/exited", "ahp-terminal:/t"))
                # the client hears everything up to the daemon's end, as a page left open does
                daemon.terminate()
                try:
                    while True:
                        notes.append(await client.next_note())
                except ConnectionClosed:
                    pass
                last_seen = 0
                for note in notes:
                    if (action := action_of(note)) is not None:
                        last_seen = max(last_seen, note["params"]["serverSeq"])  # the newest it heard, any channel
                        if note["params"]["channel"] == ROOT:
                            held = reducers.reduce("root", held, action)
            assert await daemon.wait() == 0
        async with running_daemon(data, "--no-web") as daemon:
            async with rpc(daemon.url) as client:
                answer = (
                    await client.call(
                        "reconnect", {"clientId": "back", "lastSeenServerSeq": last_seen, "subscriptions": [ROOT]}
                    )
                )["result"]
                if answer["type"] == "replay":
                    for envelope in answer["actions"]:
                        held = reducers.reduce("root", held, envelope["action"])
                else:
                    (snapshot,) = answer["snapshots"]
                    held = snapshot["state"]
            async with rpc(daemon.url) as fresh:
                now = (await fresh.initialize("fresh"))["snapshots"][0]["state"]
            assert now.get("terminals", []) == []
            assert held == now
            daemon.terminate()
            assert await daemon.wait() == 0
