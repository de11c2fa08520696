"""The OTLP/JSON encoder against opentelemetry-proto's own message definitions.

Spans, log records and metric points are made by the OpenTelemetry SDK in
memory; each encoded payload is parsed by protobuf into the proto's
``Export*ServiceRequest`` (unknown or mistyped fields fail), and the values
are compared field by field with what the SDK made.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from ahpd.ports import otlp

RESOURCE = Resource.create({"service.name": "ahpd-test"})


def parse(payload: dict[str, Any], message: Any) -> Any:
    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: fix(v) for k, v in node.items()}
            for key in ("traceId", "spanId", "parentSpanId"):
                if key in out:
                    out[key] = base64.b64encode(bytes.fromhex(out[key])).decode()
            return out
        return [fix(v) for v in node] if isinstance(node, list) else node

    return json_format.ParseDict(fix(payload), message(), ignore_unknown_fields=False)


def test_spans_keep_their_ids_kinds_parents_status_and_attributes() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t", "1.0")
    turn = tracer.start_span(
        "turn", kind=SpanKind.SERVER, attributes={"s": "x", "i": 7, "f": 1.5, "b": True, "list": ["a", "b"]}
    )
    tool = tracer.start_span("tool", kind=SpanKind.CLIENT, context=trace.set_span_in_context(turn))
    tool.add_event("asked", {"n": 1})
    tool.set_status(Status(StatusCode.ERROR, "it failed"))
    tool.end()
    turn.end()
    made = exporter.get_finished_spans()
    payload = otlp.encode_spans(made)
    request = parse(payload, ExportTraceServiceRequest)
    [scope] = request.resource_spans[0].scope_spans
    assert scope.scope.name == "t" and scope.scope.version == "1.0"
    tool_pb, turn_pb = scope.spans
    assert payload["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] == f"{made[0].context.trace_id:032x}"
    assert tool_pb.trace_id == made[0].context.trace_id.to_bytes(16, "big")
    assert tool_pb.span_id == made[0].context.span_id.to_bytes(8, "big")
    assert tool_pb.parent_span_id == turn_pb.span_id and not turn_pb.parent_span_id
    assert (turn_pb.kind, tool_pb.kind) == (2, 3)
    assert tool_pb.status.code == 2 and tool_pb.status.message == "it failed" and turn_pb.status.code == 0
    assert tool_pb.start_time_unix_nano == made[0].start_time and tool_pb.end_time_unix_nano == made[0].end_time
    assert tool_pb.events[0].name == "asked" and tool_pb.events[0].attributes[0].value.int_value == 1
    attrs = {a.key: a.value for a in turn_pb.attributes}
    assert attrs["s"].string_value == "x" and attrs["i"].int_value == 7 and attrs["f"].double_value == 1.5
    assert attrs["b"].bool_value is True and [v.string_value for v in attrs["list"].array_value.values] == ["a", "b"]
    resource = {a.key: a.value.string_value for a in request.resource_spans[0].resource.attributes}
    assert resource["service.name"] == "ahpd-test"


def test_log_records_keep_severity_body_time_and_trace() -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    provider.get_logger("l").emit(
        LogRecord(
            timestamp=1_736_870_400_000_000_000,
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body="a line",
            attributes={"logger.name": "ahpd.host"},
            trace_id=0xABC,
            span_id=0xDEF,
        )
    )
    payload = otlp.encode_logs(exporter.get_finished_logs())
    [record] = parse(payload, ExportLogsServiceRequest).resource_logs[0].scope_logs[0].log_records
    assert record.time_unix_nano == 1_736_870_400_000_000_000 and record.observed_time_unix_nano > 0
    assert (record.severity_number, record.severity_text, record.body.string_value) == (13, "WARN", "a line")
    assert record.trace_id == (0xABC).to_bytes(16, "big") and record.span_id == (0xDEF).to_bytes(8, "big")
    assert payload["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["timeUnixNano"] == "1736870400000000000"


def test_metrics_are_cumulative_sums_and_gauges() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = provider.get_meter("m")
    counter = meter.create_counter("turns", unit="{turn}", description="turns started")
    counter.add(2, {"k": "v"})
    counter.add(3, {"k": "v"})
    meter.create_gauge("load").set(0.25)
    payload = otlp.encode_metrics(reader.get_metrics_data())
    request = parse(payload, ExportMetricsServiceRequest)
    metrics = {m.name: m for m in request.resource_metrics[0].scope_metrics[0].metrics}
    turns = metrics["turns"]
    assert turns.unit == "{turn}" and turns.description == "turns started"
    assert turns.sum.aggregation_temporality == 2 and turns.sum.is_monotonic
    [point] = turns.sum.data_points
    assert point.as_int == 5 and point.attributes[0].key == "k" and point.start_time_unix_nano <= point.time_unix_nano
    assert metrics["load"].gauge.data_points[0].as_double == 0.25
