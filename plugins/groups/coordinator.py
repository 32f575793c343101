"""The group coordinator of one broker: which ``__consumer_offsets`` partitions it
coordinates, the groups and offsets loaded from them, and how changes are written.

A group belongs to partition ``abs(javaHashCode(group_id)) % offsets.topic.num.partitions``
and is coordinated by that partition's leader; ownership, loading and writing are
:class:`~brokkr.plugins.coordinator_partitions.PartitionedCoordinator`'s (shared with the
transaction coordinator). :meth:`GroupCoordinator.replay` applies one record, at runtime
after it is written and when a partition loads. A classic group's membership lives
in memory; its GroupMetadata record is what a restart recovers.
"""

from __future__ import annotations

import logging
from typing import Any

from brokkr.core.errors import ErrorCode
from brokkr.core.internal_topics import InternalTopic

from ..coordinator_partitions import PartitionedCoordinator, partition_for
from .classic import ClassicGroup, ClassicMember, ClassicState
from .classic_protocol import ClassicProtocol
from .consumer_coordinator import ConsumerCoordinator
from .consumer_group import ConsumerGroup
from .consumer_records import TYPES as CONSUMER_RECORD_TYPES
from .consumer_records import group_tombstones
from .consumer_records import replay as replay_consumer_record
from .offsets import OffsetAndMetadata, Offsets
from .records import CoordinatorRecord, decode_record, encode_key, encode_value, record_spec
from .share_group import ShareGroup
from .share_groups import ShareGroups
from .share_records import TYPES as SHARE_RECORD_TYPES
from .share_records import group_tombstones as share_group_tombstones
from .share_records import replay as replay_share_record

log = logging.getLogger("brokkr.groups")

OFFSETS_TOPIC = "__consumer_offsets"
#: The name the coordinator is registered under on its broker.
PLUGIN_NAME = "brokkr.groups.coordinator"
#: GroupMetadataValue version written (Kafka 2.3+ writes 3).
GROUP_METADATA_VERSION = 3


