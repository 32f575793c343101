"""The share coordinator (Kafka's ShareCoordinatorShard): share partitions' durable state in
``__share_group_state``, one state per (group, topic id, partition).

Built on :class:`~brokkr.plugins.coordinator_partitions.PartitionedCoordinator`: a state
belongs to partition ``abs(hashCode("<group>:<topic id>:<partition>")) % partitions`` of
the topic and is served by that partition's leader, loaded by replaying its records.
A state is written as a ShareSnapshot (initialize, and every
``share.coordinator.snapshot.update.records.per.snapshot`` updates) or a ShareUpdate (the
state batches a write carries, merged over the state); Kafka's checks come first: a write
or read of a share partition never initialized answers INVALID_REQUEST, an older leader
epoch FENCED_LEADER_EPOCH, an older state epoch FENCED_STATE_EPOCH.

Pruning (Kafka's ``share.coordinator.state.topic.prune.interval.ms``): a state needs only
its latest ShareSnapshot and what follows it, so every interval the records of each
partition led here before the oldest of its states' latest snapshots are deleted, through
DeleteRecords' log start offset (an empty partition: up to its high watermark). A state
whose snapshot's offset is not known (loaded from the log) holds its partition back until it
is snapshotted again: every ``share.coordinator.cold.partition.snapshot.interval.ms``, the
states not written since the previous interval are, when that lets pruning move on (their
snapshot's offset is unknown, or updates or other records than the states' snapshots follow
it), at most :data:`COLD_SNAPSHOTS_PER_RUN` per partition, the oldest first: a partition
left idle ends with one snapshot per state, written no more.

A write is applied to memory when it is appended (as Kafka's runtime applies its records
before they commit), so that writes of one share partition, which its leader sends one
after the other, are applied in the order they are appended; the caller is answered once
the write is acknowledged as acks=-1 is.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid

import attrs
from brokkr.core.errors import ErrorCode
from brokkr.core.internal_topics import InternalTopic
from brokkr.plugins.coordinator_partitions import PartitionedCoordinator, tombstone_batches, write_error

from . import records
from .records import SNAPSHOT, UPDATE, StateBatch

PLUGIN_NAME = "brokkr.share.coordinator"
SHARE_STATE_TOPIC = "__share_group_state"
#: The most state batches one share partition's state may hold: a share partition has at
#: most group.share.max.partition.max.record.locks (10000) records in flight, each a batch
#: at worst.
MAX_STATE_BATCHES = 10000
#: The most cold snapshots one run writes per __share_group_state partition.
COLD_SNAPSHOTS_PER_RUN = 100

log = logging.getLogger("brokkr.share")

Key = tuple[str, uuid.UUID, int]


@attrs.define
class ShareState:
    """One share partition's state (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: list[StateBatch]
    #: ShareUpdate records written since the last ShareSnapshot.
    updates: int = 0
    #: The log offset of its latest ShareSnapshot, -1 while unknown (loaded, or being written).
    snapshot_offset: int = -1
    #: Whether it was written (other than by a cold snapshot) since the last cold snapshot run.
    written: bool = False


