"""Transaction markers on a replicated partition: WriteTxnMarkers to the leader waits
until the marker is replicated, followers take the markers as the leader wrote them and
end the same transactions (last stable offset, aborted-transaction index), a follower
answers NOT_LEADER_OR_FOLLOWER, and read_committed consumers see committed records only
after the leader moves."""

from __future__ import annotations

import pytest

from tests.cluster.test_replication import DEADLINE, bootstrap, create, wait_for
from tests.txn_wire import COMMITTED, UNVERIFIED, A, build_log, write_markers_on_the_wire

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402


def txn_state(b, name: str = "rc"):
    """(log end, high watermark, last stable offset, aborted transactions) of a replica."""
    p = b.broker.partition(name, 0)
    return b.call(lambda: (p.log.log_end_offset, p.high_watermark, p.last_stable_offset, p.aborted.aborted_txns(0, 99)))


class RemoteLeader:
    """``build_log``'s view of a broker: produce to it, end transactions with WriteTxnMarkers."""

    def __init__(self, leader):
        self.bootstrap_servers = leader.bootstrap_servers

    def call(self, fn, broker, marker):
        (answer,) = write_markers_on_the_wire(
            self.bootstrap_servers,
            (marker.producer_id, marker.producer_epoch, marker.committed, marker.coordinator_epoch, {"rc": [0]}),
        )
        return answer

    broker = None


def test_markers_replicate_and_followers_end_the_same_transactions(brokkr_cluster):
    brokers = brokkr_cluster(3, **{k.replace(".", "_"): v for k, v in UNVERIFIED.items()})
    placed = create(brokers, "rc", 1, 3, min_insync_replicas=2)
    leader = next(b for b in brokers if b.broker.node_id == placed[0][0])
    followers = [b for b in brokers if b is not leader]
    build_log(RemoteLeader(leader))
    # Every marker was answered only once replicated: the leader's high watermark covers it.
    expected = (13, 13, 12)
    assert txn_state(leader)[:3] == expected
    for f in followers:
        state = wait_for("the follower to catch up", lambda f=f: (s := txn_state(f))[:3] == expected and s)
        assert state == txn_state(leader)
    assert [(t.producer_id, t.first_offset) for t in txn_state(leader)[3]] == [(A, 1), (A, 9)]
    # A broker that does not lead the partition refuses the marker.
    answer = write_markers_on_the_wire(followers[0].bootstrap_servers, (A, 0, False, 0, {"rc": [0]}))
    assert answer == [{("rc", 0): 6}]  # NOT_LEADER_OR_FOLLOWER

    leader.stop()  # a follower takes over, with the same transaction state
    rest = followers
    consumer = Consumer({"bootstrap.servers": bootstrap(rest), "group.id": "rc", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("rc", 0, 0)])
    got = []
    wait_for(
        "committed records",
        lambda: got.extend(m.value() for m in consumer.consume(10, 1.0) if not m.error()) or len(got) >= len(COMMITTED),
        DEADLINE,
    )
    consumer.close()
    assert got == COMMITTED
