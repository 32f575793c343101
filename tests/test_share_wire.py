"""Share groups' data path with raw frames (KIP-932): ShareFetch and ShareAcknowledge,
share sessions and their errors, acknowledgement types, locks and delivery counts, and the
share coordinator's state (``__share_group_state``), as Kafka answers them."""

from __future__ import annotations

import time
import uuid

import pytest
from authorizers import Deny
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC, merge_batches
from brokkr.plugins.share.records import ACKNOWLEDGED, ARCHIVED, AVAILABLE, SNAPSHOT, UPDATE, StateBatch, decode
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

ACCEPT, RELEASE, REJECT = 1, 2, 3
FIND_COORDINATOR, READ_STATE, WRITE_STATE = 10, 84, 85
FAST = {
    "share.coordinator.state.topic.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 1000,
}


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(FAST)


def new_topic(broker, name: str = "t", records: int = 3) -> uuid.UUID:
    broker.call(broker.broker.create_topic, name)
    if records:
        with RawClient(broker.bootstrap_servers) as c:
            assert (
                c.request(PRODUCE, 9, produce_body(name, batch(records))).responses[0].partition_responses[0].error_code
                == 0
            )
    return broker.broker.topics[name].topic_id


def fetch(c, group, member, epoch, topic_id, **kw):
    return c.request(SHARE_FETCH, 2, share_fetch_body(group, member, epoch, topic_id, **kw))


def only_partition(response):
    assert response.error_code == 0, ErrorCode(response.error_code).name
    (t,) = response.responses
    (p,) = t.partitions
    return p


def acquired(response) -> list[tuple[int, int, int]]:
    parts = [p for t in response.responses for p in t.partitions]
    return [(a.first_offset, a.last_offset, a.delivery_count) for p in parts for a in p.acquired_records]


def first_fetch(c, group, member, topic_id, wait_ms=2000, **kw):
    """Open the member's session: epoch 0, records acquired as they are there."""
    return fetch(c, group, member, 0, topic_id, max_wait_ms=wait_ms, **kw)


def test_accept_release_reject_and_delivery_counts(broker):
    tid = new_topic(broker)
    with RawClient(broker.bootstrap_servers) as c:
        # earliest: a group's share partition starts at the latest offset, so produce after the first fetch
        assert acquired(first_fetch(c, "g", "m1", tid, wait_ms=0)) == []
        c.request(PRODUCE, 9, produce_body("t", batch(3)))
        r = fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)
        p = only_partition(r)
        assert acquired(r) == [(3, 5, 1)] and len(bytes(p.records)) > 0
        assert r.acquisition_lock_timeout_ms == 1000
        # accept 3, release 4, reject 5 in a fetch: 4 comes back at once with its count raised
        r = fetch(c, "g", "m1", 2, tid, ack_batches=[acks(3, 5, ACCEPT, RELEASE, REJECT)])
        assert only_partition(r).acknowledge_error_code == 0
        assert acquired(r) == [(4, 4, 2)]
        ack = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 3, tid, [acks(4, 4, RELEASE)]))
        assert ack.error_code == 0 and ack.responses[0].partitions[0].error_code == 0
        r = fetch(c, "g", "m1", 4, tid)
        assert acquired(r) == [(4, 4, 3)]  # the rejected 5 never again
        r = fetch(c, "g", "m1", 5, tid, ack_batches=[acks(4, 4, ACCEPT)], max_wait_ms=100)
        assert acquired(r) == []
    summary = broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])
    assert summary[(tid, 0)][0] == 0 and summary[(tid, 0)][1] == 6  # start offset past everything done