def merge_batches(old: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """``new`` laid over ``old`` (sorted, non-overlapping), without what lies below
    ``start_offset`` (Kafka's PersisterStateBatchCombiner)."""
    new = sorted(new)
    out: list[StateBatch] = []
    j = 0
    for b in sorted(old):
        first = b.first_offset
        while j < len(new) and new[j].last_offset < first:
            j += 1
        k = j
        while first <= b.last_offset:
            if k < len(new) and new[k].first_offset <= b.last_offset:
                n = new[k]
                if n.first_offset > first:
                    out.append(b._replace(first_offset=first, last_offset=n.first_offset - 1))
                first = max(first, n.last_offset + 1)
                k += 1
            else:
                out.append(b._replace(first_offset=first))
                break
    out.extend(new)
    out.sort()
    if start_offset < 0:
        return out
    return [b._replace(first_offset=max(b.first_offset, start_offset)) for b in out if b.last_offset >= start_offset]


def _now() -> int:
    return int(time.time() * 1000)


class ShareCoordinator(PartitionedCoordinator):
    internal = InternalTopic(
        SHARE_STATE_TOPIC,
        PLUGIN_NAME,
        "share.coordinator.state.topic.num.partitions",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.segment.bytes",
        "share.coordinator.state.topic.min.isr",
        cleanup_policy="delete",
    )
    write_timeout = "share.coordinator.write.timeout.ms"
    load_buffer = "share.coordinator.load.buffer.size"
    compression = "share.coordinator.state.topic.compression.codec"

    def __init__(self, broker):
        super().__init__(broker)
        #: __share_group_state partition -> share partition key -> state.
        self.states: dict[int, dict[Key, ShareState]] = {}

    def start(self) -> None:
        super().start()
        self.spawn(self._maintain(), "pruning")

    # -- PartitionedCoordinator -------------------------------------------------------

    def decode(self, key, value) -> records.ShareRecord:
        return records.decode(key, value)

    def replay(self, record: records.ShareRecord) -> None:
        key = (record.group_id, record.topic_id, record.partition)
        states = self.states.setdefault(self._index(key), {})
        v = record.value
        if v is None:
            states.pop(key, None)
        elif record.type == SNAPSHOT:
            states[key] = ShareState(
                v.snapshot_epoch,
                v.state_epoch,
                v.leader_epoch,
                v.start_offset,
                v.delivery_complete_count,
                v.create_timestamp,
                v.write_timestamp,
                [records.state_batch(b) for b in v.state_batches],
            )
        else:
            state = states.get(key)
            if state is None:  # an update without its snapshot (deleted meanwhile): nothing to merge into
                return
            if v.start_offset >= 0:
                state.start_offset = v.start_offset
            if v.leader_epoch >= 0:
                state.leader_epoch = v.leader_epoch
            state.delivery_complete_count = v.delivery_complete_count
            state.batches = merge_batches(
                state.batches, [records.state_batch(b) for b in v.state_batches], state.start_offset
            )
            state.updates += 1

    def unloaded(self, index: int) -> None:
        self.states.pop(index, None)

    # -- lookups ------------------------------------------------------------------------

    def _index(self, key: Key) -> int:
        return self.partition_for(records.coordinator_key(*key))

    def state(self, key: Key) -> ShareState | None:
        return self.states.get(self._index(key), {}).get(key)

    def _known(self, topic_id: uuid.UUID, partition: int) -> bool:
        topic = self.broker.topics_by_id.get(topic_id)
        return topic is not None and 0 <= partition < len(topic.partitions)

    async def _append(self, key: Key, kind: int, value: dict | None, cold: bool = False) -> ErrorCode:
        """Apply one record to memory and write it (see the module's docstring); a snapshot
        written remembers its offset (for pruning)."""
        coordinator_key = records.coordinator_key(*key)
        error = self.check_coordinator(coordinator_key)
        if error:
            return error
        record = (
            records.encode_key(kind, *key),
            None if value is None else records.encode_value(kind, **value),
        )
        self.replay(self.decode(*record))
        partition = self.broker.partition(self.topic, self._index(key))
        # write() appends before it first waits: the record lands at the log's end offset now
        offset = partition.log.log_end_offset if partition is not None else -1
        error = write_error(await self.write(coordinator_key, [record], replay=False))
        state = self.state(key)
        if state is not None:
            state.written = state.written or not cold
            if kind == SNAPSHOT and not error and offset >= 0:
                state.snapshot_offset = offset
        return error

    # -- the operations (one share partition each) --------------------------------------

    async def initialize(self, key: Key, state_epoch: int, start_offset: int) -> ErrorCode:
        if state_epoch < 0 or key[2] < 0:
            return ErrorCode.INVALID_REQUEST
        error = self.check_coordinator(records.coordinator_key(*key))
        if error:
            return error
        current = self.state(key)
        if current is not None and current.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        if not self._known(key[1], key[2]):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if current is not None and current.state_epoch == state_epoch and current.start_offset == start_offset:
            return ErrorCode.NONE  # a repeated request
        batches: list[StateBatch] = []
        complete = 0 if start_offset >= 0 else -1  # nothing delivered past a new start offset
        if start_offset < 0 and current is not None and current.start_offset >= 0:
            # "start where share.auto.offset.reset says" for a share partition already in use
            # (its leader initialized it at its first fetch, before the group coordinator did):
            # what it delivered stays, at the new state epoch
            start_offset, batches = current.start_offset, current.batches
            complete = current.delivery_complete_count
        now = _now()
        value = {
            "snapshot_epoch": 0,
            "state_epoch": state_epoch,
            "leader_epoch": current.leader_epoch if current is not None else -1,
            "start_offset": start_offset,
            "delivery_complete_count": complete,
            "create_timestamp": now,
            "write_timestamp": now,
            "state_batches": batches,
        }
        return await self._append(key, SNAPSHOT, value)

    def _fenced(self, key: Key, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        error = self.check_coordinator(records.coordinator_key(*key))
        if error:
            return error, None
        if leader_epoch < 0 or key[2] < 0:
            return ErrorCode.INVALID_REQUEST, None
        state = self.state(key)
        if state is None:  # "Read on uninitialized share partition"
            return ErrorCode.INVALID_REQUEST, None
        if state.leader_epoch > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        return ErrorCode.NONE, state

    async def read(self, key: Key, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        """The state, once a newer leader epoch is recorded (fencing the older leader's writes)."""
        error, state = self._fenced(key, leader_epoch)
        if error:
            return error, None
        if leader_epoch > state.leader_epoch:
            update = {
                "snapshot_epoch": state.snapshot_epoch,
                "leader_epoch": leader_epoch,
                "start_offset": -1,
                "delivery_complete_count": state.delivery_complete_count,
                "state_batches": [],
            }
            error = await self._append(key, UPDATE, update)
            if error:
                return error, None
            state = self.state(key)
            if state is None:
                return ErrorCode.INVALID_REQUEST, None
        return ErrorCode.NONE, state

    def summary(self, key: Key, leader_epoch: int) -> tuple[ErrorCode, ShareState | None]:
        error = self.check_coordinator(records.coordinator_key(*key))
        if error:
            return error, None
        state = self.state(key)
        if state is None:
            return ErrorCode.INVALID_REQUEST, None
        return ErrorCode.NONE, state

    async def write_state(
        self,
        key: Key,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: list[StateBatch],
        delivery_complete_count: int = -1,
    ) -> ErrorCode:
        error = self.check_coordinator(records.coordinator_key(*key))
        if error:
            return error
        if leader_epoch < 0 or state_epoch < 0 or key[2] < 0 or len(batches) > MAX_STATE_BATCHES:
            return ErrorCode.INVALID_REQUEST
        if any(b.first_offset > b.last_offset or b.delivery_state not in (0, 2, 4) for b in batches):
            return ErrorCode.INVALID_REQUEST
        state = self.state(key)
        if state is None:  # "Write on uninitialized share partition"
            return ErrorCode.INVALID_REQUEST
        if state.leader_epoch > leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if state.state_epoch > state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        if not self._known(key[1], key[2]):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        start = start_offset if start_offset >= 0 else state.start_offset
        merged = merge_batches(state.batches, batches, start)
        if len(merged) > MAX_STATE_BATCHES:
            return ErrorCode.INVALID_REQUEST
        if state.updates >= self.broker.config["share.coordinator.snapshot.update.records.per.snapshot"]:
            snapshot = _snapshot(state, leader_epoch, start, delivery_complete_count, merged)
            return await self._append(key, SNAPSHOT, snapshot)
        update = {
            "snapshot_epoch": state.snapshot_epoch,
            "leader_epoch": leader_epoch,
            "start_offset": start_offset,
            "delivery_complete_count": delivery_complete_count,
            "state_batches": batches,
        }
        return await self._append(key, UPDATE, update)

    async def delete(self, key: Key) -> ErrorCode:
        error = self.check_coordinator(records.coordinator_key(*key))
        if error:
            return error
        if key[2] < 0:
            return ErrorCode.INVALID_REQUEST
        if self.state(key) is None:
            return ErrorCode.NONE
        return await self._append(key, SNAPSHOT, None)

    async def topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """Kafka's maybeCleanupShareState: the states of the deleted topics' share partitions
        in the partitions loaded here are deleted, a tombstone each, in bounded writes
        (:func:`~brokkr.plugins.coordinator_partitions.tombstone_batches`: a group id may be
        32 KiB long). A partition that fails keeps them (logged)."""
        for index, states in list(self.states.items()):
            keys = [key for key in states if key[1] in topic_ids]
            if not keys:
                continue
            route = records.coordinator_key(*keys[0])  # every key here is partition ``index``'s
            for batch in tombstone_batches([(records.encode_key(SNAPSHOT, *key), None) for key in keys]):
                if self._check_partition(index):
                    break
                error = await self.write(route, batch)
                if error:
                    log.warning("deleting share state in %s-%d failed: %s", self.topic, index, error.name)
                    break

    # -- pruning ------------------------------------------------------------------------

    async def _maintain(self) -> None:
        """Cold snapshots and pruning, each at its interval (see the module's docstring)."""
        config = self.broker.config
        prune_s = config["share.coordinator.state.topic.prune.interval.ms"] / 1000
        cold_s = config["share.coordinator.cold.partition.snapshot.interval.ms"] / 1000
        now = time.monotonic()
        next_prune, next_cold = now + prune_s, now + cold_s
        while True:
            await asyncio.sleep(max(0.0, min(next_prune, next_cold) - time.monotonic()))
            now = time.monotonic()
            loaded = [index for index, (done, _) in list(self.owned.items()) if done]
            for index in loaded if now >= next_cold else ():
                try:
                    await self.snapshot_cold(index)
                except Exception:
                    log.exception("cold snapshots of %s-%d failed", self.topic, index)
            if now >= next_cold:
                next_cold = now + cold_s
            for index in loaded if now >= next_prune else ():
                try:
                    self.prune(index)
                except Exception:
                    log.exception("pruning %s-%d failed", self.topic, index)
            if now >= next_prune:
                next_prune = now + prune_s

    async def snapshot_cold(self, index: int) -> None:
        """Snapshot again the states of partition ``index`` not written since the last run
        whose snapshot holds pruning back, the oldest first, at most COLD_SNAPSHOTS_PER_RUN."""
        partition = self.broker.partition(self.topic, index)
        states = self.states.get(index, {})
        if partition is None:
            return
        # records after a snapshot that are not all other states' snapshots: some are garbage
        garbage_after = partition.high_watermark - len(states)
        cold = [
            (s.snapshot_offset, n, key)
            for n, (key, s) in enumerate(states.items())
            if not s.written and (s.snapshot_offset < 0 or s.updates or s.snapshot_offset < garbage_after)
        ]
        for s in states.values():
            s.written = False
        for _, _, key in heapq.nsmallest(COLD_SNAPSHOTS_PER_RUN, cold):
            state = self.state(key)
            if state is None or state.written or self._check_partition(index):
                continue
            value = _snapshot(
                state, state.leader_epoch, state.start_offset, state.delivery_complete_count, state.batches
            )
            if await self._append(key, SNAPSHOT, value, cold=True):
                return  # the partition moved or its writes fail: the next run tries again

    def prune(self, index: int) -> None:
        """Delete the records of partition ``index`` before its states' oldest snapshot."""
        partition = self.broker.partition(self.topic, index)
        if partition is None or self._check_partition(index):
            return
        offsets = [s.snapshot_offset for s in self.states.get(index, {}).values()]
        if any(offset < 0 for offset in offsets):
            return
        target = min(min(offsets, default=partition.high_watermark), partition.high_watermark)
        if target > partition.log.log_start_offset:
            log.debug("pruning %s before offset %d", partition.name, target)
            self.broker.delete_records(partition, target)


def _snapshot(state: ShareState, leader_epoch: int, start: int, complete: int, batches: list[StateBatch]) -> dict:
    """A new ShareSnapshot of ``state`` (the next snapshot epoch)."""
    return {
        "snapshot_epoch": state.snapshot_epoch + 1,
        "state_epoch": state.state_epoch,
        "leader_epoch": leader_epoch,
        "start_offset": start,
        "delivery_complete_count": complete,
        "create_timestamp": state.create_timestamp,
        "write_timestamp": _now(),
        "state_batches": batches,
    }
