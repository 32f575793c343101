"""Share partitions when their state cannot be written: an acknowledgement whose write to the
share coordinator fails is answered the error and undone in memory (Kafka's SharePartition
rolls back its in-flight state), so that nothing is reported acknowledged that is not durable."""

from __future__ import annotations

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.testing import RawClient
from brokkr.plugins.share import share_coordinator_of
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC
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