def test_session_errors(brokkr_broker_factory):
    broker = brokkr_broker_factory({**FAST, "group.share.max.share.sessions": 2})
    tid = new_topic(broker)
    with RawClient(broker.bootstrap_servers) as c:
        only_partition(first_fetch(c, "g", "m1", tid, wait_ms=0))
        assert fetch(c, "g", "m1", 5, tid).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert fetch(c, "g", "nobody", 1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert fetch(c, "g", "nobody", -1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        ack = share_acknowledge_body("g", "m1", 0, tid, [acks(0, 0, ACCEPT)])
        assert c.request(SHARE_ACKNOWLEDGE, 2, ack).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert fetch(c, "g", "", 0, tid).error_code == ErrorCode.INVALID_REQUEST  # Kafka's isMemberIdValid
        assert fetch(c, "g", "m9", 0, tid, ack_batches=[acks(0, 0, ACCEPT)]).error_code == ErrorCode.INVALID_REQUEST
        only_partition(first_fetch(c, "g", "m2", tid, wait_ms=0))
        started = time.monotonic()
        assert fetch(c, "g", "m3", 0, tid, max_wait_ms=300).error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        assert time.monotonic() - started >= 0.25  # Kafka answers it after MaxWaitMs
        assert fetch(c, "g", "m1", 1, tid).error_code == 0  # the old sessions go on
        assert fetch(c, "g", "m1", -1, tid, fetch=False).error_code == 0  # closed: room for another
        only_partition(first_fetch(c, "g", "m3", tid, wait_ms=0))


def test_acknowledging_records_not_held(broker):
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        first_fetch(c, "g", "m2", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(2)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        # m2 holds none of them, and 7 is past the in-flight records (Kafka: INVALID_REQUEST)
        r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m2", 1, tid, [acks(0, 1, ACCEPT)]))
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 2, tid, [acks(7, 7, ACCEPT)]))
        assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        # malformed: types not matching the offsets, overlapping batches, an unknown type, Renew without
        # IsRenewAck, first after last
        for epoch, bad in enumerate(
            (
                [acks(0, 1, ACCEPT, ACCEPT, ACCEPT)],
                [acks(0, 1, ACCEPT), acks(0, 0, ACCEPT)],
                [acks(0, 1, 7)],
                [acks(0, 1, 4)],
                [acks(1, 0, ACCEPT)],
            ),
            start=3,
        ):
            r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", epoch, tid, bad))
            assert r.responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST, bad
        # nothing was acknowledged: closing m1's session releases both records to m2
        r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", -1, tid, []))
        assert r.error_code == 0
        assert acquired(fetch(c, "g", "m2", 2, tid, max_wait_ms=2000)) == [(0, 1, 2)]


def test_a_lock_running_out_moves_records_to_another_member(broker):
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as a, RawClient(broker.bootstrap_servers) as b:
        first_fetch(a, "g", "m1", tid, wait_ms=0)
        first_fetch(b, "g", "m2", tid, wait_ms=0)
        a.request(PRODUCE, 9, produce_body("t", batch(4)))
        assert acquired(fetch(a, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 3, 1)]
        started = time.monotonic()
        r = fetch(b, "g", "m2", 1, tid, max_wait_ms=5000)  # waits for the lock (1 s) to run out
        assert acquired(r) == [(0, 3, 2)]
        assert 0.5 < time.monotonic() - started < 4.5
        # m1's lock is gone: its late acknowledgement is refused
        late = a.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", "m1", 2, tid, [acks(0, 3, ACCEPT)]))
        assert late.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE


@pytest.mark.brokkr_config(**{k.replace(".", "_"): v for k, v in FAST.items()}, group_share_delivery_count_limit=2)
def test_the_delivery_count_limit_archives(brokkr_broker):
    tid = new_topic(brokkr_broker, records=0)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(2)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        r = fetch(c, "g", "m1", 2, tid, ack_batches=[acks(0, 1, RELEASE)])
        assert acquired(r) == [(0, 1, 2)]
        r = fetch(c, "g", "m1", 3, tid, ack_batches=[acks(0, 1, RELEASE, ACCEPT)], max_wait_ms=200)
        assert acquired(r) == []  # delivered twice: released again, 0 is archived
    summary = brokkr_broker.call(brokkr_broker.broker.share_state.read_summary, "g", [(tid, 0)])
    assert summary[(tid, 0)][1] == 2


def test_record_limit_mode_and_max_records(broker):
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(5)))
        r = fetch(c, "g", "m1", 1, tid, max_wait_ms=2000, max_records=2, acquire_mode=1)
        assert acquired(r) == [(0, 1, 1)]
        r = fetch(c, "g", "m1", 2, tid, max_records=2, acquire_mode=0)  # batch_optimized: the whole batch
        assert acquired(r) == [(2, 4, 1)]


