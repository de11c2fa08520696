"""What the window asks a host about itself, against a real daemon.

Diagnostics fetched from a real HTTP server on 127.0.0.1, the debug-log
bundle collected, read back in chunks, unpacked and read, every refusal, and
``shutdown`` stopping the daemon; the whole conversation is then checked with
``ahpd wire-check``. The dev container relay has its own test
(``test_devcontainers``).
"""

from __future__ import annotations

import uuid

import base64
import http.server
import io
import json
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ahpd import __version__

from .helpers import create, daemon_in_process, rpc, wire_clean


class Site(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.paths.append(self.path)
                if self.path == "/moved":
                    self.send_response(302)
                    self.send_header("Location", "/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"hello " + b"x" * 100_000
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


async def test_diagnostics_state_files_debug_logs_and_shutdown(tmp_path) -> None:
    site = Site()
    threading.Thread(target=site.serve_forever, daemon=True).start()
    closed = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    dead_port = closed.server_port
    closed.server_close()
    data = tmp_path / "d"
    capture = tmp_path / "wire.jsonl"
    env = {"HTTPS_PROXY": "http://someone:hunter2@proxy.invalid:3128", "HTTP_PROXY": "http://proxy.invalid:3128"}
    try:
        async with daemon_in_process(data, "--wire", str(capture), env=env) as daemon:
            async with rpc(daemon.url) as client:
                init = await client.initialize("window")
                assert init["_meta"]["vscode.getAgentHostSessionStateFile.chat"] is True

                info = (await client.call("getNetworkDiagnosticsInfo", {}))["result"]
                assert info["version"] == __version__ and info["os"] == sys.platform and info["arch"]
                assert info["proxyEnv"]["HTTPS_PROXY"] == "http://someone:***@proxy.invalid:3128"
                assert info["proxyEnv"]["HTTP_PROXY"] == "http://proxy.invalid:3128"
                assert all({"name", "url"} <= set(e) for e in info["endpoints"])
                assert (await client.call("getManagedSettingsDiagnostics", {}))["result"] == []

                # Fetched directly (the proxy variables notwithstanding), cut at 64 KiB.
                base = f"http://127.0.0.1:{site.server_port}"
                ok = (await client.call("diagnosticsFetch", {"url": base + "/ok"}, timeout=60))["result"]
                assert ok["statusCode"] == 200 and ok["body"].startswith("hello ") and len(ok["body"]) == 64 * 1024
                assert ok["dnsIpv4"]["address"] == "127.0.0.1" and ok["durationMs"] >= 0
                moved = (await client.call("diagnosticsFetch", {"url": base + "/moved"}, timeout=60))["result"]
                assert moved["statusCode"] == 302 and site.paths == ["/ok", "/moved"]  # never /elsewhere
                down = await client.call("diagnosticsFetch", {"url": f"http://127.0.0.1:{dead_port}/"}, timeout=60)
                assert "refused" in down["result"]["error"].lower() and "statusCode" not in down["result"]
                for bad in ({"url": "ftp://127.0.0.1/x"}, {"url": "not a url"}, {}):
                    refused = await client.call("diagnosticsFetch", bad)
                    assert refused["error"]["code"] == -32602, refused

                # The demo agent keeps no file of its own; a session nobody has is refused.
                work = tmp_path / "work"
                work.mkdir()
                uri, chat = await create(client, work, channel=f"demo:/{uuid.uuid4()}")  # the bundle names it so
                answer = await client.call("vscode/getAgentHostSessionStateFile", {"session": uri, "chat": chat})
                assert answer["result"] == {}
                missing = await client.call("vscode/getAgentHostSessionStateFile", {"session": "ahp-session:/none"})
                assert missing["error"]["code"] == -32001

                # The bundle: collected, read back a chunk at a time, unpacked, read.
                made = (
                    await client.call(
                        "vscode/collectAgentHostDebugLogs", {"session": uri, "chat": chat, "kind": "archive"}
                    )
                )["result"]
                assert made["kind"] == "archive" and made["providerLogsIncluded"] is False
                names = {e["path"] for e in made["entries"]}
                assert {"agenthost/ahpd.log", "events.jsonl"} <= names
                blob, position = b"", 0
                while True:
                    chunk = (
                        await client.call(
                            "vscode/readAgentHostDebugLogsChunk", {"resource": made["resource"], "position": position}
                        )
                    )["result"]
                    piece = base64.b64decode(chunk["data"])
                    blob, position = blob + piece, position + len(piece)
                    if chunk["eof"]:
                        break
                assert len(blob) == made["size"]
                with zipfile.ZipFile(io.BytesIO(blob)) as bundle:
                    assert "listening on ws://127.0.0.1" in bundle.read("agenthost/ahpd.log").decode()
                    events = [json.loads(line) for line in bundle.read("events.jsonl").decode().splitlines()]
                assert events[0]["uri"] == uri and events[1]["uri"] == chat
                assert sum(e["size"] for e in made["entries"]) == made["uncompressedSize"]

                past = await client.call(
                    "vscode/readAgentHostDebugLogsChunk", {"resource": made["resource"], "position": made["size"] + 1}
                )
                assert past["error"]["code"] == -32602 and "past the end" in past["error"]["message"]
                end = await client.call(
                    "vscode/readAgentHostDebugLogsChunk", {"resource": made["resource"], "position": made["size"]}
                )
                assert end["result"] == {"data": "", "eof": True}
                for bad, why in (
                    ({"resource": (data / "token").as_uri(), "position": 0}, "not an archive this host"),
                    ({"resource": made["resource"], "position": -1}, "non-negative"),
                    ({"position": 0}, "resource must be"),
                ):
                    refused = await client.call("vscode/readAgentHostDebugLogsChunk", bad)
                    assert refused["error"]["code"] == -32602 and why in refused["error"]["message"], refused

                folder = (await client.call("vscode/collectAgentHostDebugLogs", {"kind": "directory"}))["result"]
                where = Path(urlparse(folder["resource"]).path)
                assert where.is_dir() and "listening on" in (where / "agenthost" / "ahpd.log").read_text()  # noqa: ASYNC240 - a test's look at a local path
                assert "events.jsonl" not in {e["path"] for e in folder["entries"]}
                wrong = await client.call("vscode/collectAgentHostDebugLogs", {"kind": "tarball"})
                assert wrong["error"]["code"] == -32602

                assert (await client.call("vscode/noSuchThing", {}))["error"]["code"] == -32601

                assert (await client.call("shutdown", {}))["result"] == {}
            assert await daemon.wait() == 0
        assert not (data / "ahpd.json").exists()
        assert "asked the daemon to stop" in (data / "logs" / "ahpd.log").read_text()
    finally:
        site.shutdown()

    wire_clean(capture)
