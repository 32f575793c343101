"""The persister (Kafka's DefaultStatePersister and PersisterStateManager): how share
partitions and the group coordinator reach the share coordinator, ``broker.share_state``.

A share partition's state lives with the leader of its ``__share_group_state`` partition:
this broker's :class:`~brokkr.plugins.share.coordinator.ShareCoordinator` when it leads that
partition (a direct call), else that leader, through the inter-broker requests
Initialize/Read/Write/DeleteShareGroupState and ReadShareGroupStateSummary. While the
coordinator moves, loads or its topic is being created (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE) a call retries, for at most
``share.coordinator.write.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable

from brokkr.core.apis.common import partition_leader
from brokkr.core.broker_client import BrokerClients
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec

from . import records
from .records import StateBatch

log = logging.getLogger("brokkr.share")

INITIALIZE, READ, WRITE, DELETE, SUMMARY = 83, 84, 85, 86, 87
#: The versions this broker sends (the ones Kafka 4.2 serves).
VERSIONS = {INITIALIZE: 0, READ: 0, WRITE: 1, DELETE: 0, SUMMARY: 1}
RETRIABLE = (
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
)
RETRY_BACKOFF_S = 0.05

TopicPartition = tuple[uuid.UUID, int]


class SharePersister:
    """``broker.share_state``: share-partition state, read and written wherever it lives."""

    def __init__(self, broker, coordinator, manager=None):
        self.broker = broker
        self.coordinator = coordinator
        self.manager = manager  # this broker's share partitions, told of a reset
        self._clients: BrokerClients | None = None

    def close(self) -> None:
        if self._clients is not None:
            self._clients.close()

    # -- the calls ------------------------------------------------------------------------

    async def initialize(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        start_offset: int,
        state_epoch: int,
        reload_live: bool = True,
    ) -> ErrorCode:
        """Reset a share partition's state to ``start_offset`` (-1: where share.auto.offset.reset
        says) at ``state_epoch``; a live share partition notices at its next write
        (FENCED_STATE_EPOCH) and reloads."""
        key = (group_id, topic_id, partition)

        async def local():
            return await self.coordinator.initialize(key, state_epoch, start_offset), None

        def body(cls):
            t = cls.struct("InitializeStateData")
            p = cls.struct("PartitionData")
            return cls.cls(
                group_id=group_id,
                topics=[
                    t(
                        topic_id=topic_id,
                        partitions=[p(partition=partition, state_epoch=state_epoch, start_offset=start_offset)],
                    )
                ],
            )

        error, _ = await self._call(key, INITIALIZE, local, body)
        if not error and reload_live and self.manager is not None:
            self.manager.reset(group_id, topic_id, partition)
        return error

    async def read_state(
        self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int
    ) -> tuple[ErrorCode, int, int, list[StateBatch]]:
        """(error, state epoch, start offset, state batches) of one share partition."""
        key = (group_id, topic_id, partition)

        async def local():
            error, state = await self.coordinator.read(key, leader_epoch)
            if error:
                return error, None
            return error, (state.state_epoch, state.start_offset, list(state.batches))

        def body(cls):
            t = cls.struct("ReadStateData")
            p = cls.struct("PartitionData")
            return cls.cls(
                group_id=group_id,
                topics=[t(topic_id=topic_id, partitions=[p(partition=partition, leader_epoch=leader_epoch)])],
            )

        def answer(p):
            return p.state_epoch, p.start_offset, [records.state_batch(b) for b in p.state_batches]

        error, result = await self._call(key, READ, local, body, answer)
        if error:
            return error, -1, -1, []
        return (error, *result)

    async def write_state(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: list[StateBatch],
        delivery_complete_count: int = -1,
    ) -> ErrorCode:
        key = (group_id, topic_id, partition)

        async def local():
            write = self.coordinator.write_state
            return await write(key, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count), None

        def body(cls):
            t = cls.struct("WriteStateData")
            p = cls.struct("PartitionData")
            b = cls.struct("StateBatch")
            data = p(
                partition=partition,
                state_epoch=state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                state_batches=[b(**x._asdict()) for x in batches],
            )
            return cls.cls(group_id=group_id, topics=[t(topic_id=topic_id, partitions=[data])])

        error, _ = await self._call(key, WRITE, local, body)
        return error

    async def delete(self, group_id: str, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Delete share partitions' state (DeleteShareGroupOffsets, DeleteGroups)."""

        async def one(topic_id, partition):
            key = (group_id, topic_id, partition)

            async def local():
                return await self.coordinator.delete(key), None

            def body(cls):
                t = cls.struct("DeleteStateData")
                p = cls.struct("PartitionData")
                return cls.cls(group_id=group_id, topics=[t(topic_id=topic_id, partitions=[p(partition=partition)])])

            error, _ = await self._call(key, DELETE, local, body)
            return error

        keys = list(dict.fromkeys(partitions))
        results = await asyncio.gather(*(one(t, p) for t, p in keys))
        return dict(zip(keys, results, strict=True))

    async def read_summary(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, tuple[ErrorCode, int, int, int, int]]:
        """(error, start offset, leader epoch, state epoch, delivery-complete count: -1 when
        unknown) per share partition (DescribeShareGroupOffsets, its lag); a share partition
        never initialized answers INVALID_REQUEST."""

        async def one(topic_id, partition):
            key = (group_id, topic_id, partition)

            async def local():
                error, state = self.coordinator.summary(key, -1)
                if error:
                    return error, None
                return error, (state.start_offset, state.leader_epoch, state.state_epoch, state.delivery_complete_count)

            def body(cls):
                t = cls.struct("ReadStateSummaryData")
                p = cls.struct("PartitionData")
                return cls.cls(
                    group_id=group_id,
                    topics=[t(topic_id=topic_id, partitions=[p(partition=partition, leader_epoch=-1)])],
                )

            def answer(p):
                return p.start_offset, p.leader_epoch, p.state_epoch, p.delivery_complete_count

            error, result = await self._call(key, SUMMARY, local, body, answer)
            return (error, -1, -1, -1, -1) if error else (error, *result)

        keys = list(dict.fromkeys(partitions))
        results = await asyncio.gather(*(one(t, p) for t, p in keys))
        return dict(zip(keys, results, strict=True))

    # -- routing --------------------------------------------------------------------------

    async def _call(self, key, api_key: int, local, body, answer=None):
        """(error, result) of one share partition's call, local or remote, retried while
        its coordinator is not available, for at most the write timeout."""
        timeout_s = self.broker.config["share.coordinator.write.timeout.ms"] / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            leader = self._leader(records.coordinator_key(*key))
            if leader is None:
                error, result = ErrorCode.COORDINATOR_NOT_AVAILABLE, None
            elif leader == self.broker.node_id:
                error, result = await local()
            else:
                error, result = await self._remote(leader, api_key, body, answer, timeout_s)
            if error not in RETRIABLE or time.monotonic() + RETRY_BACKOFF_S > deadline:
                return error, result
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _leader(self, coordinator_key: str) -> int | None:
        """The node coordinating ``coordinator_key`` (None while unknown: the topic is being
        created, or its partition has no leader)."""
        coordinator = self.coordinator
        if coordinator.topic not in self.broker.topics:
            coordinator.create_topic()
            return None
        leader = partition_leader(self.broker, coordinator.topic, coordinator.partition_for(coordinator_key))
        return leader if leader is not None and leader >= 0 else None

    async def _remote(self, node: int, api_key: int, body, answer, timeout_s: float):
        if self._clients is None:
            self._clients = BrokerClients(self.broker, "share-state")
        client = self._clients.get(node)
        if client is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            response = await client.request(api_key, VERSIONS[api_key], body(request_spec(api_key)), timeout_s)
        except (TimeoutError, OSError) as exc:
            log.debug("share state request %d to broker %d failed: %s", api_key, node, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        (result,) = response.results
        (p,) = result.partitions
        if p.error_code:
            return ErrorCode(p.error_code), None
        return ErrorCode.NONE, answer(p) if answer is not None else None
