"""The share state as a share group's coordinator sees and drives it, with raw frames: the lag
DescribeShareGroupOffsets reports (from the delivery-complete count the share partition
writes), and a member that leaves its group releasing its records at once."""

from __future__ import annotations

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from test_share_group_membership import FAST as GROUPS_FAST
from test_share_group_membership import find_coordinator, heartbeat, member_id
from test_share_wire import ACCEPT, FAST, acquired, fetch, first_fetch
from wire import PRODUCE, SHARE_ACKNOWLEDGE, acks, batch, produce_body, share_acknowledge_body

from tests.waiting import wait_for

DESCRIBE_OFFSETS = 90


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory({**FAST, **GROUPS_FAST, "group.share.record.lock.duration.ms": 15000})
    b.call(b.broker.create_topic, "q", 1)
    return b


def joined(broker, client: RawClient, group: str) -> str:
    """A new member of ``group`` subscribed to q, once q-0's share state is initialized."""
    find_coordinator(client, group)
    member = member_id()
    assert heartbeat(client, group, member, 0, ["q"]).error_code == 0
    wait_for("q-0's share state", lambda: lag_of(client, group) is not None)
    return member


def lag_of(client: RawClient, group: str) -> int | None:
    """q-0's lag as DescribeShareGroupOffsets v1 reports it (None while it has no share state)."""
    spec = request_spec(DESCRIBE_OFFSETS)
    body = spec.cls(groups=[spec.struct("DescribeShareGroupOffsetsRequestGroup")(group_id=group, topics=None)])
    g = client.request(DESCRIBE_OFFSETS, 1, body).groups[0]
    assert g.error_code == 0, g
    lags = [p.lag for t in g.topics for p in t.partitions if t.topic_name == "q" and p.partition_index == 0]
    return lags[0] if lags else None


def test_the_lag_counts_records_not_yet_delivered_to_completion(broker):
    tid = broker.broker.topics["q"].topic_id
    with RawClient(broker.bootstrap_servers) as c:
        member = joined(broker, c, "g")
        assert lag_of(c, "g") == -1  # initialized to start where share.auto.offset.reset says, not yet used
        assert acquired(first_fetch(c, "g", member, tid, wait_ms=0)) == []
        assert lag_of(c, "g") == 0
        c.request(PRODUCE, 9, produce_body("q", batch(5)))
        assert lag_of(c, "g") == 5
        assert acquired(fetch(c, "g", member, 1, tid, max_wait_ms=2000)) == [(0, 4, 1)]
        # 1 and 2 accepted beyond the start offset (0, still acquired): they are not lag
        r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", member, 2, tid, [acks(1, 2, ACCEPT)]))
        assert r.responses[0].partitions[0].error_code == 0
        assert lag_of(c, "g") == 3
        r = c.request(SHARE_ACKNOWLEDGE, 2, share_acknowledge_body("g", member, 3, tid, [acks(0, 0, ACCEPT)]))
        assert r.responses[0].partitions[0].error_code == 0
        assert lag_of(c, "g") == 2  # start offset 3 now: 3 and 4 left


def test_a_member_leaving_its_group_releases_its_records_at_once(broker):
    tid = broker.broker.topics["q"].topic_id
    with RawClient(broker.bootstrap_servers) as group_client, RawClient(broker.bootstrap_servers) as fetcher:
        member = joined(broker, group_client, "g")
        assert acquired(first_fetch(fetcher, "g", member, tid, wait_ms=0)) == []  # starts at the latest offset, 0
        fetcher.request(PRODUCE, 9, produce_body("q", batch(3)))
        assert acquired(fetch(fetcher, "g", member, 1, tid, max_wait_ms=2000)) == [(0, 2, 1)]
        # it leaves through the group coordinator, its fetching connection still open, its locks 15 s long
        assert heartbeat(group_client, "g", member, -1).error_code == 0
        assert acquired(first_fetch(group_client, "g", member_id(), tid, wait_ms=1000)) == [(0, 2, 2)]
        gone = fetch(fetcher, "g", member, 2, tid)
        assert gone.error_code == ErrorCode.SHARE_SESSION_NOT_FOUND


def test_a_member_whose_session_expires_has_its_records_released_at_once(brokkr_broker_factory):
    b = brokkr_broker_factory(
        {**FAST, **GROUPS_FAST, "group.share.record.lock.duration.ms": 15000, "group.share.session.timeout.ms": 1000}
    )
    b.call(b.broker.create_topic, "q", 1)
    tid = b.broker.topics["q"].topic_id
    with RawClient(b.bootstrap_servers) as group_client, RawClient(b.bootstrap_servers) as fetcher:
        member = joined(b, group_client, "g")
        assert acquired(first_fetch(fetcher, "g", member, tid, wait_ms=0)) == []
        fetcher.request(PRODUCE, 9, produce_body("q", batch(2)))
        assert acquired(fetch(fetcher, "g", member, 1, tid, max_wait_ms=2000)) == [(0, 1, 1)]
        # no more heartbeats: removed after its 1 s session, its records another member's long before their lock ends
        got = first_fetch(group_client, "g", member_id(), tid, wait_ms=5000)
        assert acquired(got) == [(0, 1, 2)]
