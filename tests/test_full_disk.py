"""A full disk, for real: ``brokkr serve`` on a small tmpfs. Appends fail with
KAFKA_STORAGE_ERROR and one log line per partition (not one per append), work again once
space is freed, and SIGTERM ends the process even when its last checkpoint cannot be
written; nothing acknowledged is lost."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec  # noqa: I001
from brokkr.core.testing import RawClient
from serve import Served
from waiting import wait_for
from wire import CREATE_TOPICS, PRODUCE, batch, produce_body

CreateTopics = request_spec(CREATE_TOPICS)


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if done.returncode:
        pytest.skip(f"cannot mount a small file system here: {done.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def fill(mount_point) -> None:
    """Write a filler file until the file system is full, to its last byte."""
    fd = os.open(mount_point / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def produce(client: RawClient, partition: int) -> int:
    body = produce_body("t", batch(5, value=b"v" * 2000), partition=partition)
    return client.request(PRODUCE, 9, body).responses[0].partition_responses[0].error_code


def test_a_full_disk_fails_appends_cleanly_and_sigterm_still_ends_the_broker(small_disk, tmp_path):
    served = Served(
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "--override",
        f"log.dirs={small_disk / 'data'}",
        "--override",
        "log.flush.offset.checkpoint.interval.ms=100",
        cwd=tmp_path,
    )
    try:
        with RawClient(served.address) as c:
            topic = CreateTopics.struct("CreatableTopic")(name="t", num_partitions=2, replication_factor=1)
            [created] = c.request(CREATE_TOPICS, 7, CreateTopics.cls(topics=[topic], timeout_ms=5000)).topics
            assert created.error_code == 0
            acknowledged = {0: 0, 1: 0}
            for p in (0, 1):
                assert produce(c, p) == ErrorCode.NONE
                acknowledged[p] += 5

            fill(small_disk)
            for _ in range(10):
                for p in (0, 1):
                    code = produce(c, p)
                    if code == ErrorCode.NONE:  # a few bytes of page slack may still take a batch
                        acknowledged[p] += 5
                    else:
                        assert code == ErrorCode.KAFKA_STORAGE_ERROR
            time.sleep(0.5)  # several checkpoint intervals on the full disk
            out = served.output()
            assert out.count("appends fail") == 2, out  # one line per partition, not one per append
            assert "t-0: appends fail" in out and "t-1: appends fail" in out
            assert out.count("log maintenance (checkpoint) failed") <= 1
            assert "Traceback" not in out

            os.unlink(small_disk / "filler")
            for p in (0, 1):
                assert produce(c, p) == ErrorCode.NONE
                acknowledged[p] += 5
            # Logged before the answer went out; the thread reading the broker's stderr may lag.
            wait_for("t-0's recovery to be logged", lambda: "t-0: appends succeed again" in served.output(), 10)

        fill(small_disk)
        served.proc.send_signal(signal.SIGTERM)
        assert served.proc.wait(timeout=20) == 1, "SIGTERM ends the broker, saying it did not stop cleanly"
        assert "closing the storage failed" in served.output()
    finally:
        if served.proc.poll() is None:
            served.kill()

    os.unlink(small_disk / "filler")
    restarted = Served(
        "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={small_disk / 'data'}", cwd=tmp_path
    )
    try:
        with RawClient(restarted.address) as c:
            for p in (0, 1):
                spec = request_spec(2)
                part = spec.struct("ListOffsetsPartition")(partition_index=p, timestamp=-1)
                body = spec.cls(replica_id=-1, topics=[spec.struct("ListOffsetsTopic")(name="t", partitions=[part])])
                [answer] = c.request(2, 7, body).topics[0].partitions
                assert answer.offset >= acknowledged[p], "every acknowledged record is still there"
    finally:
        restarted.proc.send_signal(signal.SIGTERM)
        assert restarted.proc.wait(timeout=20) == 0
