"""Kafka's broker metrics on a Prometheus endpoint (prometheus-client), opt in with
``brokkr.metrics.port``: ``GET /metrics`` is the text scrape, ``GET /health`` answers 200
while the broker serves (503 once it stops).

Names follow Kafka's JMX beans, as the Prometheus JMX exporter spells them, so a Kafka
operator's dashboards find them:

- ``kafka_server_brokertopicmetrics_messagesinpersec_total`` and ``..._bytesinpersec_total``
  (records and bytes appended), ``..._bytesoutpersec_total`` (fetched),
  ``..._failedproducerequestspersec_total`` and ``..._failedfetchrequestspersec_total``:
  with a ``topic`` label, and without one for all topics;
- ``kafka_network_requestmetrics_requestspersec_total{request}``,
  ``kafka_network_requestmetrics_totaltimems{request}`` (a summary, and a histogram for
  percentiles) and ``kafka_network_requestmetrics_errorspersec_total{request,error}``;
- gauges read at scrape time: ``kafka_server_socketservermetrics_connection_count{listener}``,
  ``kafka_log_log_size``, ``kafka_log_log_logstartoffset``, ``kafka_log_log_logendoffset``
  and ``kafka_cluster_partition_highwatermark`` per partition,
  ``kafka_server_delayedoperationpurgatory_purgatorysize``,
  ``kafka_server_replicamanager_underreplicatedpartitions`` (0: one replica), and
  ``brokkr_hook_calls_total``/``brokkr_hook_seconds_total`` per hook and plugin, and
  ``brokkr_observer_failures_total{hook,plugin}``: the exceptions observer implementations
  raised, which the broker logged and swallowed (``broker.observer_failures``).

Plugins add their own collectors through ``brokkr_metrics_collectors``. With the port
unset nothing here is registered with the broker's hooks, so the hot path pays nothing.
"""

from __future__ import annotations

import collections
import functools
import http.server
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.errors import ConfigError, ErrorCode
from brokkr.core.plugins import hookimpl

if TYPE_CHECKING:
    from brokkr.core.broker import Broker

log = logging.getLogger("brokkr.metrics")

PRODUCE, FETCH = 0, 1
LATENCY_BUCKETS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

CONFIGS = [
    ConfigDef(
        "brokkr.metrics.port", ConfigType.INT, None, "Serve Prometheus metrics and /health on this port; unset: off."
    ),
    ConfigDef("brokkr.metrics.host", ConfigType.STRING, "127.0.0.1", "The address the metrics endpoint listens on."),
]


@hookimpl
def brokkr_config_definitions() -> list[ConfigDef]:
    return CONFIGS


PLUGIN_NAME = "brokkr.plugins.metrics.prometheus:metrics"


@hookimpl
def brokkr_broker_starting(broker: Broker) -> None:
    """With ``brokkr.metrics.port`` set, the broker gets its own metrics, registered as a
    plugin of that broker, its port taken (before the broker listens: so nothing it answers
    goes uncounted, and a port in use stops the start before any "listening"); without,
    nothing is registered."""
    if broker.config["brokkr.metrics.port"] is None:
        return
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError("brokkr.metrics.port needs prometheus-client: pip install 'brokkr[metrics]'") from None
    metrics = BrokerMetrics(broker)
    metrics.bind()
    broker.pm.register(metrics, name=PLUGIN_NAME)


