"""The consumer group protocol's operations (KIP-848; GroupMetadataManager's
consumerGroupHeartbeat, consumerGroupLeave, the member fencing and timers), written
coordinator-shard style.

An operation reads the groups and returns ``(records, response)``; it never changes a
group itself. The caller writes the records to ``__consumer_offsets`` and replays them with
:func:`.consumer_records.replay`, the function that also loads a partition, and only then
answers. A refusal raises :class:`~.consumer_group.GroupApiError` and writes nothing.
Operations on one group must not interleave (the caller serializes them), since each
reads the state the previous one's records left.

A heartbeat does three things, as in Kafka: (1) it creates or updates the member and bumps
the group epoch if the member's subscription, or the subscribed topics, changed; (2) it
computes a new target assignment when the group epoch is ahead of the assignment epoch;
(3) it moves the member's current assignment towards its target (:mod:`.reconciliation`).
The answer carries the member's assignment only when the member sent a full request
(joining, or after an error) or when its assignment changed.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
from brokkr.core.errors import ErrorCode

from . import consumer_heartbeat as hb
from . import consumer_records as rec
from .assignors import ASSIGNORS
from .consumer_group import ConsumerGroup, GroupApiError
from .consumer_member import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerMember,
    MemberState,
)
from .consumer_timers import REBALANCE, SESSION, Expiry, MemberTimers
from .reconciliation import FencedMemberEpoch, reconcile
from .target_assignment import TopicsView, build_target, compile_regex, resolve_regexes, subscription_metadata

log = logging.getLogger("brokkr.groups")


@attrs.frozen
class Settings:
    """The ``group.consumer.*`` settings an operation needs."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    #: Server assignor names, the default first.
    assignors: tuple[str, ...] = ("uniform", "range")


@attrs.frozen
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int = 0
    #: The member's assignment, or None when the answer does not carry it.
    assignment: Assignment | None = None


Result = tuple[list[rec.Record], HeartbeatResult]


