"""tools/tee.py between a client and a real daemon records a capture that
wire-check reads clean, and passes every frame through."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import trio

from ahpd.wire.cli import wire_check
from ahpd.wire.reader import read_frames
from tests.daemon.helpers import rpc, running_daemon

TEE = Path(__file__).resolve().parents[2] / "tools" / "tee.py"


def load_tee():
    spec = importlib.util.spec_from_file_location("ahpd_tee", TEE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_upstream_url_carries_the_clients_token() -> None:
    tee = load_tee()
    assert tee.upstream_url("ws://h:1/", "/?tkn=abc") == "ws://h:1/?tkn=abc"
    assert tee.upstream_url("ws://h:1/?tkn=mine", "/?tkn=abc") == "ws://h:1/?tkn=mine"


async def test_a_session_through_the_tee(tmp_path: Path) -> None:
    tee = load_tee()
    capture = tmp_path / "tee.jsonl"
    async with running_daemon(tmp_path / "d", "--sessions", "memory", "--connection-token", "s3cret") as daemon:
        async with trio.open_nursery() as nursery:
            args = tee.parse(
                ["--upstream", daemon.url.split("?")[0], "--wire", str(capture), "--listen", "127.0.0.1:0"]
            )
            port = await nursery.start(tee.main, args)
            async with rpc(f"ws://127.0.0.1:{port}/?tkn=s3cret") as client:
                result = await client.initialize("teed")
                assert result["protocolVersion"] == "1.0.0"
                assert "result" in await client.call("ping", {"channel": "ahp-root://"})
                assert "result" in await client.call("listSessions", {"channel": "ahp-root://"})
            nursery.cancel_scope.cancel()
        daemon.terminate()
        await daemon.wait()
    frames = list(read_frames([str(capture)]))
    assert [f.direction for f in frames] == ["c2s", "s2c"] * 3
    assert {f.client_id for f in frames} == {"teed"}
    out = io.StringIO()
    assert wire_check([str(capture)], out=out) == 0, out.getvalue()
    assert "s3cret" not in capture.read_text()
