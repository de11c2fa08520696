"""Telemetry: the daemon's logs, traces and metrics on the ``ahp-otlp:`` channels.

The OpenTelemetry SDK makes everything (span and trace ids, clocks, metric
aggregation); ``ahpd.ports.otlp`` writes it as OTLP/JSON; this module routes
it to whoever subscribed:

* ``ahp-otlp://logs/{level}`` (a template the client expands with trace,
  debug, info, warn, error or fatal, in any case): the daemon's own log
  lines at that severity and above, one ``otlp/exportLogs`` per line. A
  turn's start and end and a tool call's completion are lines of their own
  (``ahpd.host.turns``) carrying their span's ids, since nothing else in a
  session's work is logged. While somebody listens to debug or trace, the
  ``ahpd`` loggers make debug lines (stderr and the log file keep their
  level); otherwise a line nobody asked for is not made.
* ``ahp-otlp://traces``: a turn is a SERVER span and each tool call in it a
  CLIENT child, sent as each ends (``otlp/exportTraces``). They are made
  from the actions the bus applies, so no turn code knows about them.
* ``ahp-otlp://metrics``: cumulative sums since the process started (turns,
  tool calls, tokens, connections, frames and bytes sent, queue closes),
  every ``METRICS_INTERVAL`` seconds and once right after a subscription.

A telemetry channel holds no state, so it is not a bus channel: nothing on
it is numbered, buffered for replay or replayed on reconnect. Its
subscribers are the connections whose ``subscriptions`` name it, so
unsubscribing and disconnecting need nothing of their own here.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, the same telemetry also goes to
that collector through the SDK's own OTLP/HTTP exporters (the standard
``OTEL_*`` variables apply).

Records can come from any thread (a worker thread logs too), so delivery is
always handed to the trio loop with ``run_sync_soon``, which is also what
keeps a log line said while a frame is being sent from re-entering the send.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import trio

from ahpd import __version__
from ahpd.host.kernel.jsonrpc import INVALID_PARAMS, RpcError
from ahpd.ports import otlp

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Counter, Observation
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

    from ahpd.host.kernel.host import Host, Peer

log = logging.getLogger("ahpd.host")
#: A line per turn begun and ended and per tool call completed: what a
#: ``logs/info`` subscriber sees of the agents' work (nothing else logs it).
turns_log = logging.getLogger("ahpd.host.turns")
#: The ``extra`` key of such a line: the span it belongs to and its attributes.
_OTEL = "ahpd_otel"

LOGS = "ahp-otlp://logs/{level}"
TRACES = "ahp-otlp://traces"
METRICS = "ahp-otlp://metrics"
#: The ``{level}`` names and the lowest OTLP SeverityNumber each delivers.
LEVELS = {"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17, "fatal": 21}
METRICS_INTERVAL = 10.0
_LOGS_PREFIX = LOGS.removesuffix("{level}")
#: The actions that count or open a span, and so start the SDK.
_COUNTED = frozenset({"chat/turnStarted", "chat/toolCallStart", "chat/usage"})


class Counts:
    """What the transport counts for the metrics: plain integers, bumped in
    one line where it happens, read when the metrics are collected."""

    def __init__(self) -> None:
        self.connections = 0
        self.frames_sent = 0
        self.bytes_sent = 0
        self.queue_closes = 0

    def sent(self, size: int) -> None:
        self.frames_sent += 1
        self.bytes_sent += size


COUNTS = Counts()


def _forward(deliver: Any) -> Any:
    """A span and log record processor that hands each ended span, or each
    emitted log record, to ``deliver``."""
    from opentelemetry.sdk._logs import LogRecordProcessor
    from opentelemetry.sdk.trace import SpanProcessor

    class Forward(SpanProcessor, LogRecordProcessor):
        def on_end(self, span: Any) -> None:
            deliver(span)

        def on_emit(self, log_record: Any) -> None:
            deliver(log_record)

        def shutdown(self) -> None:
            pass

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return Forward()


#: (logging level, OTLP SeverityNumber member, its text), highest first.
_SEVERITY = (
    (logging.CRITICAL, "FATAL", "FATAL"),
    (logging.ERROR, "ERROR", "ERROR"),
    (logging.WARNING, "WARN", "WARN"),
    (logging.INFO, "INFO", "INFO"),
    (logging.DEBUG, "DEBUG", "DEBUG"),
)


class LogLines(logging.Handler):
    """The daemon's log lines, each an OTel log record of the SDK's logger:
    the same records its other handlers write, timestamped when they were
    made, with the logger's name and any traceback as attributes. Until the
    SDK is started (see ``Telemetry.start``) nobody can be watching, and a
    line goes nowhere."""

    def __init__(self) -> None:
        super().__init__()
        self.logger: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.logger is None:
            return
        try:
            from opentelemetry._logs import LogRecord, SeverityNumber

            name, text = next(((n, t) for level, n, t in _SEVERITY if record.levelno >= level), ("TRACE", "TRACE"))
            attributes = {"logger.name": record.name}
            if record.exc_info:
                attributes["exception.stacktrace"] = logging.Formatter().formatException(record.exc_info)
            context = None
            said: tuple[Any, dict[str, str]] | None = getattr(record, _OTEL, None)
            if said is not None:  # a turn's or a tool call's line: its ids, and the span's trace
                span, more = said
                attributes.update(more)
                context = _trace().set_span_in_context(span)
            self.logger.emit(
                LogRecord(
                    timestamp=int(record.created * 1e9),
                    context=context,
                    observed_timestamp=time.time_ns(),
                    severity_number=SeverityNumber[name],
                    severity_text=text,
                    body=record.getMessage(),
                    attributes=attributes,
                )
            )
        except Exception:  # noqa: BLE001 - logging's own rule: a handler never raises
            self.handleError(record)


def _trace() -> Any:
    """``opentelemetry.trace``, imported when a span is first made (see ``Telemetry``)."""
    from opentelemetry import trace

    return trace


def _observer(read: Callable[[], int]) -> Callable[[CallbackOptions], list[Observation]]:
    """An observable counter's callback: what ``read`` says when it is collected."""
    from opentelemetry.metrics import Observation

    return lambda _options: [Observation(read())]


