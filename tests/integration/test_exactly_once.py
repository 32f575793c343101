"""Exactly-once consume-transform-produce under failures (Kafka's transactions, end to end).

A pipeline process (tests/eos_pipeline.py: a read_committed consumer, a transactional
producer, ``send_offsets_to_transaction``) copies an input topic to an output topic. It
is SIGKILLed at random moments and restarted (one test), or the broker is (the other);
afterwards every input record is in the read_committed output exactly once, and the
group's committed offsets are the input's end offsets. Bounded: a fixed number of kills
(seeded, so a failure can be replayed with the same moments), each step under a timeout.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokkr.core.testing import free_port
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.serve import Served

PIPELINE = Path(__file__).parents[1] / "eos_pipeline.py"
RECORDS = 30000
PARTITIONS = 3
KILLS = 6
STEP_TIMEOUT_S = 60


class Pipeline:
    """One run of the pipeline process; its output lines are kept."""

    def __init__(self, bootstrap: str, idle_s: float):
        self.reported = 0
        self.proc = subprocess.Popen(
            [sys.executable, str(PIPELINE), bootstrap, "eos", "eos-txn", "in", "out", str(idle_s)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def wait_for(self, what: str, timeout: float = STEP_TIMEOUT_S) -> bool:
        """Until it reports ``what`` ("produced" or "committed"; True) or exits (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith("committed"):
                self.reported += int(line.split()[1])
            if line.startswith(what):
                return True
            if not line and self.proc.poll() is not None:
                return False
        raise AssertionError(f"the pipeline reported nothing {what} in time")

    def wait_and_kill_soon(self, rng: random.Random) -> None:
        """After its first transaction: at once when its next output is flushed and its
        offsets are not yet committed (the moment at-least-once pipelines duplicate), or at
        a random moment."""
        if self.wait_for("committed"):
            if rng.random() < 0.5:
                self.wait_for("produced")
            else:
                time.sleep(rng.uniform(0.0, 0.4))

    def kill(self) -> int:
        """SIGKILL it; how many records it reported committed (its last transaction may
        have committed unreported)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return self.reported + sum(int(line.split()[1]) for line in self.proc.stdout if line.startswith("committed"))


def _serve(port: int, data: Path) -> Served:
    return Served(
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}", cwd=data.parent
    )


def _setup(bootstrap: str) -> list[bytes]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in ("in", "out")]).values():
        f.result(30)
    values = [b"v%05d" % i for i in range(RECORDS)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, v in enumerate(values):
        producer.produce("in", v, key=b"k%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def _finish(bootstrap: str) -> None:
    """Run the pipeline to the end of the input, restarting it if it fails."""
    deadline = time.monotonic() + 4 * STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        last = Pipeline(bootstrap, idle_s=10)
        try:
            if last.proc.wait(2 * STEP_TIMEOUT_S) == 0:
                return
        finally:
            last.kill()
    raise AssertionError("the pipeline did not finish")


def _check(bootstrap: str, values: list[bytes]) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "checker",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        outputs = [TopicPartition("out", p, 0) for p in range(PARTITIONS)]
        ends = [consumer.get_watermark_offsets(tp, timeout=30)[1] for tp in outputs]
        consumer.assign(outputs)
        got: list[bytes] = []
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
            if all(tp.offset >= end for tp, end in zip(consumer.position(outputs), ends)):
                break
        missing = {v + b"!" for v in values} - set(got)
        duplicated = len(got) - len(set(got))
        assert not missing and not duplicated, f"{len(missing)} missing, {duplicated} duplicated of {len(values)}"
        assert sorted(got) == sorted(v + b"!" for v in values)
        group = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos", "enable.auto.commit": False})
        try:
            committed = group.committed([TopicPartition("in", p) for p in range(PARTITIONS)], timeout=30)
            ends = [group.get_watermark_offsets(TopicPartition("in", p), timeout=30)[1] for p in range(PARTITIONS)]
        finally:
            group.close()
        assert [tp.offset for tp in committed] == ends
    finally:
        consumer.close()


@pytest.mark.timeout(600)
def test_a_pipeline_killed_at_random_moments_outputs_every_record_once(tmp_path):
    rng = random.Random(os.environ.get("BROKKR_EOS_SEED", "pipeline"))
    port = free_port()
    served = _serve(port, tmp_path / "data")
    bootstrap = f"127.0.0.1:{port}"
    try:
        values = _setup(bootstrap)
        done = 0
        for _ in range(KILLS):
            run = Pipeline(bootstrap, idle_s=10)
            try:
                run.wait_and_kill_soon(rng)
            finally:
                done += run.kill()
        assert done < RECORDS, "every kill came after the input was copied: the test proves nothing"
        _finish(bootstrap)
        _check(bootstrap, values)
    finally:
        served.kill()


@pytest.mark.timeout(600)
def test_a_pipeline_whose_broker_is_killed_outputs_every_record_once(tmp_path):
    rng = random.Random(os.environ.get("BROKKR_EOS_SEED", "broker"))
    port, data = free_port(), tmp_path / "data"
    served = _serve(port, data)
    bootstrap = f"127.0.0.1:{port}"
    run, done = None, 0
    try:
        values = _setup(bootstrap)
        for _ in range(KILLS):
            if run is None or run.proc.poll() is not None:  # it failed with the broker: its supervisor restarts it
                if run is not None:
                    done += run.kill()
                run = Pipeline(bootstrap, idle_s=10)
            run.wait_and_kill_soon(rng)
            served.kill()
            served = _serve(port, data)
        done += run.kill()
        assert done < RECORDS, "every kill came after the input was copied: the test proves nothing"
        _finish(bootstrap)
        _check(bootstrap, values)
    finally:
        if run is not None:
            run.kill()
        served.kill()
