"""File completions walk a big folder off the event loop, within bounds.

The host runs in this test's trio run (so the walk can be observed) behind a
real WebSocket on 127.0.0.1, with the demo agent as its provider and a real
folder of 20,000 files in ``tmp_path``.
"""

from __future__ import annotations

import json
import logging
import threading
from functools import partial

import pytest
import trio

from ahpd import daemon
from ahpd.host.sessions.chats import chat_commands
from ahpd.transport.websocket import serve_websocket

from ...daemon.helpers import create, rpc

FILES = 20_000


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("big")
    for d in range(FILES // 500):
        folder = root / f"dir{d:03}"
        folder.mkdir()
        for f in range(500):
            (folder / f"file{f:03}.txt").touch()
    (root / "zzz").mkdir()
    (root / "zzz" / "needle.py").touch()  # walked last: sorted after every dirNNN
    return root


async def _host_on_a_socket(nursery: trio.Nursery, tmp_path):
    host = daemon.make_host(tmp_path / "data", "memory", daemon.load_backends({}, [], tmp_path / "data"))
    await nursery.start(host.run)
    listening = await nursery.start(
        partial(serve_websocket, host.serve_connection, host="127.0.0.1", port=0, token=None)
    )
    return host, listening.url


def _completions(chat: str, text: str) -> dict:
    return {"channel": chat, "kind": "userMessage", "text": text, "offset": len(text)}


async def test_a_walk_does_not_hold_up_other_clients(tmp_path, big_folder, monkeypatch) -> None:
    """The walk cannot finish until another client's ping has been answered:
    if it ran on the event loop, nothing would answer that ping."""
    (tmp_path / "data").mkdir()
    pinged = threading.Event()
    real_walk = chat_commands._walk

    def walk_after_the_ping(*args):
        assert pinged.wait(20), "the ping was not answered while the walk ran"
        real_walk(*args)

    monkeypatch.setattr(chat_commands, "_walk", walk_after_the_ping)
    # The walk's time bound is not what this test is about: a loaded machine
    # must not turn a whole walk into a partial one.
    monkeypatch.setattr(chat_commands, "WALK_SECONDS", 600.0)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            host, url = await _host_on_a_socket(nursery, tmp_path)
            async with rpc(url) as a, rpc(url) as b:
                await a.initialize("a")
                await b.initialize("b")
                _, chat = await create(a, big_folder)
                a.next_id += 1
                await a.ws.send_message(
                    json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": a.next_id,
                            "method": "completions",
                            "params": _completions(chat, "see @needle"),
                        }
                    )
                )
                pong = await b.call("ping", {}, timeout=20)
                assert "result" in pong, pong
                pinged.set()
                while (reply := json.loads(await a.ws.get_message())).get("id") != a.next_id:
                    pass
            nursery.cancel_scope.cancel()
    assert [i["attachment"]["label"] for i in reply["result"]["items"]] == ["zzz/needle.py"]


async def test_a_walk_answers_what_it_found_within_its_bounds(tmp_path, big_folder, monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="ahpd.host")
    (tmp_path / "data").mkdir()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            host, url = await _host_on_a_socket(nursery, tmp_path)
            async with rpc(url) as client:
                await client.initialize("c")
                _, chat = await create(client, big_folder)
                # unbounded, the whole folder is searched (however loaded the machine is)
                monkeypatch.setattr(chat_commands, "WALK_SECONDS", 600.0)
                whole = await client.call("completions", _completions(chat, "@needle"), timeout=30)
                assert [i["attachment"]["label"] for i in whole["result"]["items"]] == ["zzz/needle.py"]
                # an entry cap: the walk stops early and answers what it found by then
                monkeypatch.setattr(chat_commands, "WALK_ENTRIES", 1_000)
                capped = await client.call("completions", _completions(chat, "@needle"), timeout=30)
                assert capped["result"]["items"] == []
                some = await client.call("completions", _completions(chat, "@file00"), timeout=30)
                labels = [i["attachment"]["label"] for i in some["result"]["items"]]
                assert labels[:2] == ["dir000/file000.txt", "dir000/file001.txt"]
                # a deadline already passed: at most the first folder is looked at
                monkeypatch.setattr(chat_commands, "WALK_ENTRIES", 10**9)
                monkeypatch.setattr(chat_commands, "WALK_SECONDS", 0.0)
                late = await client.call("completions", _completions(chat, "@needle"), timeout=30)
                assert late["result"]["items"] == []
                # the host is still well
                assert "result" in await client.call("ping", {})
            nursery.cancel_scope.cancel()
    stops = [r.getMessage() for r in caplog.records if "file completion under" in r.getMessage()]
    assert len(stops) == 2 and all(str(big_folder) in s for s in stops)
