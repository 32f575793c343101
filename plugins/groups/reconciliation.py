"""The reconciliation engine of the consumer group protocol (Kafka's CurrentAssignmentBuilder):
how a member's current assignment converges on its target assignment, one heartbeat at a
time, without two members ever consuming the same partition.

Theory of operation. The group's target assignment (epoch E) says which partitions each
member should own. A member in an older epoch is moved towards it in steps:

1. It keeps what it owns that is also in its target (assigned = owned ∩ target).
2. What it owns beyond its target must be revoked first: while it still reports any of
   those partitions as owned, it stays in its epoch in UNREVOKED_PARTITIONS, and the
   heartbeat answers the smaller assignment, which tells the client to give them up.
3. Once it no longer reports them, it moves to epoch E and gets the partitions of its
   target that are free. A partition is free when no member holds it at any epoch (the
   group's partition epochs); one still held elsewhere is *unreleased*: the member moves
   to E in UNRELEASED_PARTITIONS and gets it on a later heartbeat, after its owner has
   revoked it and acknowledged the revocation.

So a partition is revoked by its owner, and the revocation acknowledged, before any other
member is given it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from .consumer_member import Assignment, ConsumerMember, MemberState


class FencedMemberEpoch(Exception):
    """The member must abandon its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def owns_any(owned: Iterable[Any] | None, partitions: Assignment) -> bool:
    """Whether the member still reports owning any of ``partitions``; a heartbeat that
    does not report what it owns is taken as still owning them."""
    if owned is None:
        return True
    return any(p in partitions.get(tp.topic_id, ()) for tp in owned for p in tp.partitions)


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Iterable[Any] | None,
) -> ConsumerMember:
    """The member's next state towards ``target`` at ``target_epoch``, or the member
    itself when it cannot move yet. ``partition_epoch(topic, partition)`` is the epoch of
    the partition's current holder, or -1 when it is free; ``owned`` is what the heartbeat
    reports (None when not reported)."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # UNKNOWN: written by a newer coordinator; start over from nothing.
    if owned is None or list(owned):
        raise FencedMemberEpoch(
            "The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin."
        )
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: Iterable[Any] | None,
) -> ConsumerMember:
    """Kafka's computeNextAssignment, with ``epoch`` the member's epoch to start from."""
    current = member.assigned
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    gaining: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(current):
        wanted = target.get(topic_id, frozenset())
        had = current.get(topic_id, frozenset())
        keep = had & wanted
        new = wanted - keep
        free = frozenset(p for p in new if partition_epoch(topic_id, p) == -1)
        unreleased = unreleased or free != new
        if keep:
            assigned[topic_id] = keep
        if had - keep:
            revoking[topic_id] = had - keep
        if free:
            gaining[topic_id] = free
    if revoking and owns_any(owned, revoking):
        # Revoke first: stay in the current epoch until the client acknowledges.
        return attrs.evolve(
            member.with_epoch(epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned,
            pending_revocation=revoking,
        )
    for topic_id, partitions in gaining.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return attrs.evolve(member.with_epoch(target_epoch), state=state, assigned=assigned, pending_revocation={})
