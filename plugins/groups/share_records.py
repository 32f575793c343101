"""The records of a share group (Kafka's GroupCoordinatorRecordHelpers for the six
ShareGroup* types, key versions 10-15) and :func:`replay`, which applies one to memory.

As for consumer groups (:mod:`.consumer_records`), an operation returns records; the
coordinator writes them to ``__consumer_offsets`` and replays them with :func:`replay`, the
same function that applies the records read back when a partition loads.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import attrs

from .consumer_member import Assignment, MemberState, assignment_items, assignment_of
from .consumer_records import Record
from .records import KEY_VERSIONS, CoordinatorRecord, encode_key, encode_value, record_spec
from .share_group import ShareGroup, ShareMember, TopicPartitions

log = logging.getLogger("brokkr.groups")

#: The record types this module replays.
TYPES = frozenset(
    {
        "ShareGroupMetadata",
        "ShareGroupMemberMetadata",
        "ShareGroupTargetAssignmentMetadata",
        "ShareGroupTargetAssignmentMember",
        "ShareGroupCurrentMemberAssignment",
        "ShareGroupStatePartitionMetadata",
    }
)


def _record(kind: str, key_fields: dict[str, Any], value: Any | None) -> Record:
    key = encode_key(KEY_VERSIONS[kind], record_spec(kind + "Key").cls(**key_fields))
    return key, None if value is None else encode_value(kind, 0, value)


def _topic_partitions(kind: str, struct: str, assignment: Assignment) -> list:
    cls = record_spec(kind + "Value").struct(struct)
    return [cls(topic_id=t, partitions=ps) for t, ps in assignment_items(assignment)]


# -- builders ---------------------------------------------------------------------------


def group_epoch(group_id: str, epoch: int | None, metadata_hash: int = 0) -> Record:
    """ShareGroupMetadata: the group epoch and its topics' hash (None: the group's tombstone)."""
    value = None
    if epoch is not None:
        value = record_spec("ShareGroupMetadataValue").cls(epoch=epoch, metadata_hash=metadata_hash)
    return _record("ShareGroupMetadata", {"group_id": group_id}, value)


def member_metadata(group_id: str, member_id: str, member: ShareMember | None) -> Record:
    value = None
    if member is not None:
        value = record_spec("ShareGroupMemberMetadataValue").cls(
            rack_id=member.rack_id,
            client_id=member.client_id,
            client_host=member.client_host,
            subscribed_topic_names=sorted(member.subscribed_topic_names),
        )
    return _record("ShareGroupMemberMetadata", {"group_id": group_id, "member_id": member_id}, value)


def target_assignment(group_id: str, member_id: str, assignment: Assignment | None) -> Record:
    value = None
    if assignment is not None:
        kind = "ShareGroupTargetAssignmentMember"
        value = record_spec(kind + "Value").cls(topic_partitions=_topic_partitions(kind, "TopicPartition", assignment))
    return _record("ShareGroupTargetAssignmentMember", {"group_id": group_id, "member_id": member_id}, value)


def assignment_epoch(group_id: str, epoch: int | None, timestamp_ms: int = 0) -> Record:
    value_cls = record_spec("ShareGroupTargetAssignmentMetadataValue").cls
    value = None if epoch is None else value_cls(assignment_epoch=epoch, assignment_timestamp=timestamp_ms)
    return _record("ShareGroupTargetAssignmentMetadata", {"group_id": group_id}, value)


def current_assignment(group_id: str, member_id: str, member: ShareMember | None) -> Record:
    value = None
    if member is not None:
        kind = "ShareGroupCurrentMemberAssignment"
        value = record_spec(kind + "Value").cls(
            member_epoch=member.member_epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=int(member.state),
            assigned_partitions=_topic_partitions(kind, "TopicPartitions", member.assigned),
        )
    return _record("ShareGroupCurrentMemberAssignment", {"group_id": group_id, "member_id": member_id}, value)


def state_metadata(
    group_id: str,
    initializing: dict[uuid.UUID, TopicPartitions] | None,
    initialized: dict[uuid.UUID, TopicPartitions] | None = None,
    deleting: dict[uuid.UUID, str] | None = None,
) -> Record:
    """ShareGroupStatePartitionMetadata: the topics whose share state is being initialized,
    is initialized, is being deleted (``initializing`` None: the tombstone)."""
    value = None
    if initializing is not None:
        spec = record_spec("ShareGroupStatePartitionMetadataValue")
        info, topic = spec.struct("TopicPartitionsInfo"), spec.struct("TopicInfo")

        def listed(topics: dict[uuid.UUID, TopicPartitions]) -> list:
            return [
                info(topic_id=t, topic_name=tp.name, partitions=sorted(tp.partitions))
                for t, tp in sorted(topics.items(), key=lambda kv: str(kv[0]))
            ]

        value = spec.cls(
            initializing_topics=listed(initializing),
            initialized_topics=listed(initialized or {}),
            deleting_topics=[
                topic(topic_id=t, topic_name=n) for t, n in sorted((deleting or {}).items(), key=lambda kv: str(kv[0]))
            ],
        )
    return _record("ShareGroupStatePartitionMetadata", {"group_id": group_id}, value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member's removal, in Kafka's order (shareGroupFenceMember)."""
    return [
        current_assignment(group_id, member_id, None),
        target_assignment(group_id, member_id, None),
        member_metadata(group_id, member_id, None),
    ]