def test_find_coordinator_share_key_and_state_requests(broker):
    tid = new_topic(broker, records=0)
    spec = request_spec(FIND_COORDINATOR)
    key = f"g:{uuid_text(tid)}:0"
    with RawClient(broker.bootstrap_servers) as c:
        for _ in range(50):
            r = c.request(FIND_COORDINATOR, 6, spec.cls(key_type=2, coordinator_keys=[key, "bad-key"]))
            if r.coordinators[0].error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE:
                break
            time.sleep(0.1)
        assert [x.error_code for x in r.coordinators] == [0, ErrorCode.INVALID_REQUEST]
        assert r.coordinators[0].node_id == broker.broker.node_id
        state_topic = broker.broker.topics[SHARE_STATE_TOPIC]  # as Kafka creates it: never compacted nor expired
        assert state_topic.config["cleanup.policy"] == ["delete"] and state_topic.config["retention.ms"] == -1
        r = c.request(FIND_COORDINATOR, 5, spec.cls(key_type=2, coordinator_keys=[key]))
        assert r.coordinators[0].error_code == ErrorCode.INVALID_REQUEST  # share keys from v6
        read = request_spec(READ_STATE)
        body = read.cls(
            group_id="g",
            topics=[
                read.struct("ReadStateData")(
                    topic_id=tid, partitions=[read.struct("PartitionData")(partition=0, leader_epoch=0)]
                )
            ],
        )
        (p,) = c.request(READ_STATE, 0, body).results[0].partitions
        assert p.error_code == ErrorCode.INVALID_REQUEST and p.error_message == "Read on uninitialized share partition."
    # initialized at state epoch 3; a write at an older state epoch is fenced, as one at an older leader epoch
    assert broker.call(broker.broker.share_state.initialize, "g", tid, 0, 10, 3) == 0
    write = broker.broker.share_state.write_state
    assert broker.call(write, "g", tid, 0, 2, 0, 10, []) == ErrorCode.FENCED_STATE_EPOCH
    assert broker.call(write, "g", tid, 0, 3, 5, 10, []) == 0
    assert broker.call(write, "g", tid, 0, 3, 4, 10, []) == ErrorCode.FENCED_LEADER_EPOCH
    assert broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])[(tid, 0)] == (0, 10, 5, 3, -1)
    assert broker.call(broker.broker.share_state.delete, "g", [(tid, 0)]) == {(tid, 0): 0}
    assert (
        broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])[(tid, 0)][0] == ErrorCode.INVALID_REQUEST
    )


def uuid_text(u: uuid.UUID) -> str:
    import base64

    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode()


