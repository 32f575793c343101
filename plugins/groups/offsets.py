"""Committed offsets (Kafka's OffsetMetadataManager): what a commit must pass, the
OffsetCommit records it writes, and their expiry.

Offsets are kept per group as ``{(topic, partition): OffsetAndMetadata}``, changed only by
:meth:`Offsets.replay` of an OffsetCommit record (a value, or a tombstone that deletes
it). Expiry follows ``offsets.retention.minutes`` (KIP-211): the offsets of an Empty group
expire that long after it became Empty; a Stable consumer group's offsets of topics no
member subscribes to, that long after their commit; an explicit retention time of
OffsetCommit v2-4 sets the expiry itself. An Empty group left with no offsets is removed.
A deleted topic's offsets, committed and pending, are deleted by :meth:`Offsets.topic_deleted`
(the ``brokkr_topic_deleted`` observer), as tombstones.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import TYPE_CHECKING

import attrs
from brokkr.core.errors import ErrorCode

from ..coordinator_partitions import tombstone_batches, write_error
from .classic import ClassicGroup, ClassicState
from .consumer_group import ConsumerGroup
from .records import CoordinatorRecord, decode_record

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("brokkr.groups")


@attrs.frozen
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    #: Set only by a commit with an explicit retention time (OffsetCommit v2-4).
    expire_timestamp: int | None = None


# An OffsetCommit record is written on every commit: its key (version 1) and value
# (version 3, or 1 with an expiry; neither flexible) are packed here, field by field as
# records.encode_key/encode_value write them (tests/test_groups_records.py compares them).
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_V3 = struct.Struct(">hqi")  # version, offset, leader epoch; then metadata, commit timestamp
_VALUE_V1 = struct.Struct(">hq")  # version, offset; then metadata, commit and expire timestamps
_I64 = struct.Struct(">q")
_I64_I64 = struct.Struct(">qq")


def _string(s: str) -> bytes:
    data = s.encode()
    return _I16.pack(len(data)) + data


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return b"\x00\x01" + _string(group_id) + _string(topic) + _I32.pack(partition)


def offset_value(o: OffsetAndMetadata) -> bytes:
    """Value version 1 when it carries an expiry, else 3, as Kafka writes them."""
    if o.expire_timestamp is None:
        return _VALUE_V3.pack(3, o.offset, o.leader_epoch) + _string(o.metadata) + _I64.pack(o.commit_timestamp)
    return _VALUE_V1.pack(1, o.offset) + _string(o.metadata) + _I64_I64.pack(o.commit_timestamp, o.expire_timestamp)


class Offsets:
    """The committed offsets of the groups one coordinator has loaded."""

    def __init__(self, coordinator: GroupCoordinator):
        self.coordinator = coordinator
        config = coordinator.broker.config
        self.retention_ms: int = config["offsets.retention.minutes"] * 60_000
        self.check_interval_ms: int = config["offsets.retention.check.interval.ms"]
        self.max_metadata_bytes: int = config["offset.metadata.max.bytes"]
        self.by_group: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        #: Transactional offset commits awaiting their transaction's marker:
        #: producer id -> group -> the OffsetCommit records (applied by replay on COMMIT).
        self.pending: dict[int, dict[str, list[CoordinatorRecord]]] = {}

    def replay(self, record: CoordinatorRecord) -> None:
        key = record.key
        if record.value is None:
            offsets = self.by_group.get(key.group)
            if offsets is not None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self.by_group[key.group]
            if self.pending:  # a tombstone deletes the partition's pending offsets too, as Kafka's replay does
                self._drop_pending(key.group, key.topic, key.partition)
            return
        v = record.value
        expire = v.expire_timestamp if record.value_version == 1 and v.expire_timestamp >= 0 else None
        self.by_group.setdefault(key.group, {})[(key.topic, key.partition)] = OffsetAndMetadata(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, expire
        )

    def get(self, group_id: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        return self.by_group.get(group_id, {})

    # -- OffsetCommit -----------------------------------------------------------------

    def validate_commit(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None, version: int = 9
    ) -> ErrorCode:
        """Whether a commit may be made (Kafka's ClassicGroup.validateOffsetCommit): a commit
        outside any group (generation < 0, no member) needs an Empty or absent group; a
        member's commit needs its generation and a group not completing a rebalance. A
        consumer group's member commits with its member epoch, from OffsetCommit v9
        (ConsumerGroup.validateOffsetCommit)."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            if generation < 0:
                return ErrorCode.NONE
            return ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if isinstance(group, ConsumerGroup):
            return group.validate_offset_commit(member_id, generation, version)
        if not isinstance(group, ClassicGroup):  # a share group takes no commits (Kafka: GroupIdNotFoundException)
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is ClassicState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state is ClassicState.EMPTY:
            return ErrorCode.NONE
        if instance_id is not None and group.static_members.get(instance_id, member_id) != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is ClassicState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def commit(
        self, group_id: str, member_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> ErrorCode:
        """Write the offsets (one batch), then apply them. A commit from a member counts as
        its heartbeat, as in Kafka."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            group = self.coordinator.add_group(ClassicGroup(group_id, state_timestamp=_now_ms()))
        elif isinstance(group, ClassicGroup) and member_id in group.members:
            self.coordinator.classic.keep_alive(group, group.members[member_id])
        records = [(offset_key(group_id, t, p), offset_value(o)) for (t, p), o in offsets.items()]
        error = await self.coordinator.write(group_id, records, replay=False)
        if not error:
            self.committed(group_id, offsets)
        return write_error(error, ErrorCode.INVALID_COMMIT_OFFSET_SIZE)

    def committed(self, group_id: str, offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
        """Apply written offsets as :meth:`GroupCoordinator.replay` applies their records
        (without decoding the records just encoded): an absent group becomes an Empty one.
        A value of version 1 (with an expiry) keeps no leader epoch, and none is lost: the
        requests that set an expiry (OffsetCommit v2-4) carry none."""
        self.by_group.setdefault(group_id, {}).update(offsets)
        if group_id not in self.coordinator.groups:
            commit_timestamp = next(iter(offsets.values())).commit_timestamp
            self.coordinator.add_group(ClassicGroup(group_id, state_timestamp=commit_timestamp))

    # -- TxnOffsetCommit ----------------------------------------------------------------

    async def commit_transactional(
        self, group_id: str, producer_id: int, epoch: int, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> ErrorCode:
        """Write the offsets as part of the producer's transaction (a transactional batch);
        they count once its COMMIT marker reaches the group's partition
        (:meth:`complete_transaction`), and never after an ABORT."""
        if group_id not in self.coordinator.groups:
            self.coordinator.add_group(ClassicGroup(group_id, state_timestamp=_now_ms()))
        records = [(offset_key(group_id, t, p), offset_value(o)) for (t, p), o in offsets.items()]
        error = await self.coordinator.write(group_id, records, replay=False, producer=(producer_id, epoch))
        if error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
            return error
        if not error:
            for key, value in records:
                self.replay_transactional(producer_id, decode_record(key, value))
        return write_error(error, ErrorCode.INVALID_COMMIT_OFFSET_SIZE)

    def replay_transactional(self, producer_id: int, record: CoordinatorRecord) -> None:
        if record.type == "OffsetCommit":
            self.pending.setdefault(producer_id, {}).setdefault(record.key.group, []).append(record)

    def complete_transaction(self, producer_id: int, committed: bool, index: int) -> None:
        """The producer's transaction ended on ``__consumer_offsets`` partition ``index``:
        its pending offsets of the groups there are applied (COMMIT) or dropped (ABORT)."""
        by_group = self.pending.get(producer_id)
        if not by_group:
            return
        for group_id in [g for g in by_group if self.coordinator.partition_for(g) == index]:
            records = by_group.pop(group_id)
            if committed:
                for record in records:
                    self.coordinator.replay(record)
        if not by_group:
            del self.pending[producer_id]

    def _drop_pending(self, group_id: str, topic: str, partition: int) -> None:
        for by_group in self.pending.values():
            records = by_group.get(group_id)
            if records:
                records[:] = [r for r in records if r.key.topic != topic or r.key.partition != partition]

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with a transactional commit not yet committed or aborted."""
        return {
            (r.key.topic, r.key.partition) for by_group in self.pending.values() for r in by_group.get(group_id, ())
        }

    def unload(self, index: int) -> None:
        for producer_id, by_group in list(self.pending.items()):
            for group_id in [g for g in by_group if self.coordinator.partition_for(g) == index]:
                del by_group[group_id]
            if not by_group:
                del self.pending[producer_id]

    def tombstones(self, group_id: str, partitions) -> list[tuple[bytes, None]]:
        """Tombstones for ``partitions`` of the group's offsets (None: all of them)."""
        committed = self.get(group_id)
        chosen = committed if partitions is None else [tp for tp in partitions if tp in committed]
        return [(offset_key(group_id, t, p), None) for t, p in chosen]

    # -- deleted topics ---------------------------------------------------------------

    async def topic_deleted(self, topic: str, partitions: int) -> int:
        """Kafka's OffsetMetadataManager.onPartitionsDeleted: the offsets of the deleted
        topic's ``partitions`` committed by the groups loaded here, and their pending
        transactional offsets, are deleted: a tombstone each, in bounded writes to a
        ``__consumer_offsets`` partition (:func:`~brokkr.plugins.coordinator_partitions.tombstone_batches`).
        A partition whose write fails keeps them (logged, as Kafka does). Returns the number
        of tombstones written."""
        doomed: set[tuple[str, int]] = set()  # (group, partition)
        for group_id, committed in self.by_group.items():
            doomed.update((group_id, p) for t, p in committed if t == topic)
        for by_group in self.pending.values():
            for group_id, records in by_group.items():
                doomed.update((group_id, r.key.partition) for r in records if r.key.topic == topic)
        by_index: dict[int, list[tuple[str, int]]] = {}
        for group_id, p in sorted(key for key in doomed if key[1] < partitions):
            by_index.setdefault(self.coordinator.partition_for(group_id), []).append((group_id, p))
        written = 0
        for index, keys in by_index.items():
            for batch in tombstone_batches([(offset_key(group_id, topic, p), None) for group_id, p in keys]):
                error = await self.coordinator.write(keys[0][0], batch)
                if error:
                    log.warning(
                        "deleting the offsets of deleted topic %s in %s-%d failed: %s",
                        topic,
                        self.coordinator.topic,
                        index,
                        error.name,
                    )
                    break
                written += len(batch)
        if written:
            log.info("deleted %d committed offsets of deleted topic %s", written, topic)
        return written

    # -- expiry -----------------------------------------------------------------------

    def expired(self, group, now_ms: int) -> list[tuple[str, int]]:
        """The group's offsets that have expired at ``now_ms`` (KIP-211)."""
        committed = self.get(group.group_id)
        if not committed:
            return []
        subscribed: set[str] = set()
        if isinstance(group, ConsumerGroup):  # from their commit, unless a member subscribes to the topic
            base, subscribed = None, group.subscribed_topics()
        elif not isinstance(group, ClassicGroup):
            return []
        elif group.state is ClassicState.EMPTY:
            base = group.state_timestamp if group.protocol_type else None
        elif group.state is ClassicState.STABLE and (topics := group.subscribed_topics()) is not None:
            base, subscribed = None, topics
        else:
            return []
        out = []
        for (topic, partition), o in committed.items():
            if topic in subscribed:
                continue
            if o.expire_timestamp is not None:
                gone = now_ms >= o.expire_timestamp
            else:
                gone = now_ms - (o.commit_timestamp if base is None or base < 0 else base) >= self.retention_ms
            if gone:
                out.append((topic, partition))
        return out

    async def expire(self, now_ms: int | None = None) -> int:
        """Remove expired offsets, then Empty groups left without offsets (Kafka's
        cleanupGroupMetadata). Returns the number of offsets removed."""
        now_ms = _now_ms() if now_ms is None else now_ms
        removed = 0
        for group_id, group in list(self.coordinator.groups.items()):
            if self.coordinator.check_coordinator(group_id):
                continue
            gone = self.expired(group, now_ms)
            if gone:
                error = await self.coordinator.write(group_id, self.tombstones(group_id, gone))
                if error:
                    log.warning("expiring offsets of group %s failed: %s", group_id, error.name)
                    continue
                removed += len(gone)
                log.info("group %s: %d offsets expired", group_id, len(gone))
            if group.is_empty and not self.get(group_id) and group.state_name == ClassicState.EMPTY.value:
                await self.coordinator.delete_group(group_id)
        return removed

    async def expire_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            await self.expire()


def _now_ms() -> int:
    return int(time.time() * 1000)
