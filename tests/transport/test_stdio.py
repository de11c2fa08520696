"""serve_stdio: over pipes in this process, and end to end through a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import trio

from ahpd.host.kernel.frame import SharedFrame
from ahpd.transport.base import Connection
from ahpd.transport.stdio import serve_stdio

from .conftest import LIMIT

ROOT = Path(__file__).resolve().parents[2]


class Lines:
    """Reads a byte stream line by line."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def next(self) -> str | None:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


async def echo(conn: Connection) -> None:
    while (text := await conn.receive()) is not None:
        conn.send(text)


def error_of(line: str | None) -> dict:
    message = json.loads(line or "null")
    assert message["jsonrpc"] == "2.0" and message["id"] is None
    return message["error"]


async def test_lines_in_lines_out_over_pipes():
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    to_server = trio.lowlevel.FdStream(stdin_w)
    replies = Lines(trio.lowlevel.FdStream(stdout_r))
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(serve_stdio, echo, stdin_fd=stdin_r, stdout_fd=stdout_w, max_message_size=100))
            await to_server.send_all(b'{"id":1}\n')
            assert await replies.next() == '{"id":1}'
            await to_server.send_all(b'{"id":2}\r\n\n{"id":3}\n')  # CRLF; a blank line is skipped
            assert await replies.next() == '{"id":2}'
            assert await replies.next() == '{"id":3}'
            # an oversized line arriving in many chunks is skipped whole, and answered
            for _ in range(4):
                await to_server.send_all(b"x" * 50_000)
            await to_server.send_all(b'\n{"id":4}\n')
            assert error_of(await replies.next()) == {
                "code": -32600,
                "message": "frame of 200000 bytes exceeds the 100-byte limit",
            }
            assert await replies.next() == '{"id":4}'
            await to_server.send_all(b"\xff\xfe\n")
            assert error_of(await replies.next())["code"] == -32700
            await to_server.send_all(b'{"id":5}')  # the last line needs no newline
            await to_server.aclose()  # EOF
        # serve_stdio returned on EOF, after the echo was written
        assert await replies.next() == '{"id":5}'
    # it worked on duplicates: the fds it was given are still ours
    os.fstat(stdin_r)
    os.fstat(stdout_w)
    os.close(stdin_r)
    os.close(stdout_w)
    with trio.fail_after(LIMIT):
        assert await replies.next() is None
    await replies.stream.aclose()


async def test_frames_with_raw_newlines_stay_on_one_line():
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    replies = Lines(trio.lowlevel.FdStream(stdout_r))

    async def pretty(conn: Connection) -> None:
        conn.send('{\n  "id": 1,\r\n  "result": {}\n}')

    with trio.fail_after(LIMIT):
        os.close(stdin_w)  # stdin at EOF from the start
        await serve_stdio(pretty, stdin_fd=stdin_r, stdout_fd=stdout_w)
        os.close(stdin_r)
        os.close(stdout_w)
        line = await replies.next()
        assert json.loads(line) == {"id": 1, "result": {}}
        assert await replies.next() is None
    await replies.stream.aclose()


async def test_a_burst_of_frames_shared_or_not_comes_out_one_per_line_in_order():
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    replies = Lines(trio.lowlevel.FdStream(stdout_r))
    texts = [f'{{"n": {i},\n "text": "{"ü" * (i % 50)}"}}' for i in range(300)]

    async def burst(conn: Connection) -> None:
        for i, text in enumerate(texts):  # queued without a checkpoint: one batch
            assert conn.send(SharedFrame(text) if i % 2 else text)

    with trio.fail_after(LIMIT):
        os.close(stdin_w)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(serve_stdio, burst, stdin_fd=stdin_r, stdout_fd=stdout_w))
            got = [json.loads(await replies.next() or "null") for _ in texts]
        os.close(stdin_r)
        os.close(stdout_w)
        assert await replies.next() is None
    await replies.stream.aclose()
    assert got == [json.loads(text) for text in texts]


SCRIPT = """
import functools, logging, sys, trio
from ahpd.transport.stdio import serve_stdio

logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)

async def echo(conn):
    while (text := await conn.receive()) is not None:
        conn.send(text)

trio.run(functools.partial(serve_stdio, echo, max_message_size=100))
"""


async def test_end_to_end_through_a_child_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with trio.fail_after(LIMIT):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", SCRIPT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
            env=env,
        )
        try:
            replies = Lines(process.stdout)
            await process.stdin.send_all('{"jsonrpc":"2.0","id":1,"method":"é"}\n'.encode())
            assert await replies.next() == '{"jsonrpc":"2.0","id":1,"method":"é"}'
            await process.stdin.send_all(b"y" * 150 + b"\n")
            assert error_of(await replies.next())["message"] == ("frame of 150 bytes exceeds the 100-byte limit")
            await process.stdin.send_all(b'{"id":2}\n')
            assert await replies.next() == '{"id":2}'
            await process.stdin.aclose()
            assert await replies.next() is None  # stdout holds protocol lines only
            logs = b""
            while chunk := await process.stderr.receive_some(65536):
                logs += chunk
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            for stream in (process.stdin, process.stdout, process.stderr):
                await stream.aclose()
    assert b"serving on stdin/stdout" in logs  # the logs went to stderr
