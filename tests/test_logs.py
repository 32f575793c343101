"""What the broker logs: its plugins (built-in ones at DEBUG) and given settings at start,
where its data is, failed authentications, connections at DEBUG, and one DEBUG line per
request on ``brokkr.request.logger`` (Kafka's request logger)."""

from __future__ import annotations

import logging
import time

from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from wire import API_VERSIONS


class Passed:
    @hookimpl
    def brokkr_after_log_append(self):
        pass


def test_start_logs_each_plugin_and_the_settings_given_with_secrets_masked(brokkr_broker_factory, caplog, tmp_path):
    with caplog.at_level(logging.DEBUG, logger="brokkr"):
        broker = brokkr_broker_factory(
            {
                "num.partitions": "3",
                "ssl.key.password": "s3cret",
                "brokkr.plugins.disabled": "brokkr.plugins.sinks.spark.sink",
                "log.dirs": str(tmp_path / "d"),
            },
            plugins=[Passed()],
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "brokkr" and r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records if r.name == "brokkr" and r.levelno == logging.DEBUG]
    assert any(line.startswith("plugin brokkr.plugins.codecs.zstd (built in) from ") for line in debug)
    assert not any(line.startswith("plugin brokkr.") for line in lines), (
        "built in: at DEBUG (brokkr plugins lists them)"
    )
    assert any(line.startswith("plugin ") and "(passed to Broker)" in line for line in lines)
    assert any("example-policy (brokkr-example-policy 0.1.0)" in line for line in lines), "entry points, with versions"
    assert not any("brokkr.plugins.sinks.spark.sink" in line and line.startswith("plugin") for line in lines + debug)
    assert "setting num.partitions=3" in lines
    assert "setting ssl.key.password=[hidden]" in lines and not any("s3cret" in line for line in lines)
    assert lines[-1] == f"brokkr node 0 listening on {broker.bootstrap_servers} (data in {tmp_path / 'd'})"


def test_the_start_line_says_a_storage_keeps_nothing(brokkr_broker_factory, caplog):
    with caplog.at_level(logging.INFO, logger="brokkr"):
        broker = brokkr_broker_factory({"brokkr.storage": "memory"})
    started = f"brokkr node 0 listening on {broker.bootstrap_servers} (data in memory only: brokkr.storage=memory)"
    assert started in [r.getMessage() for r in caplog.records]


def test_connections_opening_and_closing_are_logged_at_debug_only(brokkr_broker, caplog):
    with caplog.at_level(logging.DEBUG, logger="brokkr"):
        with RawClient(brokkr_broker.bootstrap_servers) as c:
            c.request(
                API_VERSIONS, 3, request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")
            )
        deadline = time.monotonic() + 5
        while not any(r.getMessage().endswith(": closed") for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.01)  # the broker sees the close on its own thread
    opened = [r for r in caplog.records if ": connection from 127.0.0.1:" in r.getMessage()]
    closed = [r for r in caplog.records if r.getMessage().endswith(": closed")]
    assert len(opened) == len(closed) == 1 and {r.levelno for r in opened + closed} == {logging.DEBUG}


def test_each_request_is_logged_at_debug_on_the_request_logger(brokkr_broker, caplog):
    with caplog.at_level(logging.DEBUG, logger="brokkr.request.logger"):
        with RawClient(brokkr_broker.bootstrap_servers, client_id="logged") as c:
            c.request(
                API_VERSIONS, 3, request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")
            )
    [line] = [r.getMessage() for r in caplog.records if r.name == "brokkr.request.logger"]
    assert line.startswith("Completed request: ApiVersions v3 correlation ")
    assert "(client logged, principal User:ANONYMOUS, listener PLAINTEXT)" in line and "bytes out" in line
