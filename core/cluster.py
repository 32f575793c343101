"""Cluster membership: the small interface behind which brokers find each other, elect a
controller and keep topic assignments and partition states (leader, leader epoch, ISR).

brokkr never builds its own consensus: an implementation wraps a proven coordination
service (ZooKeeper, in Kafka's own znode layout: ``plugins/cluster/zookeeper.py``). A
plugin provides one through ``brokkr_cluster_membership``; without ``zookeeper.connect``
none is used and the broker is the single node it always was.

What a membership does, and nothing more:

- registers this broker while its session lives, and lists the live brokers;
- elects one controller among them (:attr:`ClusterMembership.controller_id`);
- stores each topic's replica assignment and settings, and each partition's
  :class:`PartitionState`, changed only by conditional writes (the version read);
- stores the documents every broker shares (ACLs, SCRAM credentials, client quotas:
  :meth:`ClusterMembership.documents`) and groups' own settings;
- keeps a cache of all of it, refreshed by the service's notifications, and calls
  :meth:`ClusterListener.cluster_changed` on the broker's event loop after every change.

The controller (``core/controller.py``) and the replica manager (``core/replication.py``)
decide everything else from that cache.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from .errors import BrokkrError


class ClusterUnreachable(BrokkrError):
    """The coordination service did not answer at start, within its connection timeout:
    the broker cannot join, and stops before it ever listened (``brokkr serve`` exits 1 with
    this one line, naming the setting to check)."""

    exit_status = 1  # the ``brokkr`` command's, as Kafka's start exits when it cannot join


@attrs.frozen
class BrokerInfo:
    """A live broker: its id, rack and the endpoints clients reach it on."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    #: (listener name, host, port) of every advertised listener.
    endpoints: tuple[tuple[str, str, int], ...] = ()
    #: (name, URL) of the other services it serves, published by plugins (``Broker.services``).
    services: tuple[tuple[str, str], ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int]:
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port


@attrs.frozen
class PartitionState:
    """Kafka's LeaderAndIsr as stored per partition: leader (-1: none), leader epoch,
    in-sync replicas, the epoch of the controller that wrote it, and the stored version
    a conditional write must name."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    version: int = 0


@attrs.frozen
class TopicAssignment:
    """A topic as the cluster knows it: id, replicas per partition, settings, and the
    reassignments under way (KIP-455: while one is, ``replicas`` holds the target replicas
    then the original ones not in the target; ``adding`` the target's new replicas,
    ``removing`` the original ones leaving)."""

    name: str
    topic_id: uuid.UUID
    replicas: dict[int, tuple[int, ...]]
    configs: dict[str, str] = attrs.field(factory=dict)
    adding: dict[int, tuple[int, ...]] = attrs.field(factory=dict)
    removing: dict[int, tuple[int, ...]] = attrs.field(factory=dict)

    def target(self, partition: int) -> tuple[int, ...]:
        """The replicas a partition has once its reassignment (if any) completes."""
        leaving = self.removing.get(partition, ())
        return tuple(r for r in self.replicas[partition] if r not in leaving)

    def original(self, partition: int) -> tuple[int, ...]:
        """The replicas a partition had before its reassignment (if any) started."""
        joining = self.adding.get(partition, ())
        return tuple(r for r in self.replicas[partition] if r not in joining)


class ClusterListener(Protocol):
    def cluster_changed(self) -> None:
        """Something in the cache changed (brokers, controller, topics, partition states)."""

    def session_lost(self) -> None:
        """The membership lost its session: this broker is no longer part of the cluster."""


class ClusterMembership(Protocol):
    """One broker's view of the cluster (see the module docstring)."""

    #: The controller's broker id (None while none is elected) and its epoch.
    controller_id: int | None
    controller_epoch: int
    cluster_id: str
    #: Seconds a broker that stops answering stays registered (ZooKeeper's session
    #: timeout, ``zookeeper.session.timeout.ms``): what an uncontrolled stop takes to be
    #: noticed, so the longest a controlled shutdown waits for its leaderships to move.
    session_timeout_s: float

    async def join(self, me: BrokerInfo, listener: ClusterListener) -> None:
        """Connect, register ``me`` and fill the cache; then try to become controller.
        Raises ClusterUnreachable when the service does not answer within its connection
        timeout (the broker has bound its ports then, and listens only once this returns)."""

    async def deregister(self) -> None:
        """Stop being listed among the live brokers, still connected (a controlled shutdown:
        the controller moves this broker's leaderships away)."""

    async def leave(self) -> None:
        """Deregister and disconnect (the broker is stopping)."""

    def brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers."""

    def topics(self) -> dict[str, TopicAssignment]:
        """Every topic of the cluster."""

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The stored state of a partition (None before the controller wrote one)."""

    async def create_topic(self, assignment: TopicAssignment) -> None:
        """Store a new topic (raises BrokkrError TOPIC_ALREADY_EXISTS)."""

    async def update_topic(self, assignment: TopicAssignment) -> None:
        """Store a topic's new partitions or settings (CreatePartitions, AlterConfigs)."""

    async def delete_topic(self, name: str) -> None:
        """Remove a topic and its partition states."""

    async def write_partition_state(self, topic: str, partition: int, state: PartitionState) -> PartitionState | None:
        """Store ``state`` if the stored version is still ``state.version`` (or, for a
        partition without state, create it). Returns the stored state with its new version,
        or None when another writer got there first (the cache is then refreshed)."""

    async def write_partition_states(
        self, writes: Sequence[tuple[str, int, PartitionState]]
    ) -> list[PartitionState | None]:
        """:meth:`write_partition_state` for each ``(topic, partition, state)``, each on its
        own terms, the results in order: the controller's writes for many partitions at
        once (a topic's creation, the partitions a failed broker led), which a membership
        may send together, as Kafka's controller pipelines its ZooKeeper writes."""

    async def reserve_producer_ids(self, count: int, floor: int) -> int:
        """Reserve the next ``count`` producer ids of the cluster, none below ``floor``, for
        this broker alone; returns the first (Kafka's ``/latest_producer_id_block``)."""

    def group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's own settings (GROUP config resources, :mod:`brokkr.core.group_configs`)."""

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """Replace one group's own settings for the whole cluster (empty: remove them); this
        broker's :meth:`group_configs` shows them on return, the others' once told."""

    def documents(self) -> Mapping[str, str]:
        """The cluster's shared documents, name -> text (ACLs, SCRAM credentials, client
        quotas: :mod:`brokkr.core.shared_documents`), cached and followed: a document that did
        not change stays the same ``str`` object, so a reader tells a change by identity."""

    async def set_document(self, name: str, text: str) -> None:
        """Replace one shared document for the whole cluster; this broker's :meth:`documents`
        shows it on return, the others' once told (then ``cluster_changed``). BrokkrError
        when the service cannot keep it (too large)."""
