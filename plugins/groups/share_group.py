"""A share group (KIP-932; Kafka's ShareGroup and ShareGroupMember): members that share the
records of the same partitions, each record acquired by one member at a time.

Its epochs work as a consumer group's (:mod:`.consumer_group`): the *group epoch* counts
changes of what the group wants (a member joining, leaving, changing its subscription, the
subscribed topics changing, partitions whose share state became initialized); the
*assignment epoch* is the group epoch the target assignment was computed for. A member
needs no reconciliation: nothing is revoked, since a partition may be read by several
members at once, so a member moves to its target assignment in the heartbeat that finds it
(Kafka's ShareGroupAssignmentBuilder). States: Empty without members, else Stable.

Partitions are assigned only once their share state exists (the share coordinator's
``__share_group_state``, initialized through ``broker.share_state``): the group keeps the
topics whose partitions are initialized, being initialized or being deleted
(ShareGroupStatePartitionMetadata). Everything here changes only by replaying records
(:mod:`.share_records`).
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter

import attrs

from .consumer_member import Assignment, MemberState


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@attrs.frozen
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = attrs.field(factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch


@attrs.frozen
class TopicPartitions:
    """A topic of the share state metadata: its name and the partitions concerned."""

    name: str
    partitions: frozenset[int] = frozenset()


@attrs.define(eq=False)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = attrs.field(factory=dict)
    target_assignment: dict[str, Assignment] = attrs.field(factory=dict)
    #: How many members name each topic.
    subscribed_names: Counter = attrs.field(factory=Counter)
    #: ShareGroupStatePartitionMetadata: topic id -> topic (name, partitions).
    initialized: dict[uuid.UUID, TopicPartitions] = attrs.field(factory=dict)
    initializing: dict[uuid.UUID, TopicPartitions] = attrs.field(factory=dict)
    deleting: dict[uuid.UUID, str] = attrs.field(factory=dict)
    state: ShareGroupState = ShareGroupState.EMPTY
    #: Soft state, in no record: when a failed initialization of share state may be tried
    #: again (ms; :mod:`.share_groups`); it goes with the group when it is deleted or unloaded.
    initialize_retry_ms: int = 0

    type = "share"
    protocol_type = "share"
    #: Kafka's SimpleAssignor, the only one.
    assignor_name = "simple"

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return set(self.subscribed_names)

    def assignable(self, topic_id: uuid.UUID) -> frozenset[int]:
        """The partitions of a topic whose share state is initialized."""
        topic = self.initialized.get(topic_id)
        return topic.partitions if topic is not None else frozenset()

    def names_any(self, topic_ids: set[uuid.UUID]) -> bool:
        """Whether its share-state metadata (initializing, initialized, deleting) names any of
        ``topic_ids``."""
        return any(t in topic_ids for held in (self.initializing, self.initialized, self.deleting) for t in held)

    # -- changes (called by replay only) ----------------------------------------------

    def update_member(self, new: ShareMember) -> None:
        old = self.members.get(new.member_id)
        if old is not None:
            self.subscribed_names.subtract(old.subscribed_topic_names)
        self.members[new.member_id] = new
        self.subscribed_names.update(new.subscribed_topic_names)
        self.subscribed_names = +self.subscribed_names
        self.update_state()

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is not None:
            self.subscribed_names.subtract(old.subscribed_topic_names)
            self.subscribed_names = +self.subscribed_names
        self.update_state()

    def update_state(self) -> None:
        self.state = ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY
