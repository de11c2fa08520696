"""Telemetry on the ahp-otlp: channels, and the same telemetry at a collector.

A real daemon, real WebSocket clients, and a collector-like HTTP receiver on
127.0.0.1 that the daemon reaches through the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``. Every payload a channel carries is parsed
against opentelemetry-proto's own message definitions (after turning the
hex ids of the OTLP/JSON mapping into protobuf's bytes), and what the
collector receives is parsed as the protobuf it is.
"""

from __future__ import annotations

import uuid

import base64
import http.server
import json
import logging
import threading
from typing import Any

import trio
from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ahpd.host.telemetry import telemetry

from .helpers import (
    Rpc,
    action_of,
    create,
    daemon_in_process,
    dispatch,
    eventually,
    rpc,
    running_daemon,
    start_turn,
    wire_clean,
)

TRACES, METRICS = "ahp-otlp://traces", "ahp-otlp://metrics"


def _hex_to_b64(value: str, size: int) -> str:
    assert len(value) == size * 2 and int(value, 16) != 0, value  # lowercase hex, not base64
    return base64.b64encode(bytes.fromhex(value)).decode()


def parse(payload: dict[str, Any], message: Any) -> Any:
    """``payload`` as opentelemetry-proto's ``message``: every field name,
    type and enum checked by protobuf itself; the ids first turned from the
    OTLP/JSON mapping's hex into the bytes protobuf's JSON reader expects."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v) for k, v in node.items()}
            for key, size in (("traceId", 16), ("spanId", 8), ("parentSpanId", 8)):
                if key in out:
                    out[key] = _hex_to_b64(out[key], size)
            return out
        if isinstance(node, list):
            return [fix(v) for v in node]
        return node

    return json_format.ParseDict(fix(payload), message(), ignore_unknown_fields=False)


class Collector(http.server.ThreadingHTTPServer):
    """OTLP/HTTP's receiving end: protobuf bodies posted to /v1/<signal>."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                assert self.headers["Content-Type"] == "application/x-protobuf"
                outer.received.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def of(self, path: str, message: Any) -> list[Any]:
        return [message.FromString(body) for p, body in list(self.received) if p == path]


async def otlp_note(client: Rpc, method: str, channel: str, timeout: float = 30) -> dict[str, Any]:
    with trio.fail_after(timeout):
        while True:
            note = await client.next_note()
            if note.get("method") == method and note["params"]["channel"] == channel:
                assert "serverSeq" not in note["params"]
                return note["params"]["payload"]


def sums(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        m["name"]: m["sum"] for rm in payload["resourceMetrics"] for sm in rm["scopeMetrics"] for m in sm["metrics"]
    }


def total(metric: dict[str, Any]) -> int:
    return sum(int(p["asInt"]) for p in metric["dataPoints"])


