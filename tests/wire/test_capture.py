"""Writing captures: the line shape ahp-inspector reads, redaction, the file's
mode, and the recorder around a real connection."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from ahpd.wire.capture import REDACTED, CaptureFile, RecordingConnection, capture_line, needs_redaction, redact
from ahpd.wire.reader import read_frames


def test_a_line_is_the_message_with_ahplog_beside_it() -> None:
    text = '{"jsonrpc":"2.0","id":1,"result":{"ok":true}}'
    line = capture_line(
        text, "s2c", "7.1", transport="websocket", client_id="alice", ts="2026-01-01T00:00:00.000Z", trusted=True
    )
    assert line.endswith("\n")
    entry = json.loads(line)
    assert entry == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"ok": True},
        "_ahpLog": {
            "ts": "2026-01-01T00:00:00.000Z",
            "dir": "s2c",
            "connectionId": "7.1",
            "transport": "websocket",
            "byteLength": len(text),
            "clientId": "alice",
        },
    }
    assert line.startswith(text[:-1])  # spliced: the message's own bytes


def test_a_frame_that_is_not_json_is_kept_as_text() -> None:
    entry = json.loads(capture_line("{oops", "c2s", "1", transport="stdio"))
    assert entry == {"_ahpLog": {**entry["_ahpLog"], "unparsed": "{oops"}}
    assert entry["_ahpLog"]["dir"] == "c2s"


def test_redaction_replaces_credentials_and_nothing_else() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "authenticate",
        "params": {
            "channel": "ahp-root://",
            "resource": "https://api.anthropic.com",
            "token": "sk-secret",
            "progressToken": "p1",
            "nested": [{"Authorization": "Bearer abc"}, {"apiKey": "k"}],
            "url": "ws://127.0.0.1:8765/?tkn=s3cret&x=1",
            "note": "Bearer xyz",
            "empty": {"token": ""},
        },
    }
    out = redact(message)
    params = out["params"]
    assert params["token"] == REDACTED and params["progressToken"] == "p1"
    assert params["nested"] == [{"Authorization": REDACTED}, {"apiKey": REDACTED}]
    assert params["url"] == f"ws://127.0.0.1:8765/?tkn={REDACTED}&x=1"
    assert params["note"] == f"Bearer {REDACTED}"
    assert params["empty"] == {"token": ""}  # signing out says nothing secret
    assert message["params"]["token"] == "sk-secret"  # the input is untouched
    text = json.dumps(message)
    assert needs_redaction(text) and "sk-secret" not in capture_line(text, "c2s", "1", transport="websocket")
    assert not needs_redaction('{"method":"ping","params":{"progressToken":"p"}}')


def test_the_file_is_private_appended_and_flushed(tmp_path: Path) -> None:
    path = tmp_path / "wire.jsonl"
    path.write_text("")
    path.chmod(0o644)
    with CaptureFile(path, transport="websocket") as capture:
        capture.write('{"jsonrpc":"2.0","method":"ping","id":1}', "c2s", "1")
        assert len(path.read_text().splitlines()) == 1  # on disk before close
    with CaptureFile(path, transport="websocket") as capture:
        capture.write('{"jsonrpc":"2.0","id":1,"result":{}}', "s2c", "1")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [f.direction for f in read_frames([str(path)])] == ["c2s", "s2c"]


class FakeConnection:
    name = "fake"

    def __init__(self, incoming: list[str]) -> None:
        self.incoming, self.sent = incoming, []

    async def receive(self) -> str | None:
        return self.incoming.pop(0) if self.incoming else None

    def send(self, text: str, size: int | None = None) -> bool:
        self.sent.append(text)
        return True

    def close(self, code: int = 1000, reason: str = "") -> None:
        pass


async def test_the_recorder_learns_the_client_id_and_passes_everything_through(tmp_path: Path) -> None:
    inner = FakeConnection(['{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientId":"alice"}}'])
    with CaptureFile(tmp_path / "w.jsonl", transport="websocket", trusted=True) as capture:
        conn = RecordingConnection(inner, capture)
        assert await conn.receive() is not None
        assert conn.send('{"jsonrpc":"2.0","id":1,"result":{}}')
        assert await conn.receive() is None
        assert await conn.receive() is None
        assert conn.name == "fake"
    frames = list(read_frames([str(tmp_path / "w.jsonl")]))
    # The close is on record, once, as a line of its own.
    assert [(f.direction, f.client_id, f.closed) for f in frames] == [
        ("c2s", "alice", False),
        ("s2c", "alice", False),
        ("c2s", "alice", True),
    ]
    assert frames[-1].message is None
    assert inner.sent == ['{"jsonrpc":"2.0","id":1,"result":{}}']


def test_ahpd_stdio_wire_records_both_directions(tmp_path: Path) -> None:
    capture = tmp_path / "stdio.jsonl"
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"channel": "ahp-root://", "protocolVersions": ["1.0.0"], "clientId": "cli"},
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "ahpd",
            "stdio",
            "--data-dir",
            str(tmp_path / "d"),
            "--sessions",
            "memory",
            "--wire",
            str(capture),
            "--log-level",
            "warning",
        ],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert run.returncode == 0, run.stderr
    frames = list(read_frames([str(capture)]))
    assert [(f.direction, f.client_id, f.closed) for f in frames] == [
        ("c2s", "cli", False),
        ("s2c", "cli", False),
        ("c2s", "cli", True),
    ]
    assert frames[1].message["result"]["protocolVersion"] == "1.0.0"
    assert stat.S_IMODE(capture.stat().st_mode) == 0o600


def test_the_file_holds_each_frame_spliced_as_it_was_whatever_its_text(tmp_path: Path) -> None:
    """A file's line is ``capture_line``'s, though written from the frame's
    bytes and a tail without copying the frame: frames with text that is not
    ASCII, with JSON whitespace around them, empty, or not JSON at all."""
    frames = [
        ('{"jsonrpc":"2.0","id":1,"result":{"data":"h\u00e9llo \u2603 \U0001f600"}}', "s2c"),
        (' \t{"jsonrpc":"2.0","method":"ping","params":{"text":"\u00fcber"}} \r\n', "c2s"),
        ("{}", "c2s"),
        ("{ }", "s2c"),
        ("[1, 2]", "c2s"),
        ("not json \u00e9", "c2s"),
    ]
    path = tmp_path / "wire.jsonl"
    with CaptureFile(path, transport="websocket", trusted=True) as capture:
        for text, direction in frames:
            capture.write(text, direction, "1.1")
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == len(frames)
    for (text, direction), line in zip(frames, lines, strict=True):
        entry = json.loads(line)
        ts = entry["_ahpLog"]["ts"]
        assert line == capture_line(text, direction, "1.1", transport="websocket", ts=ts, trusted=True)
        assert entry["_ahpLog"]["byteLength"] == len(text.encode())
        if text.strip().startswith("{"):
            assert {k: v for k, v in entry.items() if k != "_ahpLog"} == json.loads(text)
