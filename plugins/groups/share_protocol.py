"""The share group protocol's operations (KIP-932; GroupMetadataManager's
shareGroupHeartbeat, shareGroupLeave, shareGroupFenceMember and the session timer), written
as :mod:`.consumer_protocol` is: an operation reads the groups and returns records and an
answer, never changes a group itself; the caller writes the records and replays them
(:func:`.share_records.replay`). Refusals raise :class:`~.consumer_group.GroupApiError`.

A heartbeat (1) creates or updates the member, bumping the group epoch when its
subscription, the subscribed topics, or the partitions whose share state is initialized
changed; (2) computes a new target assignment with the ``simple`` assignor
(:mod:`.share_assignor`) when the group epoch is ahead of the assignment epoch; (3) moves
the member straight to its target (nothing to revoke: a partition may have several
readers). The answer carries the assignment when the member joined, sent its subscription
(a full request), or its assignment changed. It also names the subscribed partitions whose
share state does not exist yet: the coordinator initializes them (``broker.share_state``)
and assigns them once they are.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
from brokkr.core.errors import ErrorCode

from . import share_records as rec
from .consumer_group import GroupApiError
from .consumer_heartbeat import blank
from .consumer_member import Assignment, MemberState
from .consumer_protocol import HeartbeatResult
from .consumer_timers import SESSION, Expiry, MemberTimers
from .share_assignor import assign
from .share_group import ShareGroup, ShareMember, TopicPartitions
from .target_assignment import TopicsView

log = logging.getLogger("brokkr.groups")

LEAVE_GROUP_MEMBER_EPOCH = -1
#: Kafka's isMemberIdValid: a share member id is at most this long.
MAX_MEMBER_ID_LENGTH = 36


@attrs.frozen
class ShareSettings:
    """What an operation needs to know of one group's settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


#: topic id -> (name, partitions) still to initialize, and whether the topic is new to the group.
ToInitialize = dict[uuid.UUID, tuple[TopicPartitions, bool]]
Result = tuple[list[rec.Record], HeartbeatResult, ToInitialize]


def validate(req: Any) -> None:
    """Kafka's isMemberIdValid and throwIfShareGroupHeartbeatRequestIsInvalid (INVALID_REQUEST)."""

    def invalid(message: str) -> GroupApiError:
        return GroupApiError(ErrorCode.INVALID_REQUEST, message)

    if not req.member_id or len(req.member_id) > MAX_MEMBER_ID_LENGTH:
        raise invalid("Invalid member id in the request.")
    if blank(req.member_id):
        raise invalid("MemberId can't be empty.")
    if not req.group_id or blank(req.group_id):
        raise invalid("GroupId can't be empty.")
    if blank(req.rack_id):
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def share_group(groups: dict[str, Any], group_id: str, create: bool) -> ShareGroup:
    """Kafka's getOrMaybeCreateShareGroup: a group of another type is never converted."""
    group = groups.get(group_id)
    if isinstance(group, ShareGroup):
        return group
    if group is None and create:
        return ShareGroup(group_id)
    if group is None:
        raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Share group {group_id} not found.")
    raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")