class GroupCoordinator(PartitionedCoordinator):
    """The groups (of either protocol) and committed offsets this broker coordinates.

    Registered as a plugin of its broker (``brokkr.groups.coordinator``); the API
    handlers find it with :func:`brokkr.plugins.groups.coordinator_of`."""

    internal = InternalTopic(
        OFFSETS_TOPIC,
        PLUGIN_NAME,
        num_partitions="offsets.topic.num.partitions",
        replication_factor="offsets.topic.replication.factor",
        segment_bytes="offsets.topic.segment.bytes",
    )
    write_timeout = "offsets.commit.timeout.ms"
    compression = "offsets.topic.compression.codec"
    #: Transactional offset commits (TxnOffsetCommit) load as pending until their marker.
    replays_transactional = True

    def __init__(self, broker):
        super().__init__(broker)
        self.groups: dict[str, Any] = {}
        self.offsets = Offsets(self)
        self.classic = ClassicProtocol(self)
        self.consumer = ConsumerCoordinator(self)
        self.share = ShareGroups(self)

    def start(self) -> None:
        super().start()
        self.spawn(self.offsets.expire_periodically(), "offsets expiry")
        self.consumer.start()
        self.share.start()

    def stop(self) -> None:
        super().stop()
        self.share.close()

    def create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (see :meth:`PartitionedCoordinator.create_topic`)."""
        self.create_topic()

    def decode(self, key, value) -> CoordinatorRecord:
        return decode_record(key, value)

    def loaded(self, index: int) -> None:
        for group in self.groups.values():
            if isinstance(group, ClassicGroup) and self.partition_for(group.group_id) == index:
                self.classic.schedule_sessions(group)
            elif isinstance(group, ConsumerGroup) and self.partition_for(group.group_id) == index:
                self.consumer.loaded(group)
            elif isinstance(group, ShareGroup) and self.partition_for(group.group_id) == index:
                self.share.loaded(group)

    def replay_transactional(self, producer_id: int, record: CoordinatorRecord) -> None:
        self.offsets.replay_transactional(producer_id, record)

    def replay_marker(self, index: int, producer_id: int, committed: bool) -> None:
        self.offsets.complete_transaction(producer_id, committed, index)

    def unloaded(self, index: int) -> None:
        self.offsets.unload(index)
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            self._unload(group_id, ErrorCode.NOT_COORDINATOR)
        for group_id in [g for g in self.offsets.by_group if self.partition_for(g) == index]:
            del self.offsets.by_group[group_id]

    def add_group(self, group):
        self.groups[group.group_id] = group
        return group

    def _unload(self, group_id: str, error: ErrorCode) -> None:
        group = self.groups.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            self.classic.unload(group, error)
        elif isinstance(group, ConsumerGroup):
            self.consumer.unloaded(group_id)
        elif isinstance(group, ShareGroup):
            self.share.unloaded(group_id)

    # -- writing and replaying ----------------------------------------------------

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record to memory: at runtime after it is written, and when loading."""
        if record.type == "OffsetCommit":
            self.offsets.replay(record)
            if record.value is not None and record.key.group not in self.groups:
                # Offsets without a group (simple consumers, AdminClient) belong to an Empty group.
                self.add_group(ClassicGroup(record.key.group, state_timestamp=record.value.commit_timestamp))
        elif record.type == "GroupMetadata":
            group_id = record.key.group
            if record.value is None:
                if isinstance(self.groups.get(group_id), ClassicGroup):
                    self._unload(group_id, ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                self._unload(group_id, ErrorCode.REBALANCE_IN_PROGRESS)
                self.add_group(classic_group_from_record(group_id, record.value))
        elif record.type in CONSUMER_RECORD_TYPES:
            replay_consumer_record(self.groups, record)
        elif record.type in SHARE_RECORD_TYPES:
            replay_share_record(self.groups, record)
        else:
            log.debug("ignoring a %s record", record.type)

    async def store_group(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> ErrorCode:
        """Write the group's GroupMetadata record (with ``assignments``, else the members'
        current ones). Classic membership lives in memory, so the record is not replayed."""
        value_cls = record_spec("GroupMetadataValue").cls
        member_cls = record_spec("GroupMetadataValue").struct("MemberMetadata")
        protocol = group.protocol_name or ""
        members = [
            member_cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=(assignments or {}).get(m.member_id, m.assignment),
            )
            for m in group.members.values()
        ]
        value = value_cls(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp,
            members=members,
        )
        key = encode_key(2, record_spec("GroupMetadataKey").cls(group=group.group_id))
        return await self.write(
            group.group_id, [(key, encode_value("GroupMetadata", GROUP_METADATA_VERSION, value))], replay=False
        )

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Tombstones for the group's offsets and metadata; the group is then gone."""
        if isinstance(self.groups.get(group_id), ConsumerGroup):
            async with self.consumer.lock(group_id):  # no member joins meanwhile
                group = self.groups.get(group_id)
                if isinstance(group, ConsumerGroup) and not group.is_empty:
                    return ErrorCode.NON_EMPTY_GROUP
                records = self.offsets.tombstones(group_id, None)
                if isinstance(group, ConsumerGroup):
                    records += group_tombstones(group)
                return await self.write(group_id, records)
        if isinstance(self.groups.get(group_id), ShareGroup):
            return await self._delete_share_group(group_id)
        records = self.offsets.tombstones(group_id, None)
        records.append((encode_key(2, record_spec("GroupMetadataKey").cls(group=group_id)), None))
        group = self.groups.get(group_id)
        if group is not None:
            group.state = ClassicState.DEAD if isinstance(group, ClassicGroup) else group.state
        error = await self.write(group_id, records)
        if error and group is not None and isinstance(group, ClassicGroup):
            group.state = ClassicState.EMPTY
        return error

    async def _delete_share_group(self, group_id: str) -> ErrorCode:
        """An empty share group's deletion: its share state first (the share coordinator's),
        then its records (Kafka's deleteShareGroups)."""
        async with self.share.lock(group_id):
            group = self.groups.get(group_id)
            if not isinstance(group, ShareGroup):
                return ErrorCode.GROUP_ID_NOT_FOUND
            if not group.is_empty:
                return ErrorCode.NON_EMPTY_GROUP
            error = await self.share.delete_state(group)
            if error:
                return error
            return await self.write(group_id, self.offsets.tombstones(group_id, None) + share_group_tombstones(group))


def classic_group_from_record(group_id: str, value) -> ClassicGroup:
    """A classic group as its last GroupMetadata record left it: Stable with its members
    and their assignments, or Empty (GroupMetadataManager's loading of a group)."""
    protocol = value.protocol or ""
    group = ClassicGroup(
        group_id,
        state=ClassicState.STABLE if value.members else ClassicState.EMPTY,
        state_timestamp=value.current_state_timestamp,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
    )
    for m in value.members:
        rebalance = m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout
        member = ClassicMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            rebalance,
            m.session_timeout,
            value.protocol_type,
            [(protocol, bytes(m.subscription))],
            bytes(m.assignment),
        )
        group.members[member.member_id] = member
        if member.is_static:
            group.static_members[member.group_instance_id] = member.member_id
    return group


__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "OffsetAndMetadata", "partition_for"]