class BrokerMetrics:
    """One broker's registry, counters, endpoint and the hooks that feed them."""

    def __init__(self, broker: Broker):
        from prometheus_client import CollectorRegistry, Counter, Histogram, Summary

        self.broker = broker
        self.registry = CollectorRegistry()
        r = self.registry
        prefix = "kafka_server_brokertopicmetrics_"
        self.messages_in = Counter(prefix + "messagesinpersec", "Records appended.", ["topic"], registry=r)
        self.bytes_in = Counter(prefix + "bytesinpersec", "Bytes appended.", ["topic"], registry=r)
        self.bytes_out = Counter(prefix + "bytesoutpersec", "Record bytes fetched.", ["topic"], registry=r)
        self.failed_produce = Counter(prefix + "failedproducerequestspersec", "Failed produces.", ["topic"], registry=r)
        self.failed_fetch = Counter(prefix + "failedfetchrequestspersec", "Failed fetches.", ["topic"], registry=r)
        prefix = "kafka_network_requestmetrics_"
        self.requests = Counter(prefix + "requestspersec", "Requests answered.", ["request", "version"], registry=r)
        self.total_time = Summary(prefix + "totaltimems", "Request time in ms.", ["request"], registry=r)
        self.total_time_buckets = Histogram(
            prefix + "totaltimems_histogram", "Request time in ms.", ["request"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.errors = Counter(prefix + "errorspersec", "Errors answered, by code.", ["request", "error"], registry=r)
        self.hook_calls: collections.Counter[tuple[str, str]] = collections.Counter()  # (hook, plugin)
        self.hook_seconds: collections.Counter[tuple[str, str]] = collections.Counter()
        r.register(_Gauges(self))
        for collectors in broker.hook.brokkr_metrics_collectors(broker=broker):
            for collector in collectors or ():
                r.register(collector)
        self._server: http.server.ThreadingHTTPServer | None = None
        self._serving: threading.Thread | None = None  # the endpoint's thread, once the broker has started

    def bind(self) -> None:
        """Take the endpoint's port (not answering yet); ConfigError naming the address if it cannot."""
        host, port = self.broker.config["brokkr.metrics.host"], self.broker.config["brokkr.metrics.port"]
        server = http.server.ThreadingHTTPServer((host, port), _handler(self), bind_and_activate=False)
        try:
            server.server_bind()
        except OSError as exc:
            server.server_close()
            raise ConfigError(f"brokkr.metrics.port: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._server, self.port = server, server.server_address[1]

    def start(self) -> None:
        assert self._server is not None
        self._server.server_activate()
        self._serving = threading.Thread(target=self._server.serve_forever, name="brokkr-metrics", daemon=True)
        self._serving.start()
        self._time_hook_calls()
        log.info("metrics on http://%s:%d/metrics", self.broker.config["brokkr.metrics.host"], self.port)

    def _time_hook_calls(self) -> None:
        """Count and time every call of every plugin's hook implementations (those
        registered by now), per hook and plugin: pluggy calls ``impl.function``, which
        is wrapped here, so with metrics off nothing is wrapped and nothing is paid."""
        for name in dir(self.broker.hook):
            caller = getattr(self.broker.hook, name)
            if not name.startswith("brokkr_") or not hasattr(caller, "get_hookimpls"):
                continue
            for impl in caller.get_hookimpls():
                if impl.plugin is not self:
                    impl.function = self._timed(impl.function, (name, impl.plugin_name))

    def _timed(self, function, key: tuple[str, str]):
        calls, seconds, clock = self.hook_calls, self.hook_seconds, time.perf_counter

        @functools.wraps(function)  # __wrapped__: an observer's failure is put down to its plugin
        def timed(*args):
            start = clock()
            try:
                return function(*args)
            finally:
                calls[key] += 1
                seconds[key] += clock() - start

        return timed

    # -- hooks (registered only when metrics are on) -----------------------------------

    @hookimpl
    def brokkr_broker_started(self) -> None:
        self.start()

    @hookimpl
    def brokkr_after_log_append(self, partition, info) -> None:
        topic = partition.topic.name
        for labels in (topic, ""):
            self.messages_in.labels(labels).inc(info.record_count)
            self.bytes_in.labels(labels).inc(info.size)

    @hookimpl
    def brokkr_request_completed(self, context, header, response, elapsed_ms) -> None:
        name = header.api_name
        self.requests.labels(name, str(header.api_version)).inc()
        self.total_time.labels(name).observe(elapsed_ms)
        self.total_time_buckets.labels(name).observe(elapsed_ms)
        for code in _error_codes(response):
            self.errors.labels(name, ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)).inc()
        if header.api_key == FETCH:
            for t in response.responses:
                known = self.broker.topics_by_id.get(t.topic_id) if t.topic_id.int else None
                topic = known.name if known is not None else t.topic  # "" for a topic id since deleted
                fetched = sum(len(p.records or b"") for p in t.partitions)
                failed = any(p.error_code for p in t.partitions)
                for labels in (topic, "") if topic else ("",):
                    self.bytes_out.labels(labels).inc(fetched)
                    if failed:
                        self.failed_fetch.labels(labels).inc()
        elif header.api_key == PRODUCE:
            for t in response.responses:
                if any(p.error_code for p in t.partition_responses):
                    for labels in (t.name, ""):
                        self.failed_produce.labels(labels).inc()

    @hookimpl
    def brokkr_broker_stopping(self) -> None:
        if self._server is not None:
            if self._serving is not None:  # shutdown() waits for serve_forever, which must have started
                self._server.shutdown()
            self._server.server_close()


def _error_codes(obj: Any, depth: int = 0) -> list[int]:
    """Every non-zero ``error_code`` in a response (only walked when metrics are on)."""
    found = []
    code = getattr(obj, "error_code", 0)
    if code:
        found.append(code)
    if depth < 3:
        for field in getattr(type(obj), "__attrs_attrs__", ()):
            value = getattr(obj, field.name)
            if isinstance(value, list) and value and hasattr(value[0], "__attrs_attrs__"):
                for item in value:
                    found.extend(_error_codes(item, depth + 1))
    return found


class _Gauges:
    """Values read when scraped: connections, partitions' logs, the purgatory, hooks,
    observers' failures."""

    def __init__(self, metrics: BrokerMetrics):
        self.metrics = metrics

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        broker = self.metrics.broker
        connections = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count", "Open connections.", labels=["listener"]
        )
        for listener, count in broker.open_connections().items():
            connections.add_metric([listener], count)
        yield connections
        size = GaugeMetricFamily("kafka_log_log_size", "Partition size in bytes.", labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset.", labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset.", labels=["topic", "partition"])
        hw = GaugeMetricFamily(
            "kafka_cluster_partition_highwatermark", "High watermark.", labels=["topic", "partition"]
        )
        for topic in list(broker.topics.values()):
            for p in topic.partitions:
                labels = [topic.name, str(p.index)]
                size.add_metric(labels, sum(s.size for s in p.log.segments()))
                start.add_metric(labels, p.log.log_start_offset)
                end.add_metric(labels, p.log.log_end_offset)
                hw.add_metric(labels, p.high_watermark)
        yield from (size, start, end, hw)
        yield GaugeMetricFamily(
            "kafka_server_delayedoperationpurgatory_purgatorysize", "Delayed operations waiting.", len(broker.purgatory)
        )
        yield GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions", "Under-replicated partitions (one replica: 0).", 0
        )
        calls = CounterMetricFamily("brokkr_hook_calls", "Hook implementation calls.", labels=["hook", "plugin"])
        seconds = CounterMetricFamily("brokkr_hook_seconds", "Time in hook implementations.", labels=["hook", "plugin"])
        for key, n in sorted(self.metrics.hook_calls.items()):
            calls.add_metric(list(key), n)
            seconds.add_metric(list(key), self.metrics.hook_seconds[key])
        yield from (calls, seconds)
        failures = CounterMetricFamily(
            "brokkr_observer_failures", "Exceptions of observer hooks (logged, swallowed).", labels=["hook", "plugin"]
        )
        for key, n in sorted(broker.observer_failures.counts.items()):
            failures.add_metric(list(key), n)
        yield failures


def _handler(metrics: BrokerMetrics) -> type[http.server.BaseHTTPRequestHandler]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] == "/metrics":
                status, body, kind = 200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST
            elif self.path == "/health":
                serving = metrics.broker.serving
                status, body, kind = (200, b"serving\n", "text/plain") if serving else (503, b"stopped\n", "text/plain")
            else:
                status, body, kind = 404, b"not found\n", "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug("metrics endpoint: " + format, *args)

    return Handler
