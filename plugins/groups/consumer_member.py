"""A member of a consumer group (KIP-848; Kafka's ConsumerGroupMember and MemberState).

A member is a value: every change makes a new one (``attrs.evolve``), so that an operation
can compare the member before and after a heartbeat and write records only for what
changed (its metadata, its assignment). Two records carry it: ConsumerGroupMemberMetadata
(who it is and what it subscribes to) and ConsumerGroupCurrentMemberAssignment (its epochs,
reconciliation state, assigned partitions and partitions pending revocation).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

#: topic id -> partitions; treated as immutable.
Assignment = Mapping[uuid.UUID, frozenset[int]]
EMPTY: Assignment = {}

#: MemberEpoch values with a meaning of their own (ConsumerGroupHeartbeatRequest).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Where a member is in reconciling its assignment with its target (the byte stored
    in ConsumerGroupCurrentMemberAssignmentValue.State)."""

    #: Reconciled with the target assignment of its epoch.
    STABLE = 0
    #: Must first give up (revoke) partitions; it stays in its epoch until it has.
    UNREVOKED_PARTITIONS = 1
    #: In its new epoch, waiting for partitions that other members still hold.
    UNRELEASED_PARTITIONS = 2
    #: A state written by a newer coordinator: the member is fenced and starts over.
    UNKNOWN = 127

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


def assignment_of(topic_partitions: Iterable[Any] | None) -> Assignment:
    """An assignment from a list of (topic_id, partitions) structs (requests, records);
    entries for the same topic are merged, empty ones dropped."""
    out: dict[uuid.UUID, set[int]] = {}
    for tp in topic_partitions or ():
        if tp.partitions:
            out.setdefault(tp.topic_id, set()).update(tp.partitions)
    return {t: frozenset(ps) for t, ps in out.items()}


def assignment_items(assignment: Assignment) -> list[tuple[uuid.UUID, list[int]]]:
    """(topic id, sorted partitions) in topic id order: how records and responses list it."""
    return [(t, sorted(assignment[t])) for t in sorted(assignment, key=str) if assignment[t]]


def is_subset(owned: Iterable[Any] | None, assignment: Assignment) -> bool:
    """Whether the partitions a member reports owning are all in ``assignment`` (Kafka's
    isSubset; not reporting them is not a subset)."""
    if owned is None:
        return False
    return all(tp.topic_id in assignment and set(tp.partitions) <= assignment[tp.topic_id] for tp in owned)


@attrs.frozen
class ConsumerMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: The tagged ClassicMemberMetadata of a classic member of a consumer group: brokkr
    #: writes none (classic members join classic groups) but keeps what it reads.
    classic_metadata: Any = None
    assigned: Assignment = attrs.field(factory=dict)
    pending_revocation: Assignment = attrs.field(factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int) -> ConsumerMember:
        """Move to ``epoch``, remembering the current one (Kafka's updateMemberEpoch): a
        member whose response with the new epoch was lost may still use the previous."""
        return attrs.evolve(self, member_epoch=epoch, previous_member_epoch=self.member_epoch)

    def subscription_changed(self, other: ConsumerMember) -> bool:
        return (
            self.subscribed_topic_names != other.subscribed_topic_names
            or self.subscribed_topic_regex != other.subscribed_topic_regex
        )

    # -- records ------------------------------------------------------------------------

    def with_metadata(self, value: Any) -> ConsumerMember:
        """Apply a ConsumerGroupMemberMetadataValue."""
        return attrs.evolve(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=tuple(sorted(value.subscribed_topic_names)),
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic_metadata=value.classic_member_metadata,
        )

    def with_assignment(self, value: Any) -> ConsumerMember:
        """Apply a ConsumerGroupCurrentMemberAssignmentValue."""
        return attrs.evolve(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            assigned=assignment_of(value.assigned_partitions),
            pending_revocation=assignment_of(value.partitions_pending_revocation),
        )

    def left(self) -> ConsumerMember:
        """What a tombstone of its current assignment leaves of a member until its
        metadata tombstone removes it (epoch -1, nothing assigned)."""
        return attrs.evolve(
            self,
            member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
            previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
            assigned={},
            pending_revocation={},
        )
