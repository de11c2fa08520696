"""The OpenTelemetry SDK's data as OTLP/JSON, the shape the telemetry channels carry.

The SDK makes the spans, log records and metric points (ids, clocks,
aggregation); this module only writes them down in the OTLP/JSON mapping of
opentelemetry-proto's ``Export*ServiceRequest`` messages. It is written by
hand because the mapping is not protobuf's generic one: trace and span ids
are lowercase hex (protobuf's JSON printer writes bytes as base64), enums are
their integer values, and 64-bit integers (``*UnixNano``, ``asInt``,
``intValue``) are decimal strings. Field names are the lowerCamelCase JSON
names the proto declares.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricsData
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

# opentelemetry-proto's Span.SpanKind and Status.StatusCode numbering (the
# API's enums are numbered differently).
# By member name, so that the SDK is imported by what made the spans, not by this module.
_KIND = {"INTERNAL": 1, "SERVER": 2, "CLIENT": 3, "PRODUCER": 4, "CONSUMER": 5}
_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}


def trace_id(value: int) -> str:
    return f"{value:032x}"


def span_id(value: int) -> str:
    return f"{value:016x}"


def any_value(value: Any) -> dict[str, Any]:
    """An ``AnyValue``."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode()}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": attributes(value)}}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def attributes(values: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": str(k), "value": any_value(v)} for k, v in (values or {}).items()]


def _resource(resource: Resource) -> dict[str, Any]:
    return {"attributes": attributes(resource.attributes)}


def _scope(scope: InstrumentationScope | None) -> dict[str, Any]:
    if scope is None:
        return {}
    out: dict[str, Any] = {"name": scope.name}
    if scope.version:
        out["version"] = scope.version
    return out


def _grouped(items: Iterable[Any], resource_of: Any, scope_of: Any) -> list[tuple[Any, list[tuple[Any, list[Any]]]]]:
    """Items by resource, then by instrumentation scope, in arrival order."""
    groups: dict[int, tuple[Any, dict[Any, tuple[Any, list[Any]]]]] = {}
    for item in items:
        resource, scope = resource_of(item), scope_of(item)
        _, scopes = groups.setdefault(id(resource), (resource, {}))
        scopes.setdefault(scope, (scope, []))[1].append(item)
    return [(resource, list(scopes.values())) for resource, scopes in groups.values()]


# -- traces ------------------------------------------------------------------------


def _span(span: Any) -> dict[str, Any]:
    context = span.get_span_context()
    out: dict[str, Any] = {
        "traceId": trace_id(context.trace_id),
        "spanId": span_id(context.span_id),
        "name": span.name,
        "kind": _KIND.get(span.kind.name, 0),
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": attributes(span.attributes),
        "status": {"code": _STATUS.get(span.status.status_code.name, 0)},
    }
    if span.parent is not None:
        out["parentSpanId"] = span_id(span.parent.span_id)
    if span.status.description:
        out["status"]["message"] = span.status.description
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": attributes(e.attributes)}
            for e in span.events
        ]
    return out


def _by_resource(items: Sequence[Any], kind: str, leaves: str, encode: Any) -> dict[str, Any]:
    """The OTLP nesting every signal shares: ``resource<Kind>`` holding
    ``scope<Kind>`` holding the encoded ``leaves``."""
    return {
        f"resource{kind}": [
            {
                "resource": _resource(resource),
                f"scope{kind}": [
                    {"scope": _scope(scope), leaves: [encode(item) for item in members]} for scope, members in scopes
                ],
            }
            for resource, scopes in _grouped(items, lambda i: i.resource, lambda i: i.instrumentation_scope)
        ]
    }


def encode_spans(spans: Sequence[Any]) -> dict[str, Any]:
    """An ``ExportTraceServiceRequest`` of SDK ``ReadableSpan``s."""
    return _by_resource(spans, "Spans", "spans", _span)


# -- logs --------------------------------------------------------------------------


def _log(record: Any) -> dict[str, Any]:
    rec = record.log_record
    out: dict[str, Any] = {
        "timeUnixNano": str(rec.timestamp or 0),
        "observedTimeUnixNano": str(rec.observed_timestamp or rec.timestamp or 0),
        "severityNumber": rec.severity_number.value if rec.severity_number is not None else 0,
        "severityText": rec.severity_text or "",
        "body": any_value(rec.body if rec.body is not None else ""),
        "attributes": attributes(rec.attributes),
    }
    if rec.trace_id:
        out["traceId"] = trace_id(rec.trace_id)
    if rec.span_id:
        out["spanId"] = span_id(rec.span_id)
    return out


def encode_logs(records: Sequence[Any]) -> dict[str, Any]:
    """An ``ExportLogsServiceRequest`` of SDK ``ReadableLogRecord``s."""
    return _by_resource(records, "Logs", "logRecords", _log)


# -- metrics -----------------------------------------------------------------------


def _point(point: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"attributes": attributes(point.attributes), "timeUnixNano": str(point.time_unix_nano)}
    if point.start_time_unix_nano is not None:  # a gauge's point has none
        out["startTimeUnixNano"] = str(point.start_time_unix_nano)
    if isinstance(point.value, int):
        out["asInt"] = str(point.value)
    else:
        out["asDouble"] = float(point.value)
    return out


def _metric(metric: Any) -> dict[str, Any] | None:
    out: dict[str, Any] = {"name": metric.name, "description": metric.description or "", "unit": metric.unit or ""}
    # Imported here, where the SDK has made the data, so that importing this port does not load it.
    from opentelemetry.sdk.metrics.export import Gauge, Sum

    data = metric.data
    if isinstance(data, Sum):
        out["sum"] = {
            "dataPoints": [_point(p) for p in data.data_points],
            "aggregationTemporality": int(data.aggregation_temporality.value),
            "isMonotonic": bool(data.is_monotonic),
        }
    elif isinstance(data, Gauge):
        out["gauge"] = {"dataPoints": [_point(p) for p in data.data_points]}
    else:
        return None  # no instrument of ours makes another kind
    return out


def encode_metrics(data: MetricsData) -> dict[str, Any]:
    """An ``ExportMetricsServiceRequest`` of the SDK's ``MetricsData``."""
    return {
        "resourceMetrics": [
            {
                "resource": _resource(rm.resource),
                "scopeMetrics": [
                    {"scope": _scope(sm.scope), "metrics": [m for m in map(_metric, sm.metrics) if m is not None]}
                    for sm in rm.scope_metrics
                ],
            }
            for rm in data.resource_metrics
        ]
    }