class Telemetry:
    """The OpenTelemetry SDK is started (:meth:`start`) when first needed: a
    subscription to a telemetry channel, a turn or a tool call to count, or a
    collector named at start-up. Its import is ~50 ms and ~8 MB that a daemon
    nobody has used yet should not pay; the metrics are still cumulative since
    the process started, because nothing they count happens before."""

    tracer_provider: TracerProvider
    tracer: Tracer
    logger_provider: LoggerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider
    turns: Counter
    tool_calls: Counter
    tokens: Counter

    def __init__(self, environ: dict[str, str] | None = None) -> None:
        environ = dict(os.environ if environ is None else environ)
        self.host: Host | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._turns: dict[tuple[str, str], Any] = {}  # (chat, turnId) -> span
        self._tools: dict[tuple[str, str], Any] = {}  # (chat, toolCallId) -> span
        #: Every logs channel ever subscribed to, as spelled (``logs/INFO`` is ``logs/info``), and its lowest severity.
        self._log_channels: dict[str, int] = {}
        #: The ``ahpd`` logger's own level while a debug listener has it lowered (see ``_follow_levels``).
        self._configured: int | None = None
        self.collector = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
        self.handler = LogLines()
        self.started = False
        if self.collector:
            self.start()

    def start(self) -> None:
        """Make the SDK's providers (once)."""
        if self.started:
            return
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        self.started = True
        resource = Resource.create(
            {
                "service.name": "ahpd",
                "service.version": __version__,
                "host.name": socket.gethostname(),
            }
        )
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(_forward(lambda span: self._soon(self._send_span, span)))
        self.tracer = self.tracer_provider.get_tracer("ahpd", __version__)
        self.logger_provider = LoggerProvider(resource=resource)
        self.logger_provider.add_log_record_processor(_forward(self._log_emitted))
        self.reader = InMemoryMetricReader()
        readers: list[MetricReader] = [self.reader]
        if self.collector:
            readers.append(self._to_collector())
        self.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        meter = self.meter_provider.get_meter("ahpd", __version__)
        self.turns = meter.create_counter("ahpd.turns", unit="{turn}", description="turns started")
        self.tool_calls = meter.create_counter("ahpd.tool_calls", unit="{call}", description="tool calls started")
        self.tokens = meter.create_counter(
            "ahpd.tokens", unit="{token}", description="tokens the agents reported, by direction"
        )
        for name, unit, description, read in (
            ("ahpd.connections", "{connection}", "connections accepted", lambda: COUNTS.connections),
            ("ahpd.frames_sent", "{frame}", "frames queued to clients", lambda: COUNTS.frames_sent),
            ("ahpd.bytes_sent", "By", "bytes queued to clients", lambda: COUNTS.bytes_sent),
            ("ahpd.queue_closes", "{connection}", "clients closed for falling behind", lambda: COUNTS.queue_closes),
        ):
            meter.create_observable_counter(name, callbacks=[_observer(read)], unit=unit, description=description)
        self.handler.logger = self.logger_provider.get_logger("ahpd", __version__)

    def _to_collector(self) -> MetricReader:
        """The SDK's own OTLP/HTTP exporters, for the collector the standard
        variables name; their batching runs in the SDK's threads."""
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        return PeriodicExportingMetricReader(OTLPMetricExporter())

    @property
    def capabilities(self) -> dict[str, str]:
        """``InitializeResult.telemetry``."""
        return {"logs": LOGS, "traces": TRACES, "metrics": METRICS}

    # -- lifetime ------------------------------------------------------------------

    def attach(self, host: Host) -> None:
        self.host = host
        host.bus.observers.append(self.on_action)

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver from now on, and send the metrics every ``METRICS_INTERVAL``."""
        self._token = trio.lowlevel.current_trio_token()
        logging.getLogger().addHandler(self.handler)
        if self.collector:
            log.info("telemetry also goes to the OTLP collector at %s", self.collector)
        task_status.started()
        while True:
            await trio.sleep(METRICS_INTERVAL)
            self.send_metrics()

    def close(self) -> None:
        """Stop delivering, and flush what the collector is still owed."""
        logging.getLogger().removeHandler(self.handler)
        self._token = None
        if self._configured is not None:
            logging.getLogger("ahpd").setLevel(self._configured)
            self._configured = None
        if not self.started:
            return
        for provider in (self.tracer_provider, self.logger_provider, self.meter_provider):
            try:
                provider.shutdown()
            except Exception:  # noqa: BLE001 - a collector gone away must not stop the daemon stopping
                log.warning("telemetry: flushing to the collector failed", exc_info=True)

    def _soon(self, fn: Any, *args: Any) -> None:
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            pass

    # -- subscribing -----------------------------------------------------------------

    def subscribe(self, peer: Peer, uri: str) -> dict[str, Any]:
        """Subscribe ``peer`` to a telemetry channel: an empty result, as the
        channel holds no state; a URI that is not one refused saying why."""
        problem = self.malformed(uri)
        if problem is not None:
            raise RpcError(INVALID_PARAMS, problem, {"path": "$.channel", "channel": uri})
        self.start()
        peer.subscriptions.add(uri)
        if uri.startswith(_LOGS_PREFIX):
            self._log_channels[uri] = LEVELS[uri.removeprefix(_LOGS_PREFIX).lower()]
            self._follow_levels()
        if uri == METRICS:
            self._soon(self.send_metrics)
        return {}

    def left(self, uri: str) -> None:
        """Somebody stopped listening to ``uri`` (unsubscribed or went away)."""
        if uri in self._log_channels:
            self._follow_levels()

    def _follow_levels(self) -> None:
        """The ``ahpd`` loggers make debug lines while somebody listens to
        ``logs/debug`` or ``logs/trace``, and only then: a line nobody asked
        for is never made. stderr and the log file keep the level the daemon
        was started with (their handlers hold it, ``ahpd.ops.logs``)."""
        ours = logging.getLogger("ahpd")
        low = any(lowest < LEVELS["info"] and self._watching(uri) for uri, lowest in self._log_channels.items())
        if low and self._configured is None and ours.getEffectiveLevel() > logging.DEBUG:
            self._configured = ours.level
            ours.setLevel(logging.DEBUG)
        elif not low and self._configured is not None:
            ours.setLevel(self._configured)
            self._configured = None

    @staticmethod
    def malformed(uri: str) -> str | None:
        if uri in (TRACES, METRICS):
            return None
        if uri.startswith(_LOGS_PREFIX):
            level = uri.removeprefix(_LOGS_PREFIX)
            if level.lower() in LEVELS:  # the short names are case-insensitive (the spec's telemetry channel)
                return None
            return f"{uri}: {level!r} is not a log level; expand {LOGS} with one of {', '.join(LEVELS)}"
        return f"{uri} is not a telemetry channel of this host: it has {LOGS}, {TRACES} and {METRICS}"

    def _watching(self, uri: str) -> list[Peer]:
        return [p for p in self.host.peers if uri in p.subscriptions] if self.host is not None else []

    def _notify(self, method: str, uri: str, payload: dict[str, Any], peers: list[Peer]) -> None:
        if peers and self.host is not None:
            self.host.bus.notify(peers, method, {"channel": uri, "payload": payload})

    # -- logs ---------------------------------------------------------------------------

    def _log_emitted(self, record: Any) -> None:
        self._soon(self._send_log, record)

    def _send_log(self, record: Any) -> None:
        severity = record.log_record.severity_number.value if record.log_record.severity_number else 0
        payload = None
        for uri, lowest in self._log_channels.items():
            peers = self._watching(uri) if severity >= lowest else []
            if peers:
                payload = payload or otlp.encode_logs([record])
                self._notify("otlp/exportLogs", uri, payload, peers)

    # -- traces ---------------------------------------------------------------------------

    def _send_span(self, span: Any) -> None:
        peers = self._watching(TRACES)
        if peers:
            self._notify("otlp/exportTraces", TRACES, otlp.encode_spans([span]), peers)

    def on_action(self, channel: str, action: dict[str, Any]) -> None:
        """An action the bus applied: turns and tool calls as spans and counts.
        Never raises: telemetry failing must not fail what it watches."""
        try:
            self._on_action(channel, action)
        except Exception:  # noqa: BLE001
            log.exception("telemetry: %s on %s could not be recorded", action.get("type"), channel)

    def _on_action(self, channel: str, action: dict[str, Any]) -> None:
        kind = action.get("type", "")
        if not kind.startswith("chat/"):
            return
        if kind in _COUNTED:
            self.start()
        if kind == "chat/turnStarted":
            self.turns.add(1)
            owner = self.host.sessions.chat_owner.get(channel) if self.host and self.host.sessions else None
            session = owner.session.uri if owner is not None else ""
            self._turns[(channel, action["turnId"])] = self.tracer.start_span(
                "turn",
                kind=_trace().SpanKind.SERVER,
                attributes={
                    "ahp.session": session,
                    "ahp.session.id": session.rpartition("/")[2],
                    "ahp.chat": channel,
                    "ahp.turn.id": action["turnId"],
                },
            )
            span = self._turns[(channel, action["turnId"])]
            self._say(span, "turn %s started on %s", action["turnId"], channel)
        elif kind == "chat/toolCallStart":
            self.tool_calls.add(1, {"tool.name": action.get("toolName") or ""})
            parent = self._turns.get((channel, action["turnId"]))
            context = _trace().set_span_in_context(parent) if parent is not None else None
            self._tools[(channel, action["toolCallId"])] = self.tracer.start_span(
                f"tool {action.get('toolName') or action['toolCallId']}",
                kind=_trace().SpanKind.CLIENT,
                context=context,
                attributes={
                    "ahp.chat": channel,
                    "ahp.turn.id": action["turnId"],
                    "ahp.tool_call.id": action["toolCallId"],
                    "tool.name": action.get("toolName") or "",
                },
            )
        elif kind == "chat/toolCallComplete":
            span = self._tools.pop((channel, action["toolCallId"]), None)
            if span is not None:
                failed = not (action.get("result") or {}).get("success", True)
                if failed:
                    span.set_status(_trace().Status(_trace().StatusCode.ERROR, "the tool call failed"))
                name = span.attributes.get("tool.name") or ""
                self._say(span, "tool %s (call %s) %s", name, action["toolCallId"], "failed" if failed else "completed")
                span.end()
        elif kind == "chat/usage":
            usage = action.get("usage") or {}
            for direction in ("input", "output"):
                count = usage.get(f"{direction}Tokens")
                if isinstance(count, int | float) and count > 0:
                    self.tokens.add(int(count), {"direction": direction})
        elif kind in ("chat/turnComplete", "chat/error", "chat/turnCancelled"):
            span = self._turns.pop((channel, action["turnId"]), None)
            for key in [
                k
                for k, s in self._tools.items()
                if k[0] == channel and s.attributes.get("ahp.turn.id") == action["turnId"]
            ]:
                self._tools.pop(key).end()  # a call the ending cut short ends with its turn
            if span is not None:
                if kind == "chat/error":
                    message = str((action.get("part") or {}).get("message", ""))
                    span.set_status(_trace().Status(_trace().StatusCode.ERROR, message))
                span.set_attribute("ahp.turn.ending", kind)
                self._say(span, "turn %s ended on %s (%s)", action["turnId"], channel, kind.removeprefix("chat/"))
                span.end()

    @staticmethod
    def _say(span: Any, message: str, *args: Any) -> None:
        """A line of a turn's or a tool call's (INFO, on ``ahpd.host.turns``),
        carrying its span's ids and the AHP ids the span has as attributes."""
        attributes = {k: str(v) for k, v in (span.attributes or {}).items() if k.startswith(("ahp.", "tool."))}
        turns_log.info(message, *args, extra={_OTEL: (span, attributes)})

    # -- metrics ------------------------------------------------------------------------------

    def send_metrics(self) -> None:
        peers = self._watching(METRICS)
        if not peers or not self.started:
            return
        data = self.reader.get_metrics_data()
        if data is not None:
            self._notify("otlp/exportMetrics", METRICS, otlp.encode_metrics(data), peers)


# -- what the kernel asks (ahpd.host.table.KERNEL_HOOKS) ----------------------------------


def capabilities_of(host: Any) -> dict[str, Any]:
    """``InitializeResult.telemetry``, when the host has telemetry."""
    telemetry = getattr(host, "telemetry", None)
    return {"telemetry": telemetry.capabilities} if telemetry is not None else {}


def on_left(host: Any, peer: Peer, uri: str) -> None:
    """A telemetry channel lost a listener."""
    telemetry = getattr(host, "telemetry", None)
    if telemetry is not None and uri.startswith("ahp-otlp:"):
        telemetry.left(uri)


def subscribe_stateless(host: Any, peer: Peer, uri: str) -> dict[str, Any] | None:
    """An ``ahp-otlp:`` channel: no snapshot, never replayed."""
    telemetry = getattr(host, "telemetry", None)
    if telemetry is None or not uri.startswith("ahp-otlp:"):
        return None
    return telemetry.subscribe(peer, uri)