@pytest.mark.brokkr_config(
    **{k.replace(".", "_"): v for k, v in FAST.items()}, share_coordinator_snapshot_update_records_per_snapshot=2
)
def test_state_records_snapshot_every_n_updates(brokkr_broker):
    tid = new_topic(brokkr_broker, records=0)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(6)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000, max_records=6)) == [(0, 5, 1)]
        for epoch, offset in enumerate(range(1, 6), start=2):  # 0 stays acquired, so the start offset stays 0
            ack = share_acknowledge_body("g", "m1", epoch, tid, [acks(offset, offset, ACCEPT)])
            assert c.request(SHARE_ACKNOWLEDGE, 2, ack).responses[0].partitions[0].error_code == 0
    partition = brokkr_broker.broker.topics[SHARE_STATE_TOPIC].partitions[0]
    data = brokkr_broker.call(partition.log.read, 0, 1 << 20, partition.high_watermark, True)
    from brokkr.core.log import batch_records
    from brokkr.core.protocol.records import iter_batches_untrusted

    kinds = [
        decode(r.key, r.value).type
        for h in iter_batches_untrusted(data)
        for r in batch_records(data, h, brokkr_broker.broker.codecs)
    ]
    # initialize (a snapshot); the leader's epoch recorded and its start offset kept (updates);
    # five acknowledgements: a snapshot, two updates, a snapshot, an update
    assert kinds == [SNAPSHOT, UPDATE, UPDATE, SNAPSHOT, UPDATE, UPDATE, SNAPSHOT, UPDATE]
    state = brokkr_broker.broker.pm.get_plugin("brokkr.share.coordinator").state(("g", tid, 0))
    assert state.start_offset == 0
    assert state.batches == [StateBatch(0, 0, AVAILABLE, 1), StateBatch(1, 5, ACKNOWLEDGED, 1)]


def test_merging_state_batches():
    old = [StateBatch(0, 9, AVAILABLE, 1), StateBatch(10, 19, ACKNOWLEDGED, 1)]
    new = [StateBatch(5, 12, ARCHIVED, 2)]
    assert merge_batches(old, new, 3) == [
        StateBatch(3, 4, AVAILABLE, 1),
        StateBatch(5, 12, ARCHIVED, 2),
        StateBatch(13, 19, ACKNOWLEDGED, 1),
    ]
    assert merge_batches(old, [StateBatch(0, 30, ACKNOWLEDGED, 1)], 20) == [StateBatch(20, 30, ACKNOWLEDGED, 1)]


def test_renew_keeps_records_locked(broker):
    tid = new_topic(broker, records=0)
    renew_body = share_acknowledge_body("g", "m1", 2, tid, [acks(0, 1, 4)])
    renew_body.is_renew_ack = True
    with RawClient(broker.bootstrap_servers) as a, RawClient(broker.bootstrap_servers) as b:
        first_fetch(a, "g", "m1", tid, wait_ms=0)
        first_fetch(b, "g", "m2", tid, wait_ms=0)
        a.request(PRODUCE, 9, produce_body("t", batch(2)))
        assert acquired(fetch(a, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        time.sleep(0.6)
        r = a.request(SHARE_ACKNOWLEDGE, 2, renew_body)  # KIP-1222: a new lock of 1 s from now
        assert r.responses[0].partitions[0].error_code == 0 and r.acquisition_lock_timeout_ms == 1000
        assert acquired(fetch(b, "g", "m2", 1, tid, max_wait_ms=700)) == []  # past the first lock's end
        ack = share_acknowledge_body("g", "m1", 3, tid, [acks(0, 1, ACCEPT)])
        assert a.request(SHARE_ACKNOWLEDGE, 2, ack).responses[0].partitions[0].error_code == 0


def test_initializing_the_state_again_resets_a_live_share_partition(broker):
    """What AlterShareGroupOffsets does through ``broker.share_state.initialize``."""
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(4)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 3, 1)]
        r = fetch(c, "g", "m1", 2, tid, ack_batches=[acks(0, 3, ACCEPT)], max_wait_ms=100)
        assert only_partition(r).acknowledge_error_code == 0 and acquired(r) == []
        assert broker.call(broker.broker.share_state.initialize, "g", tid, 0, 1, 1) == 0
        assert acquired(fetch(c, "g", "m1", 3, tid)) == [(1, 3, 1)]  # from offset 1, delivered anew
        # an older state epoch is fenced
        assert broker.call(broker.broker.share_state.initialize, "g", tid, 0, 0, 0) == ErrorCode.FENCED_STATE_EPOCH


