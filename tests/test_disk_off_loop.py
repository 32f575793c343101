"""Disk waits of the segment storage run on its flusher thread, never on the event loop,
and what crashes in between leaves a log that recovers to the right state."""

from __future__ import annotations

import os
import threading
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.producer_state import encode_snapshot
from brokkr.core.producer_state import rebuild_producer_state as rebuild
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch, patch_batch
from brokkr.core.storage_contract import Harness, StorageContract
from brokkr.core.testing import RawClient
from segment_crash import crash, hold
from wire import API_VERSIONS, PRODUCE, batch, produce_body

SLOW_FSYNC = 0.2


class _Segment(StorageContract):
    storage_name = "segment"


@pytest.fixture
def slow_fsync(monkeypatch):
    """Every fsync takes 200 ms (a busy disk); returns the list of threads that called it."""
    real = os.fsync
    callers: list[str] = []

    def fsync(fd):
        callers.append(threading.current_thread().name)
        time.sleep(SLOW_FSYNC)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return callers


class Probe(threading.Thread):
    """ApiVersions on its own connection, back to back: the longest round trip is how long
    a request waited behind whatever the broker's event loop was doing."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.client = RawClient(bootstrap)
        self.body = request_spec(API_VERSIONS).cls()
        self.stop = threading.Event()
        self.worst = 0.0
        self.count = 0

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            self.client.request(API_VERSIONS, 3, self.body)
            self.worst = max(self.worst, time.monotonic() - started)
            self.count += 1
            time.sleep(0.002)

    def __enter__(self) -> Probe:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(timeout=10)
        self.client.close()


def produce(client: RawClient, topic: str, records: bytes) -> tuple[float, object]:
    started = time.monotonic()
    res = client.request(PRODUCE, 9, produce_body(topic, records)).responses[0].partition_responses[0]
    return time.monotonic() - started, res


def test_segment_rolls_wait_for_no_fsync_on_the_event_loop(brokkr_broker_factory, slow_fsync):
    """Each produce here rolls a segment: its fsync and the producer snapshot written at the
    roll (2 more fsyncs, inline before) queue behind 200 ms fsyncs on the flusher, while the
    produce and a request on another connection are answered at once."""
    broker = brokkr_broker_factory()
    broker.call(broker.broker.create_topic, "t", 1, {"segment.bytes": "1024"})
    slow_fsync.clear()
    with RawClient(broker.bootstrap_servers) as client, Probe(broker.bootstrap_servers) as probe:
        times = [produce(client, "t", batch(5, value=b"x" * 150))[0] for _ in range(4)]
        time.sleep(0.1)
    log = broker.broker.topics["t"].partitions[0].log
    assert len(log.segments()) >= 4, "every produce rolled"
    assert probe.count > 20 and probe.worst < SLOW_FSYNC / 2, f"a request waited {probe.worst * 1000:.0f} ms"
    assert max(times) < SLOW_FSYNC / 2, f"a rolling produce took {max(times) * 1000:.0f} ms"
    assert slow_fsync and set(slow_fsync) == {"brokkr-flush_0"}, "every fsync on the flusher thread"
    broker.call(lambda: broker.broker.storage.flusher.submit(lambda: None)).result(timeout=60)
    assert log.recovery_point == log.segments()[-1].base_offset, "the recovery point follows the fsyncs"


def test_flush_messages_1_answers_after_the_fsync_without_blocking_others(brokkr_broker_factory, slow_fsync):
    """flush.messages=1 keeps Kafka's meaning (a record is fsynced before it is
    acknowledged, and before consumers see it) with the fsync on the flusher."""
    broker = brokkr_broker_factory()
    broker.call(broker.broker.create_topic, "f", 1, {"flush.messages": "1"})
    partition = broker.broker.topics["f"].partitions[0]
    slow_fsync.clear()
    answered = []
    with RawClient(broker.bootstrap_servers) as client, Probe(broker.bootstrap_servers) as probe:
        producing = threading.Thread(target=lambda: answered.append(produce(client, "f", batch(3))))
        producing.start()
        time.sleep(SLOW_FSYNC / 2)
        assert broker.call(lambda: (partition.log.log_end_offset, partition.high_watermark)) == (3, 0), (
            "appended, but not visible before its fsync"
        )
        producing.join(timeout=10)
    elapsed, res = answered[0]
    assert (res.error_code, res.base_offset) == (ErrorCode.NONE, 0)
    assert elapsed >= SLOW_FSYNC, "the produce was answered only after the fsync"
    assert partition.high_watermark == 3 and partition.log.recovery_point == 3
    assert probe.worst < SLOW_FSYNC / 2, f"a request waited {probe.worst * 1000:.0f} ms"
    assert set(slow_fsync) == {"brokkr-flush_0"}


def test_a_failed_flush_messages_fsync_answers_kafka_storage_error(brokkr_broker_factory, monkeypatch):
    broker = brokkr_broker_factory()
    broker.call(broker.broker.create_topic, "f", 1, {"flush.messages": "1"})

    def failing(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    with RawClient(broker.bootstrap_servers) as client:
        _, res = produce(client, "f", batch())
    assert res.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert broker.broker.topics["f"].partitions[0].high_watermark == 0, "never acknowledged, never visible"


# -- crashes with disk work still queued ---------------------------------------------------


@pytest.fixture
def harness(tmp_path):
    h = Harness(_Segment(), tmp_path / "logs")
    yield h
    h.close()


def idempotent_append(plog, seq: int, n: int = 5, producer_id: int = 7):
    first = plog.log_end_offset
    records = [(b"k", b"v" * 100)] * n
    data = bytearray(build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=seq))
    patch_batch(data, 0, first, 0)
    return plog.append(data, first, first + n - 1, 1_000, n)


def test_a_crash_before_the_rolls_fsyncs_and_snapshots_ran_loses_nothing(harness):
    """The flusher is held up, segments roll (their fsyncs and producer snapshots queue),
    then the process dies with the queue. The reopened log has every record, its
    recovery point never moved past unsynced data, and the producer state is replayed."""
    plog = harness.log(**{"segment.bytes": 1000})
    release = hold(harness)
    for seq in range(0, 40, 5):
        if idempotent_append(plog, seq).rolled is not None:
            plog.write_producer_snapshot(plog.log_end_offset, encode_snapshot(rebuild("t-0", plog).producers))
    assert len(plog.segments()) >= 3
    assert plog.recovery_point == 0, "no fsync has run: the recovery point stays"
    assert plog.latest_producer_snapshot()[0] > 0, "a queued snapshot is served from memory"
    end = plog.log_end_offset
    crash(harness, release)  # the queue dies with the process

    reopened = harness.log()
    assert not list((harness.directory / "t-0").glob("*.snapshot")), "no snapshot was written"
    assert reopened.log_end_offset == end
    state = rebuild("t-0", reopened, reopened)
    assert state.producers[7].last_seq == 39 and state.snapshot_offset is None


def test_a_torn_newest_snapshot_falls_back_to_replaying_the_log(harness, caplog):
    plog = harness.log(**{"segment.bytes": 1000})
    for seq in range(0, 40, 5):
        if idempotent_append(plog, seq).rolled is not None:
            plog.write_producer_snapshot(plog.log_end_offset, encode_snapshot(rebuild("t-0", plog).producers))
    harness.storage.flusher.submit(lambda: None).result(timeout=10)
    snapshots = sorted((harness.directory / "t-0").glob("*.snapshot"))
    assert len(snapshots) == 2, "the two newest are kept"
    snapshots[-1].write_bytes(snapshots[-1].read_bytes()[:-3])
    crash(harness)

    reopened = harness.log()
    state = rebuild("t-0", reopened, reopened)
    assert f"Failed to load the producer snapshot of t-0 at {int(snapshots[-1].stem)}" in caplog.text
    assert state.producers[7].last_seq == 39 and state.snapshot_offset is None, "replayed from the log"


def test_a_truncation_voids_a_queued_snapshot_above_it(harness):
    """A snapshot queued before a truncation must not appear after it: the offsets it
    names would hold other records once the log grows again."""
    plog = harness.log()
    gate = threading.Event()
    harness.storage.flusher.submit(gate.wait)
    for seq in range(0, 20, 5):
        idempotent_append(plog, seq)
    plog.write_producer_snapshot(20, b"state of records truncated away")
    plog.flush_in_background()  # would move the recovery point to 20
    plog.truncate_to(10)
    assert plog.latest_producer_snapshot() is None
    for seq in range(10, 30, 5):
        idempotent_append(plog, seq, producer_id=8)
    gate.set()
    harness.storage.flusher.submit(lambda: None).result(timeout=10)
    assert plog.latest_producer_snapshot() is None
    assert not list((harness.directory / "t-0").glob("*.snapshot*"))
    assert plog.recovery_point == 0, "offsets 10-19 hold records no fsync covered"


def test_a_lost_epoch_checkpoint_write_is_rederived_from_the_recovered_batches(harness):
    plog = harness.log()
    release = hold(harness)
    for epoch, first in ((0, 0), (3, 1), (5, 2)):
        data = bytearray(build_batch([(b"k", b"v")], timestamp=1_000))
        patch_batch(data, 0, first, epoch)
        plog.append(data, first, first, 1_000, 1)
    assert plog.leader_epochs() == [(0, 0), (3, 1), (5, 2)]
    crash(harness, release)
    assert not (harness.directory / "t-0" / "leader-epoch-checkpoint").exists()

    assert harness.log().leader_epochs() == [(0, 0), (3, 1), (5, 2)]
