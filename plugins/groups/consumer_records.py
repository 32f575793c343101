"""The records of a consumer group (Kafka's GroupCoordinatorRecordHelpers for the six
ConsumerGroup* types) and :func:`replay`, which applies one to memory.

An operation on a consumer group returns records, never changes memory itself; the
coordinator writes them to ``__consumer_offsets`` and then replays them with the same
:func:`replay` that applies the records read back when a partition loads
(GroupMetadataManager.replay). A record is an encoded (key, value) pair; a value of None
is a tombstone. Their order within one write matters as in Kafka: a member's current
assignment tombstone precedes its target assignment tombstone, which precedes its
metadata tombstone.
"""

from __future__ import annotations

import logging
from typing import Any

from .classic import ClassicGroup
from .consumer_group import ConsumerGroup, TopicMetadata
from .consumer_member import Assignment, ConsumerMember, assignment_items, assignment_of
from .records import CoordinatorRecord, encode_key, encode_value, record_spec

log = logging.getLogger("brokkr.groups")

Record = tuple[bytes, bytes | None]
#: The record types this module replays.
TYPES = frozenset(
    {
        "ConsumerGroupMetadata",
        "ConsumerGroupPartitionMetadata",
        "ConsumerGroupMemberMetadata",
        "ConsumerGroupTargetAssignmentMetadata",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupCurrentMemberAssignment",
    }
)
_KEY_VERSIONS = {
    "ConsumerGroupMetadata": 3,
    "ConsumerGroupPartitionMetadata": 4,
    "ConsumerGroupMemberMetadata": 5,
    "ConsumerGroupTargetAssignmentMetadata": 6,
    "ConsumerGroupTargetAssignmentMember": 7,
    "ConsumerGroupCurrentMemberAssignment": 8,
}


def _record(kind: str, key_fields: dict[str, Any], value: Any | None) -> Record:
    key = encode_key(_KEY_VERSIONS[kind], record_spec(kind + "Key").cls(**key_fields))
    return key, None if value is None else encode_value(kind, 0, value)


def _topic_partitions(kind: str, struct: str, assignment: Assignment) -> list:
    cls = record_spec(kind + "Value").struct(struct)
    return [cls(topic_id=t, partitions=ps) for t, ps in assignment_items(assignment)]


# -- builders ---------------------------------------------------------------------------


def group_epoch(group_id: str, epoch: int | None) -> Record:
    """ConsumerGroupMetadata: the group epoch (None: the group's tombstone)."""
    value = None if epoch is None else record_spec("ConsumerGroupMetadataValue").cls(epoch=epoch)
    return _record("ConsumerGroupMetadata", {"group_id": group_id}, value)


def subscription_metadata(group_id: str, metadata: dict[str, TopicMetadata] | None) -> Record:
    """ConsumerGroupPartitionMetadata: the subscribed topics' ids and partition counts."""
    value = None
    if metadata is not None:
        spec = record_spec("ConsumerGroupPartitionMetadataValue")
        topic = spec.struct("TopicMetadata")
        value = spec.cls(
            topics=[
                topic(topic_id=m.topic_id, topic_name=m.name, num_partitions=m.partitions, partition_metadata=[])
                for m in sorted(metadata.values(), key=lambda m: m.name)
            ]
        )
    return _record("ConsumerGroupPartitionMetadata", {"group_id": group_id}, value)


def member_metadata(group_id: str, member_id: str, member: ConsumerMember | None) -> Record:
    """ConsumerGroupMemberMetadata: who the member is and what it subscribes to."""
    value = None
    if member is not None:
        value = record_spec("ConsumerGroupMemberMetadataValue").cls(
            instance_id=member.instance_id,
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=sorted(member.subscribed_topic_names),
            subscribed_topic_regex=member.subscribed_topic_regex,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            server_assignor=member.server_assignor,
            classic_member_metadata=member.classic_metadata,
        )
    return _record("ConsumerGroupMemberMetadata", {"group_id": group_id, "member_id": member_id}, value)


def target_assignment(group_id: str, member_id: str, assignment: Assignment | None) -> Record:
    """ConsumerGroupTargetAssignmentMember: the partitions the member should own."""
    value = None
    if assignment is not None:
        kind = "ConsumerGroupTargetAssignmentMember"
        value = record_spec(kind + "Value").cls(topic_partitions=_topic_partitions(kind, "TopicPartition", assignment))
    return _record("ConsumerGroupTargetAssignmentMember", {"group_id": group_id, "member_id": member_id}, value)


