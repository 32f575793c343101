"""``brokkr consumer-groups``, run as a user runs it, against a running broker with real
consumers: list, describe (offsets and lag, members, state), reset offsets (dry run, then
executed and resumed from), delete offsets and groups, and the errors Kafka's tool prints."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.test_tools import brokkr

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory({"group.initial.rebalance.delay.ms": 0})
    b.call(b.broker.create_topic, "orders", 2)
    producer = Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(20):
        producer.produce("orders", b"%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    return b


def consume(broker, group: str, count: int, close: bool = True) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    got = 0
    deadline = time.monotonic() + 30
    while got < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got += 1
            consumer.commit(message=msg, asynchronous=False)
    assert got == count
    if close:
        consumer.close()
    return consumer


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def test_list_and_describe_an_active_group(broker):
    server = ("--bootstrap-server", broker.bootstrap_servers)
    consumer = consume(broker, "busy", 12, close=False)
    try:
        assert brokkr("consumer-groups", *server, "--list").stdout == "busy\n"
        listed = brokkr("consumer-groups", *server, "--list", "--state", "Stable")
        assert table(listed.stdout) == [["GROUP", "STATE"], ["busy", "Stable"]]
        rows = table(brokkr("consumer-groups", *server, "--describe", "--group", "busy").stdout)
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"] + [
            "HOST",
            "CLIENT-ID",
        ]
        by_partition = {int(r[2]): r for r in rows[1:]}
        assert sum(int(r[3]) for r in by_partition.values()) == 12
        assert [int(by_partition[p][4]) for p in (0, 1)] == [10, 10]
        assert sum(int(r[5]) for r in by_partition.values()) == 8, "lag = log end - committed"
        assert all(r[6].startswith("rdkafka-") and r[7] == "/127.0.0.1" for r in by_partition.values())
        members = table(
            brokkr("consumer-groups", *server, "--describe", "--group", "busy", "--members", "--verbose").stdout
        )
        assert members[0][-2:] == ["#PARTITIONS", "ASSIGNMENT"] and members[1][4] == "2"
        assert members[1][5] == "orders(0),orders(1)"
        state = table(brokkr("consumer-groups", *server, "--describe", "--group", "busy", "--state").stdout)
        assert state[1][0] == "busy" and state[1][-3:] == ["range", "Stable", "1"]
        refused = brokkr(
            "consumer-groups", *server, "--reset-offsets", "--group", "busy", "--all-topics", "--to-earliest"
        )
        assert refused.returncode == 1
        assert "can only be reset if the group 'busy' is inactive, but the current state is Stable" in refused.stderr
        busy = brokkr("consumer-groups", *server, "--delete", "--group", "busy")
        assert busy.returncode == 1 and "NON_EMPTY_GROUP" in busy.stderr
    finally:
        consumer.close()
    empty = brokkr("consumer-groups", *server, "--describe", "--group", "busy")
    assert "Consumer group 'busy' has no active members." in empty.stdout
    missing = brokkr("consumer-groups", *server, "--describe", "--group", "nobody")
    assert missing.returncode == 1 and "Error: Consumer group 'nobody' does not exist." in missing.stderr


def test_reset_offsets_is_a_dry_run_until_executed(broker):
    server = ("--bootstrap-server", broker.bootstrap_servers)
    consume(broker, "g", 20)
    reset = ("--reset-offsets", "--group", "g", "--topic", "orders:0")
    dry = brokkr("consumer-groups", *server, *reset, "--to-offset", "3")
    assert table(dry.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["g", "orders", "0", "3"]]
    assert dry.stderr.startswith("WARN: No action will be performed as the --execute option is missing."), dry.stderr
    asked = brokkr("consumer-groups", *server, *reset, "--to-offset", "3", "--dry-run")
    assert (asked.stdout, asked.stderr) == (dry.stdout, ""), "a dry run asked for needs no warning"
    rows = table(brokkr("consumer-groups", *server, "--describe", "--group", "g").stdout)
    assert [r[3] for r in rows[1:] if r[2] == "0"] == ["10"], "a dry run changes nothing"
    shifted = brokkr("consumer-groups", *server, *reset, "--shift-by", "-100")
    assert table(shifted.stdout)[1][-1] == "0", "clamped to the earliest offset"
    done = brokkr("consumer-groups", *server, *reset, "--to-offset", "7", "--execute")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    consumer = consume(broker, "g", 3, close=False)  # resumes at 7 of partition 0: 3 records left
    consumer.close()
    latest = brokkr("consumer-groups", *server, "--reset-offsets", "--group", "g", "--all-topics", "--to-latest")
    assert {(r[2], r[3]) for r in table(latest.stdout)[1:]} == {("0", "10"), ("1", "10")}
    deleted = brokkr("consumer-groups", *server, "--delete-offsets", "--group", "g", "--topic", "orders:1")
    assert table(deleted.stdout)[1:] == [["orders", "1", "Successful"]]
    assert brokkr("consumer-groups", *server, "--delete", "--group", "g").stdout == (
        "Deletion of requested consumer groups ('g') was successful.\n"
    )
    assert brokkr("consumer-groups", *server, "--list").stdout == ""


def test_an_unreachable_broker_is_an_error():
    done = brokkr("consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert done.returncode == 1 and "cannot reach 127.0.0.1:1" in done.stderr


def test_piped_into_a_reader_that_has_gone_it_stops_quietly(broker):
    """As ``brokkr consumer-groups --list | head -1``: head exits once it has its line, and
    the tool's next write fails with EPIPE. Unix tools stop quietly; the broker was reached."""
    committer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "listed"})
    committer.commit(offsets=[TopicPartition("orders", 0, 5)], asynchronous=False)  # a group, Empty
    committer.close()
    command = [sys.executable, "-m", "brokkr.core.cli", "--log-level", "WARNING", "consumer-groups"]
    tool = subprocess.Popen(
        [*command, "--bootstrap-server", broker.bootstrap_servers, "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tool.stdout.close()  # the reader is gone before the tool writes its first line
    _, stderr = tool.communicate(timeout=60)
    assert (tool.returncode, stderr.decode()) == (1, "")
