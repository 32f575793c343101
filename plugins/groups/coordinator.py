"""The group coordinator of one broker: which ``__consumer_offsets`` partitions it
coordinates, and the groups and offsets loaded from them.

A group belongs to partition ``abs(javaHashCode(group_id)) % offsets.topic.num.partitions``
and is coordinated by that partition's leader. Ownership changes only through two calls,
the seam that replication will drive: :meth:`GroupCoordinator.became_leader` (load the
partition's groups; requests for them answer COORDINATOR_LOAD_IN_PROGRESS until loaded)
and :meth:`GroupCoordinator.resigned` (drop them; requests answer NOT_COORDINATOR). On one
broker, the broker leads every partition from start-up.
"""

from __future__ import annotations

import asyncio
import enum
import logging

from brokkr.core.errors import ErrorCode

log = logging.getLogger("brokkr.groups")

OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` (GroupMetadataManager.partitionFor)."""
    return kafka_abs(java_string_hash(group_id)) % num_partitions


class PartitionState(enum.Enum):
    LOADING = "loading"
    LOADED = "loaded"


class GroupCoordinator:
    """The groups (of either protocol) and committed offsets this broker coordinates."""

    def __init__(self, broker):
        self.broker = broker
        self.num_partitions: int = broker.config["offsets.topic.num.partitions"]
        #: partition -> (state, leader epoch) for the partitions this node leads.
        self.owned: dict[int, tuple[PartitionState, int]] = {}
        self._loads: dict[int, asyncio.Task] = {}

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Take over every partition of ``__consumer_offsets`` if it exists (one broker
        leads them all); else it is created on the first group lookup, as in Kafka."""
        topic = self.broker.topics.get(OFFSETS_TOPIC)
        if topic is not None:
            self._take_over(topic)

    def create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted) and take it over: what Kafka's first
        FindCoordinator for a group does, answering COORDINATOR_NOT_AVAILABLE meanwhile."""
        configs = {"cleanup.policy": "compact", "segment.bytes": self.broker.config["offsets.topic.segment.bytes"]}
        self._take_over(self.broker.create_topic(OFFSETS_TOPIC, self.num_partitions, configs))

    def _take_over(self, topic) -> None:
        # The topic's own partition count decides once it exists, as in Kafka.
        self.num_partitions = len(topic.partitions)
        for partition in topic.partitions:
            self.became_leader(partition.index, partition.leader_epoch)

    def stop(self) -> None:
        for index in list(self.owned):
            self.resigned(index)

    # -- ownership seam ---------------------------------------------------------------

    def became_leader(self, index: int, epoch: int) -> None:
        """This node leads ``__consumer_offsets`` partition ``index`` at ``epoch``: load its
        groups and offsets; until loaded, their requests answer COORDINATOR_LOAD_IN_PROGRESS."""
        current = self.owned.get(index)
        if current is not None and current[1] >= epoch:
            return
        self.owned[index] = (PartitionState.LOADING, epoch)
        self._loads[index] = asyncio.get_running_loop().create_task(
            self._load(index, epoch), name=f"brokkr-groups-load-{index}"
        )

    def resigned(self, index: int, epoch: int | None = None) -> None:
        """This node no longer leads partition ``index``: drop its groups and offsets."""
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        self.owned.pop(index, None)

    async def _load(self, index: int, epoch: int) -> None:
        # The partition's records are read back here (GroupMetadataManager.loadGroupsAndOffsets).
        if self.owned.get(index) == (PartitionState.LOADING, epoch):
            self.owned[index] = (PartitionState.LOADED, epoch)
            log.debug("loaded %s-%d at epoch %d", OFFSETS_TOPIC, index, epoch)
        self._loads.pop(index, None)

    async def wait_loaded(self) -> None:
        """Return once every partition being loaded now has loaded (or was dropped)."""
        await asyncio.gather(*self._loads.values(), return_exceptions=True)

    # -- lookups ----------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def check_coordinator(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id`` and has loaded it; otherwise the
        error Kafka answers (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        owned = self.owned.get(self.partition_for(group_id))
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if owned[0] is PartitionState.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE
