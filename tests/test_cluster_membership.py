"""A cluster membership other than ZooKeeper's (``core/cluster.py``'s ``ClusterMembership``,
provided through ``brokkr_cluster_membership``): the broker takes what it needs from the
membership itself, never from the ZooKeeper plugin's settings, so it runs with that plugin
blocked. Here a controlled shutdown waits for its leaderships to move at most the
membership's ``session_timeout_s``."""

from __future__ import annotations

import logging
import time
import uuid

from brokkr.core.cluster import BrokerInfo, PartitionState, TopicAssignment
from brokkr.core.plugins import hookimpl
from waiting import wait_for

ME, PEER = 1, 2


class StillMembership:
    """A cluster without a coordination service, in memory: this broker and a peer that
    never fetches, topic ``t`` led by this broker with both in its ISR; nothing ever
    changes but this broker's own registration. No controller is elected."""

    controller_id = None
    controller_epoch = 0
    cluster_id = "still-cluster"
    session_timeout_s = 0.5

    def __init__(self) -> None:
        self._brokers = {PEER: BrokerInfo(PEER, "127.0.0.1", 9)}
        self._topic = TopicAssignment("t", uuid.uuid4(), {0: (ME, PEER)})
        self._state = PartitionState(ME, 0, (ME, PEER), 0)
        self.deregistered = False

    async def join(self, me: BrokerInfo, listener) -> None:
        self._brokers[me.node_id] = me

    async def deregister(self) -> None:
        self._brokers.pop(ME)
        self.deregistered = True

    async def leave(self) -> None:
        self._brokers.pop(ME, None)

    def brokers(self) -> dict[int, BrokerInfo]:
        return dict(self._brokers)

    def topics(self) -> dict[str, TopicAssignment]:
        return {"t": self._topic}

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._state if (topic, partition) == ("t", 0) else None

    async def write_partition_state(self, topic: str, partition: int, state: PartitionState) -> None:
        return None  # another writer got there first: the state stays as it is

    async def reserve_producer_ids(self, count: int, floor: int) -> int:
        return floor


class ProvidesMembership:
    def __init__(self, membership: StillMembership) -> None:
        self.membership = membership

    @hookimpl
    def brokkr_cluster_membership(self, broker):
        return self.membership


def test_a_controlled_shutdown_waits_the_memberships_session_timeout(brokkr_broker_factory, caplog):
    caplog.set_level(logging.INFO, logger="brokkr")
    membership = StillMembership()
    broker = brokkr_broker_factory(
        {"node.id": ME, "brokkr.plugins.disabled": "brokkr.plugins.cluster.zookeeper"},
        plugins=[ProvidesMembership(membership)],
    )
    assert "zookeeper.session.timeout.ms" not in broker.broker.config.defs, "the ZooKeeper plugin is blocked"
    wait_for("t-0 to be led here", lambda: broker.call(lambda: broker.broker.partition("t", 0).is_leader))

    start = time.monotonic()
    broker.stop()
    took = time.monotonic() - start

    assert membership.deregistered, "a controlled shutdown: the broker left the live brokers first"
    assert membership.session_timeout_s <= took < 5, "waited for t-0's leadership to move, then stopped"
    assert "controlled shutdown: still leading ['t-0']" in caplog.text
    assert "brokkr node 1 stopped" in caplog.text and "not cleanly" not in caplog.text