class ConsumerProtocol:
    """The consumer-protocol operations of one coordinator, and its members' timers."""

    def __init__(self, settings: Settings | None = None, group_settings: Callable[[str], Settings] | None = None):
        self.settings = settings or Settings()
        #: A group's settings, its own GROUP configs (consumer.session.timeout.ms,
        #: consumer.heartbeat.interval.ms) over ``settings``; None: ``settings`` for all.
        self.group_settings = group_settings
        self.timers = MemberTimers()

    def heartbeat(
        self,
        groups: dict[str, Any],
        req: Any,
        *,
        now_ms: int,
        topics: TopicsView,
        api_version: int = 1,
        client_id: str = "",
        client_host: str = "",
        describable: Callable[[list[str]], set[str]] | None = None,
    ) -> Result:
        """One ConsumerGroupHeartbeat: join (epoch 0), heartbeat, or leave (-1, -2).
        ``describable`` filters the topics a regex may give this principal."""
        hb.validate(req, api_version, self.settings.assignors)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self.leave(groups, req.group_id, req.member_id, req.instance_id, req.member_epoch, topics, now_ms)
        records: list[rec.Record] = []
        joining = req.member_epoch == 0
        group = hb.consumer_group(groups, req.group_id, joining, records)
        gid = group.group_id
        if len(group.members) >= self.settings.max_size and req.member_id not in group.members:
            raise GroupApiError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {self.settings.max_size} members.",
            )
        member_id = req.member_id or hb.new_member_id()
        if req.instance_id is None:
            member = hb.dynamic_member(group, member_id, req, joining)
        else:
            member = hb.static_member(group, member_id, req, joining, records)
        updated = hb.updated_member(member, req, client_id, client_host)

        # (1) The member, the group's subscription and its epoch.
        bump = group.group_epoch == 0  # a new group moves off epoch 0 at once
        if updated != member:
            records.append(rec.member_metadata(gid, member_id, updated))
        if updated.subscription_changed(member):
            bump = True
            self._check_regex(member, updated)
        metadata, resolved = self._subscription(group, member, updated, topics, now_ms, describable)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(rec.subscription_metadata(gid, metadata))
        epoch = group.group_epoch + (1 if bump else 0)
        if bump:
            records.append(rec.group_epoch(gid, epoch))
            log.info("group %s: epoch %d", gid, epoch)

        # (2) The target assignment.
        if epoch > group.assignment_epoch:
            assignor = ASSIGNORS[self._assignor(group, member, updated)]
            target_records, targets = build_target(group, epoch, assignor, metadata, resolved, updated=updated)
            records += target_records
            target_epoch, target = epoch, targets.get(member_id, {})
        else:
            target_epoch, target = group.assignment_epoch, group.target_of(member_id, updated.instance_id)

        # (3) Reconciliation.
        if not updated.is_reconciled_to(target_epoch):
            try:
                reconciled = reconcile(updated, target_epoch, target, group.partition_epoch, req.topic_partitions)
            except FencedMemberEpoch as exc:
                raise GroupApiError(ErrorCode.FENCED_MEMBER_EPOCH, str(exc)) from None
            if reconciled != updated:
                records.append(rec.current_assignment(gid, member_id, reconciled))
                self._rebalance_timer(gid, reconciled, now_ms)
            updated = reconciled

        own = self.group_settings(gid) if self.group_settings is not None else self.settings
        self.timers.schedule(SESSION, gid, member_id, now_ms + own.session_timeout_ms)
        subscribed = req.subscribed_topic_names is not None or getattr(req, "subscribed_topic_regex", None) is not None
        full = joining or (req.rebalance_timeout_ms != -1 and subscribed and req.topic_partitions is not None)
        assignment = updated.assigned if full or updated.assigned != member.assigned else None
        interval = own.heartbeat_interval_ms
        return records, HeartbeatResult(member_id, updated.member_epoch, interval, assignment)

    # -- leaving and fencing ----------------------------------------------------------

    def leave(
        self,
        groups: dict[str, Any],
        group_id: str,
        member_id: str,
        instance_id: str | None,
        epoch: int,
        topics: TopicsView,
        now_ms: int,
    ) -> Result:
        """A member leaves (epoch -1); a static member leaves for good (-1) or for now (-2:
        it keeps its assignment, and its instance id can rejoin under a new member id)."""
        group = groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if instance_id is None:
            member = group.member(member_id)
            log.info("group %s: member %s left", group_id, member_id)
            return self.fence(group, member, topics, now_ms), HeartbeatResult(member_id, epoch)
        member = group.static_member(instance_id)
        if member is None:
            raise GroupApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise GroupApiError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by member {member.member_id}.",
            )
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("group %s: static member %s (%s) left for now", group_id, member_id, instance_id)
            leaving = attrs.evolve(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            return [rec.current_assignment(group_id, member_id, leaving)], HeartbeatResult(member_id, epoch)
        log.info("group %s: static member %s (%s) left", group_id, member_id, instance_id)
        return self.fence(group, member, topics, now_ms), HeartbeatResult(member_id, epoch)

    def fence(self, group: ConsumerGroup, member: ConsumerMember, topics: TopicsView, now_ms: int) -> list:
        """Remove a member (Kafka's consumerGroupFenceMember): its records' tombstones, the
        subscription without it, and a new group epoch, so that the others rebalance."""
        gid = group.group_id
        records = rec.member_tombstones(gid, member.member_id)
        metadata, _ = self._subscription(group, member, None, topics, now_ms, None)
        if metadata != group.subscription_metadata:
            records.append(rec.subscription_metadata(gid, metadata))
        records.append(rec.group_epoch(gid, group.group_epoch + 1))
        self.timers.cancel_member(gid, member.member_id)
        return records

    def expire(self, groups: dict[str, Any], expiry: Expiry, topics: TopicsView, now_ms: int) -> list:
        """The records of a timer that fired: the member is fenced, unless it heartbeated
        since (session) or moved to another epoch (rebalance), or is gone."""
        group = groups.get(expiry.group_id)
        member = group.members.get(expiry.member_id) if isinstance(group, ConsumerGroup) else None
        if member is None or self.timers.deadline(expiry.kind, expiry.group_id, expiry.member_id) is not None:
            return []
        if expiry.kind == REBALANCE and member.member_epoch != expiry.epoch:
            return []
        why = "its session expired" if expiry.kind == SESSION else "it did not revoke its partitions in time"
        log.info("group %s: member %s fenced: %s", expiry.group_id, expiry.member_id, why)
        return self.fence(group, member, topics, now_ms)

    def loaded(self, group: ConsumerGroup, now_ms: int) -> None:
        """A group loaded from its partition: its members' timers start (Kafka's onLoaded)."""
        own = self.group_settings(group.group_id) if self.group_settings is not None else self.settings
        for member in group.members.values():
            self.timers.schedule(SESSION, group.group_id, member.member_id, now_ms + own.session_timeout_ms)
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self._rebalance_timer(group.group_id, member, now_ms)

    def unloaded(self, group_id: str) -> None:
        self.timers.cancel_group(group_id)

    # -- helpers ------------------------------------------------------------------------

    @staticmethod
    def _check_regex(member: ConsumerMember, updated: ConsumerMember) -> None:
        regex = updated.subscribed_topic_regex
        if regex and regex != member.subscribed_topic_regex:
            try:
                compile_regex(regex)
            except ValueError as exc:
                raise GroupApiError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {exc}.",
                ) from None

    @staticmethod
    def _subscription(group, member, updated, topics, now_ms, describable):
        """The group's subscription metadata and resolved regexes with ``updated`` in the
        place of ``member`` (None: without it)."""
        names, regexes = Counter(group.subscribed_names), Counter(group.subscribed_regexes)
        # ``member`` as it was before the request: a new member subscribes to nothing; a
        # static member taking an instance's place carries the subscription it replaces.
        for m, sign in ((member, -1), (updated, +1)):
            if m is not None:
                names.update({n: sign for n in m.subscribed_topic_names})
                if m.subscribed_topic_regex:
                    regexes[m.subscribed_topic_regex] += sign
        resolved = resolve_regexes(group, +regexes, topics, now_ms, describable)
        wanted = set(+names).union(*resolved.values())
        return subscription_metadata(sorted(wanted), topics), resolved

    def _assignor(self, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember) -> str:
        """The server assignor most members ask for, counting ``updated`` (ties: the
        earlier in ``group.consumer.assignors``); the default when none asks."""
        counts = Counter(group.server_assignors)
        if member.member_id in group.members and member.server_assignor:
            counts[member.server_assignor] -= 1
        if updated.server_assignor:
            counts[updated.server_assignor] += 1
        counts = +counts
        if not counts:
            return self.settings.assignors[0]
        rank = {name: i for i, name in enumerate(self.settings.assignors)}
        return max(counts, key=lambda name: (counts[name], -rank.get(name, len(rank))))

    def _rebalance_timer(self, group_id: str, member: ConsumerMember, now_ms: int) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            deadline = now_ms + max(member.rebalance_timeout_ms, 0)
            self.timers.schedule(REBALANCE, group_id, member.member_id, deadline, member.member_epoch)
        else:
            self.timers.cancel(REBALANCE, group_id, member.member_id)
