"""What an assignor of the consumer group protocol is given and returns, and the
bookkeeping the assignors share (Kafka's GroupSpec, MemberSubscriptionAndAssignment and
GroupAssignment). The assignors themselves are in :mod:`.assignors`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

import attrs

TopicPartitions = Mapping[uuid.UUID, frozenset[int]]
#: member id -> {topic id: partitions}
GroupAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@attrs.frozen
class MemberSpec:
    """What an assignor knows of one member (Kafka's MemberSubscriptionAndAssignment)."""

    subscribed: frozenset[uuid.UUID]
    #: The member's current target assignment (what stickiness keeps).
    assignment: TopicPartitions = attrs.field(factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], GroupAssignment]


def subscriptions(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> dict[str, frozenset]:
    """Each member's subscribed topics that exist."""
    return {m: spec.subscribed.intersection(topics) for m, spec in members.items()}


def is_homogeneous(subscribed: Mapping[str, frozenset]) -> bool:
    """Every member subscribes to the same topics (Kafka's SubscriptionType.HOMOGENEOUS)."""
    return len(set(subscribed.values())) <= 1


def valid_current(
    members: Mapping[str, MemberSpec], subscribed: Mapping[str, frozenset], topics: Mapping[uuid.UUID, int]
) -> dict[str, list[tuple[uuid.UUID, int]]]:
    """Each member's current partitions that it may keep: of a topic it subscribes to,
    existing, and not already kept by an earlier member; sorted by topic id and partition."""
    taken: set[tuple[uuid.UUID, int]] = set()
    out: dict[str, list[tuple[uuid.UUID, int]]] = {}
    for member_id, spec in members.items():
        kept = []
        for topic_id in sorted(spec.assignment, key=str):
            if topic_id not in subscribed[member_id]:
                continue
            for p in sorted(spec.assignment[topic_id]):
                if p < topics[topic_id] and (topic_id, p) not in taken:
                    taken.add((topic_id, p))
                    kept.append((topic_id, p))
        out[member_id] = kept
    return out


def to_assignment(owned: Mapping[str, list[tuple[uuid.UUID, int]]]) -> GroupAssignment:
    out: GroupAssignment = {}
    for member_id, partitions in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, p in partitions:
            by_topic.setdefault(topic_id, set()).add(p)
        out[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out
