"""The Prometheus endpoint: counters move by what was produced and fetched, gauges tell the
partitions' logs, a plugin's own collectors are exported, and with metrics off nothing is
registered on the request path."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import hookimpl
from brokkr.core.testing import RawClient
from wire import FETCH, METADATA, PRODUCE, batch, fetch_body, metadata_body, produce_body

prometheus_client = pytest.importorskip("prometheus_client")
from brokkr.plugins.metrics.prometheus import BrokerMetrics  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def endpoint(broker) -> BrokerMetrics:
    [metrics] = [p for p in broker.pm.get_plugins() if isinstance(p, BrokerMetrics)]
    return metrics


def scrape(broker) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint(broker).port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class OwnMetrics:
    @hookimpl
    def brokkr_metrics_collectors(self):
        from prometheus_client import Counter

        counter = Counter("tenant_widgets", "Widgets.", registry=None)
        counter.inc(7)
        return [counter]


def test_counters_move_by_what_was_produced_and_fetched(brokkr_broker_factory):
    broker = brokkr_broker_factory({"brokkr.metrics.port": "0"}, plugins=[OwnMetrics()])
    records = batch(10, value=b"v" * 1000)
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("m")).topics[0].error_code == 0
        for _ in range(5):
            assert c.request(PRODUCE, 9, produce_body("m", records)).responses[0].partition_responses[0].error_code == 0
        failed = c.request(PRODUCE, 9, produce_body("m", records, partition=7))
        assert failed.responses[0].partition_responses[0].error_code != 0
        fetched = c.request(FETCH, 12, fetch_body("m", max_wait_ms=0)).responses[0].partitions[0].records
    m = scrape(broker)
    assert m[("kafka_server_brokertopicmetrics_messagesinpersec_total", (("topic", "m"),))] == 50
    assert m[("kafka_server_brokertopicmetrics_messagesinpersec_total", (("topic", ""),))] == 50
    assert m[("kafka_server_brokertopicmetrics_bytesinpersec_total", (("topic", "m"),))] == 5 * len(records)
    assert m[("kafka_server_brokertopicmetrics_bytesoutpersec_total", (("topic", "m"),))] == len(fetched)
    assert m[("kafka_server_brokertopicmetrics_failedproducerequestspersec_total", (("topic", "m"),))] == 1
    assert m[("kafka_network_requestmetrics_requestspersec_total", (("request", "Produce"), ("version", "9")))] == 6
    errors = (
        "kafka_network_requestmetrics_errorspersec_total",
        (("error", "UNKNOWN_TOPIC_OR_PARTITION"), ("request", "Produce")),
    )
    assert m[errors] == 1
    assert m[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))] == 6
    assert m[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", "m")))] == 50
    size = sum(s.size for s in broker.partition("m", 0).log.segments())
    assert m[("kafka_log_log_size", (("partition", "0"), ("topic", "m")))] == size
    assert m[("kafka_server_socketservermetrics_connection_count", (("listener", "PLAINTEXT"),))] == 0
    hook = ("brokkr_hook_calls_total", (("hook", "brokkr_validate_records"), ("plugin", "brokkr.core.validation")))
    assert m[hook] == 5  # the produce to a partition that does not exist is refused before validation
    assert m[("brokkr_hook_seconds_total", hook[1])] > 0
    assert m[("tenant_widgets_total", ())] == 7
    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint(broker).port}/health", timeout=10) as r:
        assert r.status == 200 and r.read() == b"serving\n"


def test_with_metrics_off_nothing_is_on_the_request_path(brokkr_broker):
    assert brokkr_broker.hot.brokkr_request_completed is None
    assert not [p for p in brokkr_broker.pm.get_plugins() if isinstance(p, BrokerMetrics)]
    impls = brokkr_broker.hook.brokkr_after_log_append.get_hookimpls()
    assert not any("metrics" in impl.plugin_name for impl in impls)


def test_the_endpoint_stops_with_its_broker(brokkr_broker_factory):
    broker = brokkr_broker_factory({"brokkr.metrics.port": "0"})
    port = endpoint(broker).port
    broker.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)


def test_metrics_without_prometheus_client_say_which_extra_to_install(brokkr_broker_factory, monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ConfigError, match=r"pip install 'brokkr\[metrics\]'"):
        brokkr_broker_factory({"brokkr.metrics.port": "0"})


def test_a_metrics_port_in_use_stops_the_start_before_listening_and_names_the_address(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "brokkr.core.cli", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
            + ["--override", f"brokkr.metrics.port={port}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert f"brokkr: brokkr.metrics.port: cannot listen on 127.0.0.1:{port}: Address already in use" in done.stderr
    assert "listening on" not in done.stderr, "no broker said it listened"
