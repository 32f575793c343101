"""Share partitions when their state cannot be written: an acknowledgement whose write to the
share coordinator fails is answered the error and undone in memory (Kafka's SharePartition
rolls back its in-flight state), so that nothing is reported acknowledged that is not durable;
a renew, which changes no state, writes nothing; locks running out meanwhile queue one write."""

from __future__ import annotations

import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.testing import RawClient
from brokkr.plugins.share import share_coordinator_of, share_manager_of
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC
from brokkr.plugins.share.partition import RENEW
from test_share_wire import ACCEPT, FAST, REJECT, RELEASE, acquired, fetch, first_fetch, new_topic
from wire import PRODUCE, SHARE_ACKNOWLEDGE, acks, batch, produce_body, share_acknowledge_body


@pytest.fixture
def broker(brokkr_broker_factory):
    # locks outlast the test; a write gives up on an absent coordinator after 0.3 s
    return brokkr_broker_factory(
        {**FAST, "group.share.record.lock.duration.ms": 15000, "share.coordinator.write.timeout.ms": 300}
    )


def ack(c, member, epoch, tid, *batches):
    r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", member, epoch, tid, list(batches)))
    assert r.error_code == 0
    return r.responses[0].partitions[0].error_code


def test_an_acknowledgement_whose_write_fails_is_undone(broker):
    tid = new_topic(broker, records=0)
    coordinator = share_coordinator_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        first_fetch(c, "g", "m2", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(3)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 2, 1)]
        # the share coordinator goes away (its partition led elsewhere now): the write fails
        broker.call(coordinator.resigned, 0)
        assert ack(c, "m1", 2, tid, acks(0, 2, ACCEPT, RELEASE, REJECT)) == ErrorCode.NOT_COORDINATOR
        # nothing changed: the released record is not another member's, the three are still m1's
        assert acquired(fetch(c, "g", "m2", 1, tid, max_wait_ms=300)) == []
        epoch = broker.broker.topics[SHARE_STATE_TOPIC].partitions[0].leader_epoch
        broker.call(coordinator.became_leader, 0, epoch)
        broker.call(coordinator.wait_loaded)
        assert ack(c, "m1", 3, tid, acks(0, 2, ACCEPT, RELEASE, REJECT)) == 0
        assert acquired(fetch(c, "g", "m2", 2, tid, max_wait_ms=2000)) == [(1, 1, 2)]
    summary = broker.call(broker.broker.share_state.read_summary, "g", [(tid, 0)])
    assert summary[(tid, 0)][:2] == (0, 1)  # offset 0 accepted and written; 1 in flight


def test_renewing_locks_needs_no_write(broker):
    """KIP-1222: a renew changes no state, so Kafka's SharePartition writes nothing for it:
    it succeeds while the share coordinator is away, and the records stay the member's."""
    tid = new_topic(broker, records=0)
    coordinator = share_coordinator_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        first_fetch(c, "g", "m2", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(2)))
        assert acquired(fetch(c, "g", "m1", 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        broker.call(coordinator.resigned, 0)
        renew = share_acknowledge_body("g", "m1", 2, tid, [acks(0, 1, RENEW)])
        renew.is_renew_ack = True
        r = c.request(SHARE_ACKNOWLEDGE, 2, renew)
        assert r.error_code == 0 and r.responses[0].partitions[0].error_code == 0
        assert acquired(fetch(c, "g", "m2", 1, tid, max_wait_ms=300)) == []


def test_locks_running_out_while_writes_fail_queue_one_write(brokkr_broker_factory):
    """Locks that run out while the share coordinator is away each change the state: one
    write waiting for its turn covers them all (it writes the state as it is then), so the
    writes waiting behind a failing one stay one, however many locks run out."""
    broker = brokkr_broker_factory({**FAST, "share.coordinator.write.timeout.ms": 1500})
    tid = new_topic(broker, records=0)
    manager = share_manager_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        first_fetch(c, "g", "m1", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(20)))
        broker.call(share_coordinator_of(broker.broker).resigned, 0)
        for epoch in range(1, 21):  # 20 acquisitions, 20 locks
            r = fetch(c, "g", "m1", epoch, tid, max_records=1, acquire_mode=1, max_wait_ms=2000)
            assert acquired(r) == [(epoch - 1, epoch - 1, 1)]
        time.sleep(1.5)  # every lock (1 s) has run out; the first write waits on the coordinator
        assert broker.call(lambda: len(manager._tasks)) <= 2
