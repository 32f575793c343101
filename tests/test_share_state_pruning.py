"""Pruning of ``__share_group_state``: the records before every state's latest snapshot are
deleted (the log start offset moves, as DeleteRecords moves it), cold states snapshotted
again so that it moves on, and the states still load whole from what is left."""

from __future__ import annotations

import pytest
from brokkr.core.testing import RawClient
from brokkr.plugins.share import share_coordinator_of
from brokkr.plugins.share.coordinator import SHARE_STATE_TOPIC
from test_share_wire import ACCEPT, FAST, acquired, fetch, first_fetch, new_topic
from wire import PRODUCE, SHARE_ACKNOWLEDGE, acks, batch, produce_body, share_acknowledge_body

from tests.waiting import wait_for


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(
        {
            **FAST,
            "group.share.record.lock.duration.ms": 15000,
            "share.coordinator.state.topic.prune.interval.ms": 200,
            "share.coordinator.cold.partition.snapshot.interval.ms": 200,
        }
    )


def accept(c, member, epoch, tid, offset):
    r = c.request(
        SHARE_ACKNOWLEDGE, 2, share_acknowledge_body(member[0], member[1], epoch, tid, [acks(offset, offset, ACCEPT)])
    )
    assert r.responses[0].partitions[0].error_code == 0


def test_state_records_before_every_states_snapshot_are_deleted(broker):
    tid = new_topic(broker, records=0)
    coordinator = share_coordinator_of(broker.broker)
    with RawClient(broker.bootstrap_servers) as c:
        for group in ("g1", "g2"):  # two states in the one __share_group_state partition
            first_fetch(c, group, "m", tid, wait_ms=0)
        c.request(PRODUCE, 9, produce_body("t", batch(6)))
        for group in ("g1", "g2"):
            assert acquired(fetch(c, group, "m", 1, tid, max_wait_ms=2000)) == [(0, 5, 1)]
        for offset in range(4):  # one ShareUpdate each, after each state's ShareSnapshot
            accept(c, ("g1", "m"), 2 + offset, tid, offset)
        accept(c, ("g2", "m"), 2, tid, 0)
        state_log = broker.broker.topics[SHARE_STATE_TOPIC].partitions[0]
        written = state_log.high_watermark
        assert written >= 9 and state_log.log.log_start_offset == 0

        # both states snapshotted again (cold), then everything before them deleted
        def pruned():
            p = broker.broker.topics[SHARE_STATE_TOPIC].partitions[0]
            return p.log.log_start_offset == p.high_watermark - 2 and p.high_watermark > written

        wait_for("__share_group_state pruned", pruned, timeout=10)
        # what is left loads each state whole
        broker.call(coordinator.resigned, 0)
        broker.call(coordinator.became_leader, 0, state_log.leader_epoch)
        broker.call(coordinator.wait_loaded)
        summary = broker.call(broker.broker.share_state.read_summary, "g1", [(tid, 0)])
        assert summary[(tid, 0)][:2] == (0, 4)
        summary = broker.call(broker.broker.share_state.read_summary, "g2", [(tid, 0)])
        assert summary[(tid, 0)][:2] == (0, 1)
        accept(c, ("g1", "m"), 6, tid, 4)  # the share partitions go on writing
        assert broker.call(broker.broker.share_state.read_summary, "g1", [(tid, 0)])[(tid, 0)][:2] == (0, 5)
