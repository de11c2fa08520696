"""The Dev Container port's reading of what the CLI prints: its outcome line
among its log lines, and lines cut at a bound rather than held whole."""

from __future__ import annotations

import json

import trio
import trio.testing

from ahpd.ports import devcontainers


def test_the_outcome_is_the_last_json_object_that_names_one() -> None:
    success = {"outcome": "success", "containerId": "c1", "remoteUser": "node", "remoteWorkspaceFolder": "/w"}
    printed = ["[t] Start: Run: docker run", json.dumps({"outcome": "error", "message": "old"}), json.dumps(success)]
    assert devcontainers.outcome([*printed, "[t] done", "[1, 2]", '{"no": "outcome"}']) == success
    assert devcontainers.outcome(["not json", "{broken"]) is None


def test_what_is_missing_is_named() -> None:
    assert devcontainers.Tools("/bin/devcontainer", "/bin/docker").missing() is None
    assert "devcontainer CLI is not on PATH" in (devcontainers.Tools(None, "/bin/docker").missing() or "")
    assert "no container engine" in (devcontainers.Tools("/bin/devcontainer", None).missing() or "")
    assert "neither" in (devcontainers.Tools(None, None).missing() or "")


async def test_lines_are_cut_at_the_bound_and_the_rest_of_a_long_one_skipped() -> None:
    send, receive = trio.testing.memory_stream_pair()
    got: list[bytes] = []

    async def read() -> None:
        async for line in devcontainers.lines(receive, limit=8):
            got.append(line)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        for chunk in (b"one\ntw", b"o\n", b"x" * 20, b"y" * 20 + b"\nthree\n", b"last-no-newline"):
            await send.send_all(chunk)
        await send.aclose()
    assert got == [b"one", b"two", b"x" * 8, b"three", b"last-no-"]