def assignment_epoch(group_id: str, epoch: int | None) -> Record:
    """ConsumerGroupTargetAssignmentMetadata: the epoch of the target assignment."""
    value_cls = record_spec("ConsumerGroupTargetAssignmentMetadataValue").cls
    value = None if epoch is None else value_cls(assignment_epoch=epoch)
    return _record("ConsumerGroupTargetAssignmentMetadata", {"group_id": group_id}, value)


def current_assignment(group_id: str, member_id: str, member: ConsumerMember | None) -> Record:
    """ConsumerGroupCurrentMemberAssignment: the member's epochs, state and partitions."""
    value = None
    if member is not None:
        kind = "ConsumerGroupCurrentMemberAssignment"
        value = record_spec(kind + "Value").cls(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            assigned_partitions=_topic_partitions(kind, "TopicPartitions", member.assigned),
            partitions_pending_revocation=_topic_partitions(kind, "TopicPartitions", member.pending_revocation),
        )
    return _record("ConsumerGroupCurrentMemberAssignment", {"group_id": group_id, "member_id": member_id}, value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member's removal, in Kafka's order (removeMember)."""
    return [
        current_assignment(group_id, member_id, None),
        target_assignment(group_id, member_id, None),
        member_metadata(group_id, member_id, None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Everything of a group, for its deletion (ConsumerGroup.createGroupTombstoneRecords)."""
    gid = group.group_id
    records = [current_assignment(gid, m, None) for m in group.members]
    records += [target_assignment(gid, m, None) for m in group.members]
    records.append(assignment_epoch(gid, None))
    records += [member_metadata(gid, m, None) for m in group.members]
    records += [subscription_metadata(gid, None), group_epoch(gid, None)]
    return records


# -- replay -----------------------------------------------------------------------------


def replay(groups: dict[str, Any], record: CoordinatorRecord) -> None:
    """Apply one ConsumerGroup* record to ``groups`` (group id -> group), creating the
    consumer group on its first record and removing it on its metadata tombstone. A
    classic group that only holds offsets (Empty, never joined) gives way to it, as in
    Kafka; a record for a group of another kind is skipped with a warning."""
    key, value = record.key, record.value
    group = groups.get(key.group_id)
    if group is not None and not isinstance(group, ConsumerGroup):
        if value is None:
            return
        if not (isinstance(group, ClassicGroup) and group.is_empty and group.protocol_type is None):
            log.warning("skipping a %s record of group %s, a %s group", record.type, key.group_id, group.type)
            return
        group = None
    if group is None:
        if value is None:
            return
        group = groups[key.group_id] = ConsumerGroup(key.group_id)
    kind = record.type
    if kind == "ConsumerGroupMetadata":
        if value is None:
            del groups[key.group_id]
        else:
            group.set_group_epoch(value.epoch)
    elif kind == "ConsumerGroupPartitionMetadata":
        topics = value.topics if value is not None else ()
        metadata = [TopicMetadata(t.topic_id, t.topic_name, t.num_partitions) for t in topics]
        group.subscription_metadata = {m.name: m for m in metadata}
    elif kind == "ConsumerGroupMemberMetadata":
        if value is None:
            group.remove_member(key.member_id)
        else:
            old = group.members.get(key.member_id) or ConsumerMember(key.member_id)
            group.update_member(old.with_metadata(value))
    elif kind == "ConsumerGroupTargetAssignmentMember":
        group.set_target(key.member_id, None if value is None else assignment_of(value.topic_partitions))
    elif kind == "ConsumerGroupTargetAssignmentMetadata":
        group.set_assignment_epoch(-1 if value is None else value.assignment_epoch)
    elif kind == "ConsumerGroupCurrentMemberAssignment":
        old = group.members.get(key.member_id)
        if value is None:
            if old is not None:
                group.update_member(old.left())
        else:
            group.update_member((old or ConsumerMember(key.member_id)).with_assignment(value))


def classic_group_tombstone(group_id: str) -> Record:
    """The GroupMetadata tombstone that removes an empty classic group of the same id
    when a consumer group takes its place (Kafka's maybeDeleteEmptyClassicGroup)."""
    return encode_key(2, record_spec("GroupMetadataKey").cls(group=group_id)), None