def check_epoch(member: ShareMember, received: int) -> None:
    """Kafka's throwIfShareGroupMemberEpochIsInvalid (the previous epoch is accepted: the
    answer with the new one may have been lost)."""
    if received == 0:
        return
    if received > member.member_epoch:
        raise GroupApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch and received != member.previous_member_epoch:
        raise GroupApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The share group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}), and it does not match the previous member epoch "
            f"({member.previous_member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def metadata_hash(names: list[str], topics: TopicsView) -> int:
    """A 64-bit hash of the subscribed topics as they exist (id, name, partition count): it
    changes when one is created, deleted or grown (Kafka's computeMetadataHash serves the same
    end with its own function; the value is brokkr's)."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        found = topics.lookup(name)
        if found is not None:
            h.update(f"{found[0]}:{name}:{found[1]};".encode())
    return int.from_bytes(h.digest(), "big", signed=True) if names else 0


class ShareProtocol:
    """The share-protocol operations of one coordinator, and its members' session timers.
    ``settings_of(group_id)`` gives a group's settings (its own, else the broker's);
    ``initializes``: whether partitions must have share state before they are assigned
    (a broker with a share coordinator); without one every partition is assignable."""

    def __init__(self, settings_of: Callable[[str], ShareSettings], initializes: bool = True):
        self.settings_of = settings_of
        self.initializes = initializes
        self.timers = MemberTimers()

    def heartbeat(
        self,
        groups: dict[str, Any],
        req: Any,
        *,
        now_ms: int,
        topics: TopicsView,
        client_id: str = "",
        client_host: str = "",
    ) -> Result:
        """One ShareGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1)."""
        validate(req)
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
            records, result = self.leave(groups, req.group_id, req.member_id, topics)
            return records, result, {}
        joining = req.member_epoch == 0
        group = share_group(groups, req.group_id, joining)
        gid, member_id = group.group_id, req.member_id
        settings = self.settings_of(gid)
        if len(group.members) >= settings.max_size and member_id not in group.members:
            raise GroupApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The share group has reached its maximum capacity of {settings.max_size} members.",
            )
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise GroupApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {gid}.")
            member = ShareMember(member_id)
            log.info("share group %s: member %s joins", gid, member_id)
        check_epoch(member, req.member_epoch)
        names = req.subscribed_topic_names
        updated = attrs.evolve(
            member,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            subscribed_topic_names=tuple(sorted(set(names))) if names is not None else member.subscribed_topic_names,
            client_id=client_id,
            client_host=client_host,
        )

        # (1) The member, the group's subscription and its epoch.
        records: list[rec.Record] = self._forget_deleted_topics(group, topics)
        if updated != member or member_id not in group.members:
            records.append(rec.member_metadata(gid, member_id, updated))
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        subscribed = self._subscribed(group, member, updated)
        bump = subscription_changed or group.group_epoch == 0
        if group.assignment_epoch >= group.group_epoch and self._assignment_pending(group, subscribed, topics):
            bump = True
        new_hash = metadata_hash(sorted(subscribed), topics)
        bump |= new_hash != group.metadata_hash
        epoch = group.group_epoch + (1 if bump else 0)
        if bump:
            records.append(rec.group_epoch(gid, epoch, new_hash))
            log.info("share group %s: epoch %d", gid, epoch)

        # (2) The target assignment.
        if epoch > group.assignment_epoch:
            targets = self._targets(group, member_id, updated, topics)
            for m, assignment in targets.items():
                if assignment != group.target_assignment.get(m):
                    records.append(rec.target_assignment(gid, m, assignment))
            records.append(rec.assignment_epoch(gid, epoch, now_ms))
            target_epoch, target = epoch, targets.get(member_id, {})
        else:
            target_epoch, target = group.assignment_epoch, group.target_assignment.get(member_id, {})

        # (3) The member takes its target (Kafka's ShareGroupAssignmentBuilder).
        if subscription_changed or not updated.is_reconciled_to(target_epoch):
            own = self._filter(target, updated.subscribed_topic_names, topics)
            new = attrs.evolve(updated, state=MemberState.STABLE, assigned=own)
            if target_epoch != updated.member_epoch:
                new = attrs.evolve(new, member_epoch=target_epoch, previous_member_epoch=updated.member_epoch)
            if new != updated or member_id not in group.members:
                records.append(rec.current_assignment(gid, member_id, new))
            updated = new

        self.timers.schedule(SESSION, gid, member_id, now_ms + settings.session_timeout_ms)
        full = joining or names is not None
        assignment = updated.assigned if full or updated.assigned != member.assigned else None
        result = HeartbeatResult(member_id, updated.member_epoch, settings.heartbeat_interval_ms, assignment)
        return records, result, self._to_initialize(group, subscribed, topics)

    # -- leaving and fencing ----------------------------------------------------------

    def leave(self, groups: dict[str, Any], group_id: str, member_id: str, topics: TopicsView):
        """Kafka's shareGroupLeave: its group lookup (shareGroup) names a missing group and
        one of another type apart."""
        group = groups.get(group_id)
        if group is None:
            raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        group = share_group(groups, group_id, create=False)
        member = group.members.get(member_id)
        if member is None:
            raise GroupApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        log.info("share group %s: member %s left", group_id, member_id)
        return self.fence(group, member, topics), HeartbeatResult(member_id, LEAVE_GROUP_MEMBER_EPOCH)

    def fence(self, group: ShareGroup, member: ShareMember, topics: TopicsView) -> list:
        """Remove a member (Kafka's shareGroupFenceMember): its tombstones and a new group
        epoch; the last member's leaving also moves the assignment epoch along."""
        gid = group.group_id
        records = rec.member_tombstones(gid, member.member_id)
        subscribed = self._subscribed(group, member, None)
        epoch = group.group_epoch + 1
        records.append(rec.group_epoch(gid, epoch, metadata_hash(sorted(subscribed), topics)))
        if len(group.members) == 1:
            records.append(rec.assignment_epoch(gid, epoch, 0))
        self.timers.cancel_member(gid, member.member_id)
        return records

    def expire(self, groups: dict[str, Any], expiry: Expiry, topics: TopicsView) -> list:
        """The records of a session that ran out: the member is fenced, unless it
        heartbeated since or is gone."""
        group = groups.get(expiry.group_id)
        member = group.members.get(expiry.member_id) if isinstance(group, ShareGroup) else None
        if member is None or self.timers.deadline(expiry.kind, expiry.group_id, expiry.member_id) is not None:
            return []
        log.info("share group %s: member %s fenced: its session expired", expiry.group_id, expiry.member_id)
        return self.fence(group, member, topics)

    def loaded(self, group: ShareGroup, now_ms: int) -> None:
        """A group loaded from its partition: its members' sessions start now."""
        session = self.settings_of(group.group_id).session_timeout_ms
        for member_id in group.members:
            self.timers.schedule(SESSION, group.group_id, member_id, now_ms + session)

    def unloaded(self, group_id: str) -> None:
        self.timers.cancel_group(group_id)

    # -- share state --------------------------------------------------------------------

    @staticmethod
    def initialized(group: ShareGroup, done: dict[uuid.UUID, TopicPartitions]) -> rec.Record:
        """The ShareGroupStatePartitionMetadata record once ``done`` has share state."""
        initialized = dict(group.initialized)
        for topic_id, tp in done.items():
            before = initialized.get(topic_id)
            partitions = tp.partitions | (before.partitions if before is not None and before.name == tp.name else set())
            initialized[topic_id] = TopicPartitions(tp.name, frozenset(partitions))
        initializing = {t: tp for t, tp in group.initializing.items() if t not in done}
        return rec.state_metadata(group.group_id, initializing, initialized, group.deleting)

    @staticmethod
    def without_topics(group: ShareGroup, topic_ids: set[uuid.UUID]) -> rec.Record | None:
        """The ShareGroupStatePartitionMetadata record without ``topic_ids`` (deleted topics)
        among its initializing, initialized and deleting topics; None when it holds none of
        them (Kafka's maybeCleanupShareGroupState)."""
        if not group.names_any(topic_ids):
            return None
        held = (group.initializing, group.initialized, group.deleting)
        initializing, initialized, deleting = ({t: v for t, v in d.items() if t not in topic_ids} for d in held)
        return rec.state_metadata(group.group_id, initializing, initialized, deleting)

    @staticmethod
    def _forget_deleted_topics(group: ShareGroup, topics: TopicsView) -> list[rec.Record]:
        """The ShareGroupStatePartitionMetadata record without the topics deleted since (by
        name: gone, or recreated under another id), else none: what :meth:`without_topics`
        did when the topic was deleted, done again at the group's next heartbeat for a group
        that was not loaded here then, so that a group holds only topics that exist."""

        def exists(topic_id: uuid.UUID, tp: TopicPartitions) -> bool:
            found = topics.lookup(tp.name)
            return found is not None and found[0] == topic_id

        initialized = {t: tp for t, tp in group.initialized.items() if exists(t, tp)}
        initializing = {t: tp for t, tp in group.initializing.items() if exists(t, tp)}
        if len(initialized) == len(group.initialized) and len(initializing) == len(group.initializing):
            return []
        return [rec.state_metadata(group.group_id, initializing, initialized, group.deleting)]

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _subscribed(group: ShareGroup, member: ShareMember, updated: ShareMember | None) -> set[str]:
        names = Counter(group.subscribed_names)
        if member.member_id in group.members:
            names.subtract(member.subscribed_topic_names)
        if updated is not None:
            names.update(updated.subscribed_topic_names)
        return set(+names)

    def _assignable(self, group: ShareGroup, topic_id: uuid.UUID, partitions: int) -> frozenset[int]:
        if not self.initializes:
            return frozenset(range(partitions))
        return frozenset(p for p in group.assignable(topic_id) if p < partitions)

    def _assignment_pending(self, group: ShareGroup, subscribed: set[str], topics: TopicsView) -> bool:
        """Kafka's initializedAssignmentPending: a subscribed topic has initialized partitions
        that the target assignment does not hold."""
        if group.is_empty or not self.initializes:
            return False
        held: dict[uuid.UUID, set[int]] = {}
        for assignment in group.target_assignment.values():
            for t, ps in assignment.items():
                held.setdefault(t, set()).update(ps)
        for name in subscribed:
            found = topics.lookup(name)
            if found is not None:
                assignable = self._assignable(group, found[0], found[1])
                if assignable and held.get(found[0], set()) != assignable:
                    return True
        return False

    def _targets(self, group: ShareGroup, member_id: str, updated: ShareMember, topics: TopicsView):
        members = dict(group.members)
        members[member_id] = updated
        subscriptions, assignable = {}, {}
        for m in members.values():
            ids = set()
            for name in m.subscribed_topic_names:
                found = topics.lookup(name)
                if found is not None:
                    ids.add(found[0])
                    assignable[found[0]] = self._assignable(group, found[0], found[1])
            subscriptions[m.member_id] = frozenset(ids)
        return assign(subscriptions, assignable, group.target_assignment)

    @staticmethod
    def _filter(target: Assignment, names: tuple[str, ...], topics: TopicsView) -> Assignment:
        ids = {found[0] for n in names if (found := topics.lookup(n)) is not None}
        return {t: ps for t, ps in target.items() if t in ids and ps}

    def _to_initialize(self, group: ShareGroup, subscribed: set[str], topics: TopicsView) -> ToInitialize:
        """Subscribed partitions without share state (Kafka's subscribedTopicsChangeMap)."""
        if not self.initializes:
            return {}
        out: ToInitialize = {}
        for name in sorted(subscribed):
            found = topics.lookup(name)
            if found is None:
                continue
            topic_id, count = found
            known = group.initialized.get(topic_id)
            have = known.partitions if known is not None else frozenset()
            missing = frozenset(range(count)) - have
            if missing:
                out[topic_id] = (TopicPartitions(name, missing), known is None and topic_id not in group.initializing)
        return out
