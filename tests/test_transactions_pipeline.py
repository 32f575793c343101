"""The exactly-once pipeline: a consume-transform-produce process (``send_offsets_to_transaction``,
read_committed input) is SIGKILLed at random moments and restarted; every input record
appears exactly once in the read_committed output, and the group's committed offsets are
the input's end. Bounded: 300 records, 4 kills. Then the same with the broker SIGKILLed
(twice) under a running pipeline and restarted on its log directory."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokkr.core.testing import free_port

from tests.txn_coordinator import FAST, ready

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

PROCESSES = Path(__file__).parent / "txn_processes.py"
RECORDS, KILLS = 300, 4


def test_a_pipeline_killed_at_random_moments_produces_each_record_exactly_once(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    for name in ("in", "out"):
        b.call(b.broker.create_topic, name)
    ready(b)
    inputs = [b"%d" % i for i in range(RECORDS)]
    source = Producer({"bootstrap.servers": b.bootstrap_servers})
    rng = random.Random(14)
    for i, v in enumerate(inputs):
        source.produce("in", v, partition=i % 3)
        if i % 50 == 49:
            source.flush(10)
            time.sleep(0.1)  # input keeps arriving while the pipeline runs and dies
    source.flush(10)
    command = [sys.executable, str(PROCESSES), "pipeline", b.bootstrap_servers]
    for _ in range(KILLS):
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 2.0))
        run.kill()
        run.wait(10)
    last = subprocess.run(command, capture_output=True, timeout=90)
    assert b"idle" in last.stdout

    reader = Consumer(
        {"bootstrap.servers": b.bootstrap_servers, "group.id": "verify", "isolation.level": "read_committed"}
    )
    reader.assign([TopicPartition("out", i, 0) for i in range(3)])
    got: list[bytes] = []
    deadline = time.time() + 20
    while time.time() < deadline and len(got) < RECORDS:
        got += [m.value() for m in reader.consume(100, 0.5) if not m.error()]
    got += [m.value() for m in reader.consume(100, 1.0) if not m.error()]
    reader.close()
    assert sorted(got) == sorted(b"out-" + v for v in inputs)  # each exactly once
    group = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "pipe"})
    committed = group.committed([TopicPartition("in", i) for i in range(3)], 10)
    group.close()
    assert [tp.offset for tp in committed] == [RECORDS // 3] * 3


def start_broker(log_dir: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(PROCESSES), "broker", str(log_dir), str(port), "written"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout.readline().startswith("listening")
    return proc


def test_the_pipeline_stays_exactly_once_when_the_broker_is_killed(tmp_path):
    port, log_dir = free_port(), tmp_path / "data"
    bootstrap = f"127.0.0.1:{port}"
    broker = start_broker(log_dir, port)
    pipelines: list[subprocess.Popen] = []
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for name in ("in", "out"):
            admin.create_topics([NewTopic(name, 3)])[name].result(10)
        source = Producer({"bootstrap.servers": bootstrap})
        inputs = [b"%d" % i for i in range(RECORDS)]
        for i, v in enumerate(inputs):
            source.produce("in", v, partition=i % 3)
        source.flush(10)
        command = [sys.executable, str(PROCESSES), "pipeline", bootstrap]
        rng = random.Random(890)
        for _ in range(2):  # the broker dies under a running pipeline, twice
            pipelines.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
            time.sleep(rng.uniform(1.0, 2.5))
            broker.kill()
            broker.wait(10)
            broker = start_broker(log_dir, port)
            pipelines[-1].kill()  # if it survived, it may be stuck retrying: start afresh
            pipelines[-1].wait(10)
        deadline = time.monotonic() + 90
        while True:  # run to completion, restarted whenever the broker's recovery made it give up
            last = subprocess.run(command, capture_output=True, timeout=90)
            if b"idle" in last.stdout or time.monotonic() > deadline:
                break
        assert b"idle" in last.stdout
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": "read_committed"})
        reader.assign([TopicPartition("out", i, 0) for i in range(3)])
        got: list[bytes] = []
        end = time.time() + 20
        while time.time() < end and len(got) < RECORDS:
            got += [m.value() for m in reader.consume(100, 0.5) if not m.error()]
        got += [m.value() for m in reader.consume(100, 1.0) if not m.error()]
        reader.close()
        assert sorted(got) == sorted(b"out-" + v for v in inputs)
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "pipe"})
        committed = group.committed([TopicPartition("in", i) for i in range(3)], 10)
        group.close()
        assert [tp.offset for tp in committed] == [RECORDS // 3] * 3
    finally:
        for p in pipelines:
            p.kill()
        broker.kill()
        broker.wait(10)
