"""Share groups' data path checked against Kafka 4.2's SharePartition, SharePartitionManager
and KafkaApis with raw frames: what a fetch acquires (MaxRecords 0 or less, the session's
partitions in turn, throttled redelivery, the in-flight cap over aborted records, the
offsets a loaded state leaves uncovered) and what acknowledgements answer (offsets below
the start, past the in-flight records, a partition no fetch made a share partition of)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.records import iter_batches_untrusted
from brokkr.core.testing import RawClient
from brokkr.plugins.share import share_coordinator_of, share_manager_of
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC
from brokkr.plugins.share.records import ACKNOWLEDGED, StateBatch
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from test_share_consumer import QUIET, produce, set_group
from test_share_wire import ACCEPT, FAST, RELEASE, acquired, fetch, first_fetch, new_topic, only_partition
from waiting import wait_for
from wire import (
    PRODUCE,
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    acks,
    batch,
    produce_body,
    share_acknowledge_body,
    share_fetch_body,
)

#: Locks that outlast a test's slow steps (a transactional producer, an admin client).
HELD = {**FAST, "group.share.record.lock.duration.ms": 15000}


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(FAST)


def test_max_records_zero_or_negative_acquires_nothing(broker):
    """Kafka's SharePartitionManager.processShareFetch answers MaxRecords 0 at once, and
    SharePartition.acquire takes nothing for it or a negative one: no record is locked."""
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(3)))
        for epoch, max_records in ((1, 0), (2, -1)):
            r = fetch(c, "g", "m1", epoch, tid, max_records=max_records, max_wait_ms=200)
            assert r.error_code == 0 and acquired(r) == []
        assert acquired(first_fetch(c, "g", "m2", tid)) == [(0, 2, 1)]  # their first delivery


def test_fetches_take_turns_among_the_sessions_partitions(broker):
    """Kafka rotates a session's partitions by its epoch (PartitionRotateStrategy, round
    robin), so that MaxRecords does not go to the first partition every time."""
    broker.call(broker.broker.create_topic, "t", 2)
    tid = broker.broker.topics["t"].topic_id
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        assert fetch(c, "g", "m1", 1, tid, partition=1).error_code == 0  # the session: partitions 0 and 1
        for partition in (0, 1):
            c.request(PRODUCE, 9, produce_body("t", batch(5), partition=partition))
        got = []
        for epoch in range(2, 6):
            r = fetch(c, "g", "m1", epoch, tid, max_records=1, acquire_mode=1, max_wait_ms=2000)
            got += [p.partition_index for t in r.responses for p in t.partitions if p.acquired_records]
        assert sorted(got) == [0, 0, 1, 1]


def test_acknowledging_records_the_log_start_passed_is_no_error(brokkr_broker_factory):
    """DeleteRecords moves the log start past records a member holds: Kafka's SharePartition
    skips acknowledgements below its start offset (they are done), answers INVALID_REQUEST
    for offsets past its in-flight records, and never delivers the deleted records again."""
    broker = brokkr_broker_factory(HELD)
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(3)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 2, 1)]
        c.request(PRODUCE, 9, produce_body("t", batch(2)))
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        [deleting] = admin.delete_records([TopicPartition("t", 0, 2)], request_timeout=10).values()
        assert deleting.result(timeout=10).low_watermark == 2
        assert acquired(first_fetch(c, "g", "m2", tid)) == [(3, 4, 1)]  # 2 is still m1's
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 2, tid, [acks(0, 2, ACCEPT)]))
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == 0
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m2", 1, tid, [acks(3, 9, ACCEPT)]))
        assert ack.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m2", 2, tid, [acks(3, 4, ACCEPT)]))
        assert ack.responses[0].partitions[0].error_code == 0
    summary = broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])
    assert summary[(tid, 0)][1] == 5  # everything done


def test_records_delivered_again_and_again_go_in_smaller_runs(brokkr_broker_factory):
    """Kafka 4.2's SharePartition throttles redelivery: from half the delivery count limit
    on, a batch's records go in runs halved at each delivery, and a record's last delivery
    is alone, so that one record a consumer keeps failing on is archived without the rest."""
    broker = brokkr_broker_factory({**FAST, "group.share.delivery.count.limit": 4})
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(8)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 7, 1)]
        assert acquired(fetch(c, "g", "m1", 2, tid, ack_batches=[acks(0, 7, RELEASE)])) == [(0, 7, 2)]
        # delivered twice (the limit 4, halved): 8 records >> 1
        assert acquired(fetch(c, "g", "m1", 3, tid, ack_batches=[acks(0, 7, RELEASE)])) == [(0, 3, 3)]
        assert acquired(fetch(c, "g", "m1", 4, tid)) == [(4, 7, 3)]
        # their last delivery: one at a time
        assert acquired(fetch(c, "g", "m1", 5, tid, ack_batches=[acks(0, 7, RELEASE)])) == [(0, 0, 4)]
        r = fetch(c, "g", "m1", 6, tid, ack_batches=[acks(0, 0, RELEASE)])  # archived: its 4th delivery
        assert only_partition(r).acknowledge_error_code == 0 and acquired(r) == [(1, 1, 4)]
        assert acquired(fetch(c, "g", "m1", 7, tid, ack_batches=[acks(1, 1, ACCEPT)])) == [(2, 2, 4)]


def test_acknowledging_a_partition_never_fetched_makes_no_share_partition(broker):
    """Kafka's SharePartitionManager.acknowledge looks the share partition up and answers
    UNKNOWN_TOPIC_OR_PARTITION without one: only a fetch makes (and loads) it."""
    broker.call(broker.broker.create_topic, "t", 2)
    tid = broker.broker.topics["t"].topic_id
    manager = share_manager_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 1, tid, [acks(0, 0, ACCEPT)], 1))
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        r = fetch(c, "g", "m1", 2, tid, partition=1, ack_batches=[acks(0, 0, ACCEPT)])
        parts = {p.partition_index: p for t in r.responses for p in t.partitions}
        assert parts[1].acknowledge_error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # fetched after its acks
        assert broker.call(lambda: sorted(index for _, _, index in manager.partitions)) == [0, 1]


def test_offsets_a_loaded_state_does_not_cover_are_delivered(broker):
    """A Kafka broker writes only the batches an acknowledgement changed: a state of start
    0 and 3-5 acknowledged leaves 0-2 in flight, and Kafka's SharePartition (its read gap
    window) delivers them, rather than skipping them as done."""
    tid = new_topic(broker, records=6)
    share_state = broker.broker.share_state
    assert broker.call(share_state.initialize, "g", tid, 0, 0, 1) == 0
    assert broker.call(share_state.write_state, "g", tid, 0, 1, 0, 0, [StateBatch(3, 5, ACKNOWLEDGED, 1)]) == 0
    with RawClient(broker.bootstrap_servers) as c:
        r = first_fetch(c, "g", "m1", tid)
        assert acquired(r) == [(0, 2, 1)]
        r = fetch(c, "g", "m1", 1, tid, ack_batches=[acks(0, 2, ACCEPT)])
        assert only_partition(r).acknowledge_error_code == 0 and acquired(r) == []
    assert broker.call(share_state.read_summary, "g", [(tid, 0)])[(tid, 0)][1] == 6


def test_a_gap_of_a_loaded_state_hides_aborted_records_from_read_committed(broker):
    """The read gap window's offsets are fetched as new ones: for a read_committed group an
    aborted transaction's records and its marker there are archived, never delivered (Kafka's
    filterAbortedTransactionalAcquiredRecords)."""
    address = broker.bootstrap_servers
    tid = new_topic(broker, records=0)
    set_group(address, "g", share_isolation_level="read_committed")
    producer = Producer({"bootstrap.servers": address, "transactional.id": "tx", **QUIET})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("t", value=b"x1")
    producer.produce("t", value=b"x2")
    producer.flush(10)
    producer.abort_transaction(10)  # 0-1 aborted, 2 its marker
    produce(address, "t", [b"c3", b"c4"])  # 3, 4
    share_state = broker.broker.share_state
    assert broker.call(share_state.initialize, "g", tid, 0, 0, 1) == 0
    assert broker.call(share_state.write_state, "g", tid, 0, 1, 0, 0, [StateBatch(4, 4, ACKNOWLEDGED, 1)]) == 0
    with RawClient(address) as c:
        assert acquired(first_fetch(c, "g", "m1", tid)) == [(3, 3, 1)]
        r = fetch(c, "g", "m1", 1, tid, ack_batches=[acks(3, 3, ACCEPT)])
        assert only_partition(r).acknowledge_error_code == 0 and acquired(r) == []
    assert broker.call(share_state.read_summary, "g", [(tid, 0)])[(tid, 0)][1] == 5


def test_aborted_records_count_toward_the_in_flight_cap(brokkr_broker_factory):
    """Kafka's SharePartition acquires an aborted transaction's records and archives them,
    so they count toward share.partition.max.record.locks: a read_committed share partition
    whose start waits on a held record walks at most that many offsets past it, and on to
    the end of the batch the cap falls in (acquireNewBatchRecords)."""
    broker = brokkr_broker_factory({**HELD, "group.share.partition.max.record.locks": 100})
    address = broker.bootstrap_servers
    tid = new_topic(broker, records=0)
    set_group(address, "g", share_isolation_level="read_committed")
    with RawClient(address) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        produce(address, "t", [b"held"])
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 0, 1)]
        producer = Producer({"bootstrap.servers": address, "transactional.id": "tx", **QUIET})
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(300):
            producer.produce("t", value=b"x%d" % i)
        producer.flush(10)
        producer.abort_transaction(10)  # 1-300 aborted, 301 its marker
        assert acquired(first_fetch(c, "g", "m2", tid, wait_ms=300)) == []
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 2, tid, [acks(0, 0, RELEASE)]))
        assert ack.responses[0].partitions[0].error_code == 0  # writes the in-flight window
    error, _, start, batches = broker.call(broker.broker.share_state.read_state, "g", tid, 0, 0)
    log = broker.broker.topics["t"].partitions[0].log
    capped = next(iter_batches_untrusted(broker.call(log.read, 99, 1 << 20, 302, True)))  # holds offset 99
    assert error == 0 and start == 0 and batches[-1].last_offset == capped.last_offset < 301  # not the marker


def test_the_in_flight_cap_stops_between_batches(brokkr_broker_factory):
    """Kafka's SharePartition acquires a batch it began up to its end (batch_optimized,
    acquireNewBatchRecords) though share.partition.max.record.locks falls inside it; in
    record_limit mode it stops at the cap."""
    broker = brokkr_broker_factory({**FAST, "group.share.partition.max.record.locks": 100})
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        first_fetch(c, "exact", "m1", tid, wait_ms=0)
        for _ in range(2):
            c.request(PRODUCE, 9, produce_body("t", batch(60)))  # 0-59, 60-119
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 119, 1)]
        assert acquired(fetch(c, "exact", "m1", 1, tid, acquire_mode=1, max_wait_ms=2000)) == [(0, 99, 1)]


def test_acquired_records_are_split_by_batch_size(broker):
    """Kafka's SharePartition.createBatches splits what a batch_optimized fetch acquires into
    ranges of BatchSize records or more, each ending where a batch ends; record_limit never."""
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        for _ in range(3):
            c.request(PRODUCE, 9, produce_body("t", batch(2)))  # 0-1, 2-3, 4-5
        body = share_fetch_body("g", "m1", 1, tid, max_wait_ms=2000)
        body.batch_size = 3
        r = c.request(SHARE_FETCH, 2, body)
        assert acquired(r) == [(0, 3, 1), (4, 5, 1)] and len(bytes(only_partition(r).records)) > 0
        body = share_fetch_body("g", "m1", 2, tid, ack_batches=[acks(0, 5, RELEASE)])
        body.batch_size = 1
        assert acquired(c.request(SHARE_FETCH, 2, body)) == [(0, 1, 2), (2, 3, 2), (4, 5, 2)]  # delivered again
        body = share_fetch_body("g", "m1", 3, tid, ack_batches=[acks(0, 5, RELEASE)], acquire_mode=1)
        body.batch_size = 1
        assert acquired(c.request(SHARE_FETCH, 2, body)) == [(0, 5, 3)]


def test_released_records_wait_for_their_write(brokkr_broker_factory):
    """Kafka's SharePartition keeps records whose release is being written (an ongoing state
    transition) from every fetch until the write completes: when it fails, they are still
    the releasing member's, under its lock."""
    broker = brokkr_broker_factory({**HELD, "share.coordinator.write.timeout.ms": 1500})
    address = broker.bootstrap_servers
    tid = new_topic(broker, records=0)
    coordinator = share_coordinator_of(broker.broker)
    with RawClient(address) as c, RawClient(address) as other:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        first_fetch(other, "g", "m2", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(2)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        sp = share_manager_of(broker.broker).partitions[("g", tid, 0)]
        broker.call(coordinator.resigned, 0)  # the release's write waits for the coordinator, then fails
        release = share_acknowledge_body("g", "m1", 2, tid, [acks(0, 1, RELEASE)])
        with ThreadPoolExecutor(1) as pool:
            releasing = pool.submit(c.request, SHARE_ACKNOWLEDGE, 2, release)
            wait_for("the release's write", lambda: broker.call(sp._writes.locked))
            assert acquired(fetch(other, "g", "m2", 1, tid, max_wait_ms=300)) == []
            answer = releasing.result(timeout=10)
        assert answer.responses[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
        broker.call(coordinator.became_leader, 0, broker.broker.topics[SHARE_STATE_TOPIC].partitions[0].leader_epoch)
        broker.call(coordinator.wait_loaded)
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 3, tid, [acks(0, 1, ACCEPT)]))
        assert ack.responses[0].partitions[0].error_code == 0  # still m1's
