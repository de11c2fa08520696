"""The conformance scenario's resource steps: every ``resource*`` command on
real files in a folder of the run's own, its refusals, a watch that reports
a change, and a resource one client publishes to another.

Deterministic like the rest of the scenario: each step waits for the wire
to be quiet before the next, the only change the watch reports is a single
deletion (one event, whatever the watcher's batching), and times, etags and
the run's folder are normalised (``normalize``).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import trio

from tests.daemon.helpers import Rpc

from .drive import ROOT, call, settle, until

#: The scheme the publishing client serves its unsaved buffers under.
SCHEME = "mem"


def expect(reply: dict[str, Any], code: int | None = None) -> dict[str, Any]:
    """``reply``, checked to be a result (``code`` None) or that error."""
    if code is None:
        assert "result" in reply, reply
    else:
        assert reply.get("error", {}).get("code") == code, reply
    return reply


async def answer_one(publisher: Rpc, contents: dict[str, str]) -> dict[str, Any]:
    """Read ``publisher``'s frames until the host asks it something; answer
    a ``resourceRead`` of a URI in ``contents`` with its text, anything else
    with not-found. Returns the request."""
    with trio.fail_after(30):
        while True:
            frame = json.loads(await publisher.ws.get_message())
            if "method" in frame and "id" in frame:
                break
            publisher.notes.append(frame)
    uri = (frame.get("params") or {}).get("uri")
    if frame["method"] == "resourceRead" and uri in contents:
        reply: dict[str, Any] = {"result": {"data": contents[uri], "encoding": "utf-8", "contentType": "text/plain"}}
    else:
        reply = {"error": {"code": -32008, "message": f"{uri} is not an open buffer", "data": {"uri": uri}}}
    await publisher.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": frame["id"], **reply}))
    return frame


async def forwarded(asker: Rpc, publisher: Rpc, uri: str, contents: dict[str, str]) -> dict[str, Any]:
    """``resourceRead`` of ``uri`` by ``asker``, answered by ``publisher``."""
    async with trio.open_nursery() as nursery:
        asked: list[dict[str, Any]] = []

        async def serve() -> None:
            asked.append(await answer_one(publisher, contents))

        nursery.start_soon(serve)
        reply = await asker.call("resourceRead", {"channel": ROOT, "uri": uri}, timeout=30)
    assert asked and asked[0]["method"] == "resourceRead" and asked[0]["params"]["uri"] == uri, asked
    await settle(asker, publisher)
    return reply


async def resource_steps(alice: Rpc, bob: Rpc, work: Path) -> None:
    """Every resource command from ``alice``, on ``work/res``; ``bob``
    publishes ``mem://bob/...`` and answers (and refuses) her reads."""
    res = work / "res"
    f = lambda name: (res / name).as_uri()  # noqa: E731

    async def do(method: str, code: int | None = None, **params: Any) -> dict[str, Any]:
        return expect(await call(alice, method, {"channel": ROOT, **params}, bob), code)

    await do("resourceMkdir", uri=f("deep/er"))
    await do("resourceWrite", uri=f("notes.txt"), data="alpha\nbeta\n", encoding="utf-8", createOnly=True)
    await do("resourceWrite", uri=f("notes.txt"), data="gamma\n", encoding="utf-8", mode="append")
    await do("resourceWrite", uri=f("blob.bin"), data=base64.b64encode(b"\x00\x01ahp\xff").decode(), encoding="base64")
    await do("resourceWrite", -32010, uri=f("notes.txt"), data="again", encoding="utf-8", createOnly=True)
    info = (await do("resourceResolve", uri=f("notes.txt")))["result"]
    assert info["type"] == "file" and info["size"] == len("alpha\nbeta\ngamma\n")
    await do("resourceWrite", uri=f("notes.txt"), data="delta\n", encoding="utf-8", mode="append", ifMatch=info["etag"])
    await do("resourceWrite", -32011, uri=f("notes.txt"), data="late", encoding="utf-8", ifMatch=info["etag"])
    text = (await do("resourceRead", uri=f("notes.txt")))["result"]
    assert text == {"data": "alpha\nbeta\ngamma\ndelta\n", "encoding": "utf-8", "contentType": "text/plain"}
    blob = (await do("resourceRead", uri=f("blob.bin")))["result"]  # not UTF-8: base64 whatever was asked
    assert blob["encoding"] == "base64" and base64.b64decode(blob["data"]) == b"\x00\x01ahp\xff"
    await do("resourceRead", uri=f("notes.txt"), encoding="base64")
    await do("resourceRead", -32008, uri=f("missing.txt"))
    await do("resourceResolve", uri=res.as_uri())
    await do("resourceCopy", source=f("notes.txt"), destination=f("copy.txt"))
    await do("resourceCopy", -32010, source=f("notes.txt"), destination=f("copy.txt"), failIfExists=True)
    await do("resourceMove", source=f("copy.txt"), destination=f("deep/moved.txt"))
    listing = (await do("resourceList", uri=res.as_uri()))["result"]
    assert [e["name"] for e in listing["entries"]] == ["blob.bin", "deep", "notes.txt"], listing
    await do("resourceDelete", -32602, uri=f("deep"))  # a folder with entries, without recursive
    await do("resourceDelete", uri=f("deep"), recursive=True)
    await do("resourceDelete", uri=f("blob.bin"))
    await do("resourceRequest", uri=f("notes.txt"), read=True, write=True)
    await do("resourceRead", -32602, uri="file:../outside.txt")  # not an absolute path
    await do("resourceRead", -32009, uri="https://example.com/notes.txt")  # not a resource this host mediates

    # A watch: created, subscribed, and a deletion reported on its channel.
    await do("resourceMkdir", uri=f("watched"))
    await do("resourceWrite", uri=f("watched/gone.txt"), data="soon gone", encoding="utf-8")
    channel = (await do("createResourceWatch", uri=f("watched")))["result"]["channel"]
    await call(alice, "subscribe", {"channel": channel}, bob)
    os.unlink(res / "watched" / "gone.txt")
    changed = await until(alice, "resourceWatch/changed", channel)
    assert changed["action"]["changes"]["items"] == [{"uri": f("watched/gone.txt"), "type": "deleted"}], changed
    await settle(alice, bob)
    await alice.notify("unsubscribe", {"channel": channel})  # its last subscriber: the watcher is released
    await settle(alice, bob)

    # A resource bob publishes: alice's read is forwarded to him, and his
    # answer, or his refusal, comes back to her as he gave it.
    draft = f"{SCHEME}://bob/draft.txt"
    contents = {draft: "unsaved words\n"}
    reply = expect(await forwarded(alice, bob, draft, contents))
    assert reply["result"]["data"] == "unsaved words\n"
    expect(await forwarded(alice, bob, f"{SCHEME}://bob/closed.txt", contents), -32008)