def test_group_read_and_topic_read_are_needed(brokkr_broker_factory):
    def rule(a) -> bool:
        return a.operation == AclOperation.READ and (
            (a.resource_type == ResourceType.GROUP and a.resource_name == "secret")
            or (a.resource_type == ResourceType.TOPIC and a.resource_name == "hidden")
        )

    broker = brokkr_broker_factory(FAST, plugins=(Deny(rule),))
    tid = new_topic(broker)
    hidden = new_topic(broker, "hidden")
    with RawClient(broker.bootstrap_servers) as c:
        assert fetch(c, "secret", "m1", 0, tid).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        ack = share_acknowledge_body("secret", "m1", 1, tid, [acks(0, 0, ACCEPT)])
        assert c.request(SHARE_ACKNOWLEDGE, 2, ack).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert only_partition(fetch(c, "g", "m1", 0, hidden)).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        ack = share_acknowledge_body("g", "m1", 1, hidden, [acks(0, 0, ACCEPT)])
        assert c.request(SHARE_ACKNOWLEDGE, 2, ack).responses[0].partitions[0].error_code == (
            ErrorCode.TOPIC_AUTHORIZATION_FAILED
        )
        assert only_partition(fetch(c, "g", "m2", 0, uuid.uuid4())).error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_an_idle_session_makes_room_for_a_new_one(brokkr_broker_factory):
    """A consumer gone without closing its session (killed) holds no slot for longer than
    the share session timeout, once the sessions are at their limit."""
    short = {
        "group.share.session.timeout.ms": 300,
        "group.share.min.session.timeout.ms": 300,
        "group.share.heartbeat.interval.ms": 100,
        "group.share.min.heartbeat.interval.ms": 100,
    }
    broker = brokkr_broker_factory({**FAST, **short, "group.share.max.share.sessions": 1})
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        only_partition(first_fetch(c, "g", "m1", tid, wait_ms=0))
        assert fetch(c, "g", "m2", 0, tid).error_code == ErrorCode.SHARE_SESSION_LIMIT_REACHED
        time.sleep(0.4)
        only_partition(first_fetch(c, "g", "m2", tid, wait_ms=0))
        assert fetch(c, "g", "m1", 1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_a_late_initialization_keeps_what_a_share_partition_delivered(broker):
    """The group coordinator initializes a share partition (start -1: where
    share.auto.offset.reset says) after its leader already did at a first fetch: the
    acknowledged records stay acknowledged, at the new state epoch."""
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(3)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 2, 1)]
        r = fetch(c, "g", "m1", 2, tid, ack_batches=[acks(0, 2, ACCEPT, ACCEPT, RELEASE)], max_wait_ms=0)
        assert only_partition(r).acknowledge_error_code == 0 and acquired(r) == [(2, 2, 2)]
    assert broker.call(broker.broker.share_state.initialize, "g", tid, 0, -1, 5) == 0
    assert broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])[(tid, 0)] == (0, 2, 0, 5, 0)


def test_a_closed_connection_releases_its_sessions_records_at_once(brokkr_broker_factory):
    """Kafka 4.1+: the share session goes with the connection that opened it, and its
    member's records are available again without waiting for their lock (30 s here)."""
    broker = brokkr_broker_factory({k: v for k, v in FAST.items() if "lock" not in k})
    tid = new_topic(broker, records=0)
    with RawClient(broker.bootstrap_servers) as b:
        first_fetch(b, "g", "m2", tid, wait_ms=0)
        with RawClient(broker.bootstrap_servers) as a:
            first_fetch(a, "g", "m1", tid, wait_ms=0)
            a.request(PRODUCE, 9, produce_body("t", batch(3)))
            r = fetch(a, "g", "m1", 1, tid, max_wait_ms=2000)
            assert acquired(r) == [(0, 2, 1)] and r.acquisition_lock_timeout_ms == 30000
        started = time.monotonic()
        assert acquired(fetch(b, "g", "m2", 1, tid, max_wait_ms=5000)) == [(0, 2, 2)]
        assert time.monotonic() - started < 3
        assert fetch(b, "g", "m1", 2, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