async def test_logs_traces_and_metrics_on_the_channels_and_at_a_collector(tmp_path) -> None:
    collector = Collector()
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    capture = tmp_path / "wire.jsonl"
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_BLRP_SCHEDULE_DELAY": "100",
        "OTEL_METRIC_EXPORT_INTERVAL": "500",
    }
    try:
        closed_before = telemetry.COUNTS.queue_closes
        async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture), env=env) as daemon:
            async with rpc(daemon.url) as client, rpc(daemon.url) as quiet:
                init = await client.initialize("w1")
                assert init["telemetry"] == {"logs": "ahp-otlp://logs/{level}", "traces": TRACES, "metrics": METRICS}
                await quiet.initialize("w2")

                for bad, reason in (
                    ("ahp-otlp://logs/loud", "'loud' is not a log level"),
                    ("ahp-otlp://logs", "is not a telemetry channel"),
                    ("ahp-otlp://spans", "is not a telemetry channel"),
                ):
                    refused = await client.call("subscribe", {"channel": bad})
                    assert refused["error"]["code"] == -32602 and reason in refused["error"]["message"], refused

                for channel in ("ahp-otlp://logs/info", TRACES):
                    assert (await client.call("subscribe", {"channel": channel}))["result"] == {}
                assert (await quiet.call("subscribe", {"channel": "ahp-otlp://logs/warn"}))["result"] == {}

                # Logs: an info line reaches logs/info only; a warning reaches both.
                async with rpc(daemon.url) as third:
                    await third.initialize("w3")
                info = await otlp_note(client, "otlp/exportLogs", "ahp-otlp://logs/info")
                record = parse(info, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records[0]
                assert record.severity_number >= 9 and record.time_unix_nano > 0 and record.body.string_value
                await quiet.notify("no/suchNotification", {})
                warn = await otlp_note(quiet, "otlp/exportLogs", "ahp-otlp://logs/warn")
                [record] = parse(warn, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records
                assert record.severity_text == "WARN" and record.severity_number == 13
                assert "no/suchNotification" in record.body.string_value

                # Traces: a turn with one tool call; the call's span ends first.
                uri, chat = await create(client, tmp_path, channel=f"demo:/{uuid.uuid4()}")
                turn = start_turn("please use a tool with permission")
                await dispatch(client, chat, turn, 1)
                with trio.fail_after(30):
                    while True:
                        action = action_of(await client.next_note()) or {}
                        if action.get("type") == "session/inputNeededSet":
                            call_id = action["request"]["toolCall"]["toolCallId"]
                            break
                await dispatch(
                    client,
                    chat,
                    {
                        "type": "chat/toolCallConfirmed",
                        "turnId": turn["turnId"],
                        "toolCallId": call_id,
                        "approved": True,
                        "confirmed": "user-action",
                    },
                    2,
                )
                tool = parse(await otlp_note(client, "otlp/exportTraces", TRACES), ExportTraceServiceRequest)
                whole = parse(await otlp_note(client, "otlp/exportTraces", TRACES), ExportTraceServiceRequest)
                [tool_span] = tool.resource_spans[0].scope_spans[0].spans
                [turn_span] = whole.resource_spans[0].scope_spans[0].spans
                assert turn_span.kind == 2 and tool_span.kind == 3  # SPAN_KIND_SERVER, SPAN_KIND_CLIENT
                assert tool_span.trace_id == turn_span.trace_id and tool_span.parent_span_id == turn_span.span_id
                assert turn_span.end_time_unix_nano >= tool_span.end_time_unix_nano > tool_span.start_time_unix_nano
                attrs = {a.key: a.value.string_value for a in turn_span.attributes}
                assert attrs["ahp.turn.id"] == turn["turnId"] and attrs["ahp.session"] == uri
                service = {a.key: a.value.string_value for a in whole.resource_spans[0].resource.attributes}
                assert service["service.name"] == "ahpd"

                # Metrics: cumulative totals, sent right after subscribing.
                assert (await client.call("subscribe", {"channel": METRICS}))["result"] == {}
                metrics = await otlp_note(client, "otlp/exportMetrics", METRICS)
                parse(metrics, ExportMetricsServiceRequest)
                found = sums(metrics)
                assert total(found["ahpd.turns"]) == 1 and total(found["ahpd.tool_calls"]) == 1
                assert total(found["ahpd.tokens"]) > 0 and total(found["ahpd.connections"]) >= 3
                assert total(found["ahpd.frames_sent"]) > 10 and total(found["ahpd.bytes_sent"]) > 1000
                # The counters are the process's (a daemon is one); this daemon runs
                # in the test's process, after whatever other tests closed.
                assert total(found["ahpd.queue_closes"]) == closed_before
                assert all(s["aggregationTemporality"] == 2 and s["isMonotonic"] for s in found.values())

                # Never replayed: a reconnect hands back no telemetry and does not resume it.
                seq = init["serverSeq"]
            async with rpc(daemon.url) as back:
                reply = (
                    await back.call(
                        "reconnect",
                        {
                            "channel": "ahp-root://",
                            "clientId": "w1",
                            "lastSeenServerSeq": seq,
                            "subscriptions": [TRACES, chat],
                        },
                    )
                )["result"]
                assert reply["type"] == "replay" and TRACES in reply["missing"]
                assert all(not e["channel"].startswith("ahp-otlp:") for e in reply["actions"])
            daemon.terminate()
            assert await daemon.wait() == 0

        spans = [
            s
            for r in collector.of("/v1/traces", ExportTraceServiceRequest)
            for rs in r.resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        assert {(s.name, s.kind) for s in spans} >= {("turn", 2)}
        assert any(s.kind == 3 for s in spans)
        logs = [
            lr
            for r in collector.of("/v1/logs", ExportLogsServiceRequest)
            for rl in r.resource_logs
            for sl in rl.scope_logs
            for lr in sl.log_records
        ]
        assert any("no/suchNotification" in lr.body.string_value for lr in logs)
        names = {
            m.name
            for r in collector.of("/v1/metrics", ExportMetricsServiceRequest)
            for rm in r.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert {"ahpd.turns", "ahpd.tool_calls", "ahpd.bytes_sent"} <= names
    finally:
        collector.shutdown()

    wire_clean(capture)


async def test_telemetry_channels_named_at_initialize_are_subscribed(tmp_path) -> None:
    """``initialSubscriptions`` takes an ``ahp-otlp:`` channel as ``subscribe``
    does: no snapshot for it, its exports arriving after the answer; one that
    is not a telemetry channel is left out and the rest still served."""
    capture = tmp_path / "wire.jsonl"
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--wire", str(capture)) as daemon:
        async with rpc(daemon.url) as client:
            init = await client.initialize(
                "w1", subscriptions=("ahp-root://", METRICS, "ahp-otlp://logs/loud", "ahp-otlp://logs/warn")
            )
            assert [s["resource"] for s in init["snapshots"]] == ["ahp-root://"]
            assert not any(n.get("method", "").startswith("otlp/") for n in client.notes)  # none before the answer
            parse(await otlp_note(client, "otlp/exportMetrics", METRICS), ExportMetricsServiceRequest)
            await client.notify("no/suchNotification", {})
            warn = await otlp_note(client, "otlp/exportLogs", "ahp-otlp://logs/warn")
            [record] = parse(warn, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records
            assert "no/suchNotification" in record.body.string_value
        daemon.terminate()
        assert await daemon.wait() == 0
    wire_clean(capture)


async def test_a_turn_and_its_tool_call_reach_the_logs_channels_with_their_trace(tmp_path) -> None:
    """An ``ahpd run`` whose client subscribes to logs at ``INFO`` (the
    level names are case-insensitive) and ``debug``, then makes a session
    and runs a turn with a tool call: each logs channel gets the turn's
    start, the tool call's completion and the turn's end, each record
    carrying its span's trace and span ids and the AHP ids (before: no
    export at all, since nothing in a session, a turn or a tool call was
    logged, and ``logs/INFO`` was refused)."""
    logs = ("ahp-otlp://logs/INFO", "ahp-otlp://logs/debug")
    async with running_daemon(tmp_path / "d", "--sessions", "memory") as daemon, rpc(daemon.url) as client:
        await client.initialize("w")
        for channel in (*logs, TRACES):
            assert (await client.call("subscribe", {"channel": channel}))["result"] == {}, channel
        uri, chat = await create(client, tmp_path, channel=f"demo:/{uuid.uuid4()}")
        turn = start_turn("please use a tool with permission")
        await dispatch(client, chat, turn, 1)
        records: dict[str, list[Any]] = {channel: [] for channel in logs}
        spans: dict[str, Any] = {}
        ended = f"turn {turn['turnId']} ended"
        with trio.fail_after(60):
            while not (
                "turn" in spans and all(any(ended in r.body.string_value for r in got) for got in records.values())
            ):
                note = await client.next_note()
                method, params = note.get("method"), note.get("params") or {}
                action = action_of(note) or {}
                if action.get("type") == "session/inputNeededSet":
                    confirm = {
                        "type": "chat/toolCallConfirmed",
                        "turnId": turn["turnId"],
                        "toolCallId": action["request"]["toolCall"]["toolCallId"],
                        "approved": True,
                        "confirmed": "user-action",
                    }
                    await dispatch(client, chat, confirm, 2)
                elif method == "otlp/exportLogs":
                    request = parse(params["payload"], ExportLogsServiceRequest)
                    records[params["channel"]].extend(request.resource_logs[0].scope_logs[0].log_records)
                elif method == "otlp/exportTraces":
                    for span in (
                        parse(params["payload"], ExportTraceServiceRequest).resource_spans[0].scope_spans[0].spans
                    ):
                        spans["turn" if span.kind == 2 else "tool"] = span
        for channel, got in records.items():
            said = {r.body.string_value: r for r in got if r.body.string_value.startswith(("turn ", "tool "))}
            started, done = f"turn {turn['turnId']} started on {chat}", f"{ended} on {chat} (turnComplete)"
            tool = next(r for text, r in said.items() if text.startswith("tool ") and text.endswith(" completed"))
            assert started in said and done in said, (channel, list(said))
            for record, span in ((said[started], spans["turn"]), (said[done], spans["turn"]), (tool, spans["tool"])):
                assert record.trace_id == span.trace_id and record.span_id == span.span_id, (channel, record)
                assert record.severity_number == 9 and record.severity_text == "INFO"
                attributes = {a.key: a.value.string_value for a in record.attributes}
                assert attributes["ahp.turn.id"] == turn["turnId"], attributes
                assert attributes["logger.name"] == "ahpd.host.turns"
            assert {a.key: a.value.string_value for a in said[started].attributes}["ahp.session"] == uri
            assert "ahp.tool_call.id" in {a.key for a in tool.attributes}


async def test_a_debug_listener_gets_debug_lines_that_stderr_does_not(tmp_path) -> None:
    """``ahpd run --log-level info`` with one client on ``logs/debug`` and
    one on ``logs/info``: a debug line (a JSON-RPC response to nothing the
    host asked) reaches the debug listener, not the info one and not the
    daemon's stderr (before: never made, since the daemon's loggers stayed
    at its start-up level whatever a subscriber asked)."""
    stray = "response to nothing we asked"
    with open(tmp_path / "stderr.txt", "wb") as stderr:  # noqa: ASYNC230 - the child's stderr, opened before it starts
        async with (
            running_daemon(tmp_path / "d", "--sessions", "memory", "--log-level", "info", stderr=stderr) as daemon,
            rpc(daemon.url) as loud,
            rpc(daemon.url) as quiet,
        ):
            await loud.initialize("loud", subscriptions=())
            await quiet.initialize("quiet", subscriptions=())
            assert (await loud.call("subscribe", {"channel": "ahp-otlp://logs/debug"}))["result"] == {}
            assert (await quiet.call("subscribe", {"channel": "ahp-otlp://logs/info"}))["result"] == {}
            await loud.ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 424242, "result": {}}))
            with trio.fail_after(30):
                while True:
                    payload = await otlp_note(loud, "otlp/exportLogs", "ahp-otlp://logs/debug")
                    [record] = parse(payload, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records
                    if stray in record.body.string_value:
                        break
            assert record.severity_number == 5 and record.severity_text == "DEBUG"
            # An info line after it: the info listener's exports, up to it, hold no debug line.
            async with rpc(daemon.url) as third:
                await third.initialize("third-client", subscriptions=())
            with trio.fail_after(30):
                while True:
                    payload = await otlp_note(quiet, "otlp/exportLogs", "ahp-otlp://logs/info")
                    [record] = parse(payload, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records
                    assert stray not in record.body.string_value and record.severity_number >= 9
                    if "third-client" in record.body.string_value:
                        break
    written = (tmp_path / "stderr.txt").read_text()
    assert "third-client" in written and stray not in written


async def test_the_loggers_go_back_to_their_level_when_the_last_debug_listener_leaves(tmp_path) -> None:
    ours = logging.getLogger("ahpd")
    async with daemon_in_process(tmp_path / "d", "--sessions", "memory", "--log-level", "info") as daemon:
        assert ours.getEffectiveLevel() == logging.INFO
        async with rpc(daemon.url) as one, rpc(daemon.url) as two:
            await one.initialize("one", subscriptions=())
            await two.initialize("two", subscriptions=())
            await one.call("subscribe", {"channel": "ahp-otlp://logs/TRACE"})
            await two.call("subscribe", {"channel": "ahp-otlp://logs/debug"})
            assert ours.getEffectiveLevel() == logging.DEBUG
            await one.notify("unsubscribe", {"channel": "ahp-otlp://logs/TRACE"})
            await one.call("ping", {"channel": "ahp-root://"})
            assert ours.getEffectiveLevel() == logging.DEBUG  # two still listens
        await eventually(lambda: not daemon.host.peers)
        assert ours.getEffectiveLevel() == logging.INFO