def group_tombstones(group: ShareGroup) -> list[Record]:
    """Everything of a group, for its deletion (ShareGroup.createGroupTombstoneRecords)."""
    gid = group.group_id
    records = [current_assignment(gid, m, None) for m in group.members]
    records += [target_assignment(gid, m, None) for m in group.members]
    records.append(assignment_epoch(gid, None))
    records += [member_metadata(gid, m, None) for m in group.members]
    records += [group_epoch(gid, None), state_metadata(gid, None)]
    return records


# -- replay -----------------------------------------------------------------------------


def _topics(infos) -> dict[uuid.UUID, TopicPartitions]:
    return {t.topic_id: TopicPartitions(t.topic_name, frozenset(t.partitions)) for t in infos}


def replay(groups: dict[str, Any], record: CoordinatorRecord) -> None:
    """Apply one ShareGroup* record to ``groups``, creating the share group on its first
    record and removing it on its metadata tombstone; a record of a group of another kind
    is skipped with a warning (Kafka refuses it)."""
    key, value = record.key, record.value
    group = groups.get(key.group_id)
    if group is not None and not isinstance(group, ShareGroup):
        if value is not None:
            log.warning("skipping a %s record of group %s, a %s group", record.type, key.group_id, group.type)
        return
    if group is None:
        if value is None:
            return
        group = groups[key.group_id] = ShareGroup(key.group_id)
    kind = record.type
    if kind == "ShareGroupMetadata":
        if value is None:
            del groups[key.group_id]
        else:
            group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
    elif kind == "ShareGroupMemberMetadata":
        if value is None:
            group.remove_member(key.member_id)
        else:
            old = group.members.get(key.member_id) or ShareMember(key.member_id)
            group.update_member(
                attrs.evolve(
                    old,
                    rack_id=value.rack_id,
                    client_id=value.client_id,
                    client_host=value.client_host,
                    subscribed_topic_names=tuple(sorted(value.subscribed_topic_names)),
                )
            )
    elif kind == "ShareGroupTargetAssignmentMember":
        if value is None:
            group.target_assignment.pop(key.member_id, None)
        else:
            group.target_assignment[key.member_id] = assignment_of(value.topic_partitions)
    elif kind == "ShareGroupTargetAssignmentMetadata":
        group.assignment_epoch = -1 if value is None else value.assignment_epoch
    elif kind == "ShareGroupCurrentMemberAssignment":
        old = group.members.get(key.member_id)
        if value is None:
            if old is not None:
                group.update_member(attrs.evolve(old, member_epoch=-1, previous_member_epoch=-1, assigned={}))
        else:
            group.update_member(
                attrs.evolve(
                    old or ShareMember(key.member_id),
                    member_epoch=value.member_epoch,
                    previous_member_epoch=value.previous_member_epoch,
                    state=MemberState.of(value.state),
                    assigned=assignment_of(value.assigned_partitions),
                )
            )
    elif kind == "ShareGroupStatePartitionMetadata":
        if value is None:
            group.initializing, group.initialized, group.deleting = {}, {}, {}
        else:
            group.initializing = _topics(value.initializing_topics)
            group.initialized = _topics(value.initialized_topics)
            group.deleting = {t.topic_id: t.topic_name for t in value.deleting_topics}
