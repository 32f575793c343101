"""A consumer group (KIP-848; Kafka's ConsumerGroup and ModernGroup): its epochs, members,
target assignment and the indexes derived from them.

Theory of operation. The *group epoch* counts changes of what the group wants: a member
joining, leaving or changing its subscription, or the subscribed topics changing. The
*assignment epoch* is the group epoch its target assignment was computed for; while it is
behind, the group is ASSIGNING. Each member has its own *member epoch*: the epoch of the
target assignment it has reconciled with (see :mod:`.reconciliation`); while any member
is behind, the group is RECONCILING; when all have caught up it is STABLE; with no
members it is EMPTY.

Everything here is changed only by replaying records (:mod:`.consumer_records`), at run
time after a write and when a partition loads, so memory is always what the log says.
The indexes (static members, subscriber counts, the epoch at which each partition is
held) are derived in :meth:`ConsumerGroup.update_member` and
:meth:`ConsumerGroup.remove_member`, the only two ways members change.
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from typing import Any

import attrs
from brokkr.core.errors import ErrorCode

from .consumer_member import Assignment, ConsumerMember, MemberState


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class GroupApiError(Exception):
    """An operation refused with a Kafka error code and message (Kafka's ApiException)."""

    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@attrs.frozen
class TopicMetadata:
    """A subscribed topic as the group last saw it (ConsumerGroupPartitionMetadata)."""

    topic_id: uuid.UUID
    name: str
    partitions: int


@attrs.define(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = attrs.field(factory=dict)
    target_assignment: dict[str, Assignment] = attrs.field(factory=dict)
    #: topic name -> metadata, for the topics the members subscribe to that exist.
    subscription_metadata: dict[str, TopicMetadata] = attrs.field(factory=dict)
    #: group.instance.id -> member id.
    static_members: dict[str, str] = attrs.field(factory=dict)
    #: How many members name each topic, use each regex, prefer each server assignor.
    subscribed_names: Counter = attrs.field(factory=Counter)
    subscribed_regexes: Counter = attrs.field(factory=Counter)
    server_assignors: Counter = attrs.field(factory=Counter)
    #: topic id -> partition -> the epoch of the member holding it (assigned or pending
    #: revocation); a partition absent here is free.
    partition_epochs: dict[uuid.UUID, dict[int, int]] = attrs.field(factory=dict)
    state: ConsumerGroupState = ConsumerGroupState.EMPTY
    #: Soft state, not from records: the group's resolved regexes
    #: (:class:`~brokkr.plugins.groups.target_assignment.RegexCache`).
    regex_cache: Any = None

    type = "consumer"
    protocol_type = "consumer"

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    # -- lookups ------------------------------------------------------------------------

    def member(self, member_id: str) -> ConsumerMember:
        member = self.members.get(member_id)
        if member is None:
            raise GroupApiError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {self.group_id}."
            )
        return member

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def target_of(self, member_id: str, instance_id: str | None = None) -> Assignment:
        """The member's target assignment; a static member's is its instance's, whichever
        member id held it (Kafka's targetAssignment(memberId, instanceId))."""
        if instance_id is None:
            return self.target_assignment.get(member_id, {})
        previous = self.static_members.get(instance_id)
        return self.target_assignment.get(previous, {}) if previous is not None else {}

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get(topic_id, {}).get(partition, -1)

    def preferred_assignor(self, order: list[str]) -> str | None:
        """The server assignor most members ask for (ties: the earlier in ``order``)."""
        counts = {name: n for name, n in self.server_assignors.items() if n > 0}
        if not counts:
            return None
        rank = {name: i for i, name in enumerate(order)}
        return max(counts, key=lambda name: (counts[name], -rank.get(name, len(order))))

    def validate_offset_commit(self, member_id: str, member_epoch: int, version: int = 9) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit: with epoch < 0 anyone may commit for
        an empty group; otherwise the member must exist, commit with OffsetCommit v9+ and
        its current epoch (STALE_MEMBER_EPOCH)."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.NONE
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if version < 9 and member.classic_metadata is None:
            return ErrorCode.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH if member.classic_metadata is None else ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def subscribed_topics(self) -> set[str]:
        """The topics the members subscribe to now, by name or regex (for offset expiry)."""
        return set(self.subscription_metadata)

    # -- changes (called by replay only) ----------------------------------------------

    def update_member(self, new: ConsumerMember) -> None:
        old = self.members.get(new.member_id)
        self._index(old, -1)
        self.members[new.member_id] = new
        self._index(new, +1)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id
        self.update_state()

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        self._index(old, -1)
        if old is not None and old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        self.update_state()

    def _index(self, member: ConsumerMember | None, sign: int) -> None:
        if member is None:
            return
        for name in member.subscribed_topic_names:
            self.subscribed_names[name] += sign
        if member.subscribed_topic_regex:
            self.subscribed_regexes[member.subscribed_topic_regex] += sign
        if member.server_assignor:
            self.server_assignors[member.server_assignor] += sign
        for counter in (self.subscribed_names, self.subscribed_regexes, self.server_assignors):
            for key in [k for k, n in counter.items() if n <= 0]:
                del counter[key]
        for assignment in (member.assigned, member.pending_revocation):
            for topic_id, partitions in assignment.items():
                epochs = self.partition_epochs.setdefault(topic_id, {})
                for p in partitions:
                    if sign > 0:
                        epochs[p] = member.member_epoch
                    elif epochs.get(p) == member.member_epoch:
                        del epochs[p]
                if not epochs:
                    del self.partition_epochs[topic_id]

    def set_target(self, member_id: str, assignment: Assignment | None) -> None:
        if assignment is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = assignment

    def set_group_epoch(self, epoch: int) -> None:
        self.group_epoch = epoch
        self.update_state()

    def set_assignment_epoch(self, epoch: int) -> None:
        self.assignment_epoch = epoch
        self.update_state()

    def update_state(self) -> None:
        if not self.members:
            self.state = ConsumerGroupState.EMPTY
        elif self.group_epoch > self.assignment_epoch:
            self.state = ConsumerGroupState.ASSIGNING
        elif any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            self.state = ConsumerGroupState.RECONCILING
        else:
            self.state = ConsumerGroupState.STABLE

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Whether the member waits for a partition another member still holds."""
        if member.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic_id, partitions in self.target_assignment.get(member.member_id, {}).items():
            mine = member.assigned.get(topic_id, frozenset())
            if any(p not in mine and self.partition_epoch(topic_id, p) != -1 for p in partitions):
                return True
        return False
