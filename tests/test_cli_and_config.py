"""``brokkr serve`` as a user runs it, and configuration with Kafka's names."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from brokkr.core.config import BrokerConfig, parse_overrides, read_properties
from brokkr.core.errors import ConfigError
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from serve import Served
from wire import API_VERSIONS


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_from_a_properties_file_and_shut_down_gracefully(tmp_path, sig):
    props = tmp_path / "server.properties"
    props.write_text(
        "# a Kafka-style file\nlisteners=PLAINTEXT://127.0.0.1:0\nnum.partitions: 2\nlog.dirs=\\\n  ./kafka-data\n"
    )
    served = Served(str(props), "--override", "auto.create.topics.enable=true", cwd=tmp_path)
    try:
        with RawClient(served.address) as c:
            assert c.request(API_VERSIONS, 0, request_spec(API_VERSIONS).cls()).error_code == 0
            meta = c.request(
                3, 12, request_spec(3).cls(topics=[request_spec(3).struct("MetadataRequestTopic")(name="x")])
            )
            assert len(meta.topics[0].partitions) == 2
        served.proc.send_signal(sig)
        assert served.proc.wait(timeout=10) == 0
        assert "stopped" in served.output()
    finally:
        served.proc.kill()


def test_serve_tunes_the_garbage_collector_for_a_server():
    """``brokkr serve`` (its own process) raises the young generation's threshold and
    freezes what it holds at start; a broker embedded elsewhere leaves them alone."""
    code = (
        "import asyncio, gc\n"
        "from brokkr.core import cli\n"
        "from brokkr.core.broker import Broker\n"
        "async def embedded():\n"
        "    async with Broker({'listeners': 'PLAINTEXT://127.0.0.1:0', 'brokkr.storage': 'memory'}):\n"
        "        pass\n"
        "asyncio.run(embedded())\n"
        "print(gc.get_threshold()[0], gc.get_freeze_count())\n"
        "cli._collect_garbage_less_often()\n"
        "print(gc.get_threshold()[0], gc.get_freeze_count() > 1000)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["700 0", "10000 True"]


def test_serve_rejects_bad_settings_with_a_clear_message(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "serve", "--override", "num.partitions=zero"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "num.partitions" in proc.stderr and "Traceback" not in proc.stderr


def test_properties_parsing(tmp_path):
    f = tmp_path / "p.properties"
    f.write_text("a=1\n! comment\n# comment\nb : two words\nc=x\\\n   y\nempty=\n")
    assert read_properties(f) == {"a": "1", "b": "two words", "c": "xy", "empty": ""}
    assert parse_overrides(["x.y=1", "z= 2 "]) == {"x.y": "1", "z": "2"}
    with pytest.raises(ConfigError):
        parse_overrides(["novalue"])


def test_kafka_defaults_and_topic_synonyms():
    cfg = BrokerConfig({"log.retention.hours": "1", "log.segment.bytes": "1000"})
    assert cfg["message.max.bytes"] == 1048588 and cfg["socket.request.max.bytes"] == 104857600
    assert cfg["listeners"] == ["PLAINTEXT://127.0.0.1:9092"] and cfg["log.dirs"] == ["./data"]
    topic = cfg.topic_config({"retention.bytes": "5"})
    assert topic["retention.ms"] == 3_600_000 and topic["segment.bytes"] == 1000
    assert topic["retention.bytes"] == 5 and topic["max.message.bytes"] == 1048588
    assert topic.source("retention.bytes") == 1 and topic["cleanup.policy"] == ["delete"]
    with pytest.raises(ConfigError, match="Unknown topic config"):
        cfg.topic_config({"no.such": "1"})
    with pytest.raises(ConfigError, match="compression.type"):
        BrokerConfig({"compression.type": "brotli"})


def test_a_misspelt_setting_refuses_to_start_and_an_unknown_one_is_warned_about(tmp_path, caplog):
    proc = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "serve", "--override", "log.retenton.ms=1000"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "Unknown configuration 'log.retenton.ms': did you mean 'log.retention.ms'?" in proc.stderr
    assert "Traceback" not in proc.stderr
    with caplog.at_level("WARNING", logger="brokkr.core.config"):
        config = BrokerConfig({"foo.bar": "1", "num.partitions": "2"})
    assert config["num.partitions"] == 2
    assert "The configuration foo.bar was supplied but isn't a known config." in caplog.text
    with pytest.raises(ConfigError, match="did you mean 'num.partitions'"):
        BrokerConfig({"num.partitoins": "2"})


def test_families_of_settings_and_kafkas_log_dir():
    from brokkr.plugins.sinks.spark.sink import CONFIGS

    config = BrokerConfig({"brokkr.sink.spark.conf.spark.executor.memory": "2g", "log.dir": "/srv/kafka"}, CONFIGS)
    assert config.explicit["brokkr.sink.spark.conf.spark.executor.memory"] == "2g"
    assert config["log.dirs"] == ["/srv/kafka"]
    assert BrokerConfig({"log.dir": "/a", "log.dirs": "/b,/c"})["log.dirs"] == ["/b", "/c"]
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        BrokerConfig({"max.connections.per.ip.overrides": "127.0.0.1"})
