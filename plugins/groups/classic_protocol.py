"""The classic group protocol's operations: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
session expiry, with Kafka's state machine and error codes (GroupMetadataManager's
classicGroup* operations). The state they change is in :mod:`.classic`.

A JoinGroup or SyncGroup that must wait for the rest of the group is parked on a future
of its member (``join_waiter``, ``sync_waiter``) and answered when the rebalance moves on.
Timers are the event loop's: the join timer (the rebalance timeout, or the initial
rebalance delay of a group leaving Empty), the sync timer (members that do not send
SyncGroup within the rebalance timeout are removed) and one session timer per member.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import attrs
from brokkr.core.errors import ErrorCode

from ..coordinator_partitions import write_error
from .classic import ClassicGroup, ClassicMember, ClassicState
from .share_group import ShareGroup

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("brokkr.groups")


@attrs.define
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    #: (member id, group instance id, metadata): the leader's view of the group.
    members: list[tuple[str, str | None, bytes]] = attrs.field(factory=list)


@attrs.define
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


def _now_ms() -> int:
    return int(time.time() * 1000)


class ClassicProtocol:
    """The classic-protocol operations of one coordinator."""

    def __init__(self, coordinator: GroupCoordinator):
        self.coordinator = coordinator
        config = coordinator.broker.config
        self.min_session_ms: int = config["group.min.session.timeout.ms"]
        self.max_session_ms: int = config["group.max.session.timeout.ms"]
        self.initial_delay_ms: int = config["group.initial.rebalance.delay.ms"]
        self.max_size: int = config["group.max.size"]

    # -- JoinGroup ------------------------------------------------------------------

    async def join(self, ctx, request, version: int) -> JoinResult:
        group_id, member_id = request.group_id, request.member_id
        if not group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, member_id)
        error = self.coordinator.check_coordinator(group_id)
        if error:
            return JoinResult(error, member_id)
        if not self.min_session_ms <= request.session_timeout_ms <= self.max_session_ms:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id)
        group = self.coordinator.groups.get(group_id)
        if group is not None and group.type == ShareGroup.type:  # Kafka: "not a consumer group", no member id
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        if not request.protocol_type or not protocols:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self.coordinator.add_group(ClassicGroup(group_id, state_timestamp=_now_ms()))
        elif group.type != ClassicGroup.type:
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if group.state is ClassicState.DEAD:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not group.supports(request.protocol_type, protocols):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        # v0 has no rebalance timeout: the session timeout serves as both.
        rebalance_ms = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        member = ClassicMember(
            member_id,
            request.group_instance_id,
            ctx.client_id or "",
            ctx.client_host,
            rebalance_ms,
            request.session_timeout_ms,
            request.protocol_type,
            protocols,
        )
        if member_id:
            return await self._join_known(group, member, version)
        return await self._join_new(group, member, version)

    async def _join_new(self, group: ClassicGroup, member: ClassicMember, version: int) -> JoinResult:
        if len(group.members) + len(group.pending_members) >= self.max_size:
            return JoinResult(ErrorCode.GROUP_MAX_SIZE_REACHED)
        member.member_id = f"{member.group_instance_id or member.client_id}-{uuid.uuid4()}"
        if member.is_static:
            old_id = group.static_members.get(member.group_instance_id)
            if old_id is not None:
                return await self._replace_static_member(group, group.members[old_id], member, version)
        elif version >= 4:  # KIP-394: the member must rejoin with the id it is given
            timer = self._loop().call_later(
                member.session_timeout_ms / 1000, self._expire_pending, group, member.member_id
            )
            group.pending_members[member.member_id] = timer
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member.member_id)
        return await self._add_and_rebalance(group, member)

    async def _join_known(self, group: ClassicGroup, joining: ClassicMember, version: int) -> JoinResult:
        member_id = joining.member_id
        timer = group.pending_members.pop(member_id, "absent")
        if timer != "absent":
            if timer is not None:
                timer.cancel()
            return await self._add_and_rebalance(group, joining)
        error = validate_member(group, member_id, joining.group_instance_id)
        if error:
            return JoinResult(error, member_id)
        member = group.members[member_id]
        state = group.state
        if state is ClassicState.PREPARING_REBALANCE:
            return await self._update_and_wait(group, member, joining)
        if state is ClassicState.COMPLETING_REBALANCE and member.matches(joining.protocols):
            # It missed the JoinGroup response: answer it again.
            self.keep_alive(group, member)
            return self._join_result(group, member)
        if state is ClassicState.STABLE and member_id != group.leader_id and member.matches(joining.protocols):
            self.keep_alive(group, member)
            return self._join_result(group, member, with_members=False)
        if state in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE):
            self._update(member, joining)
            return await self._wait_for_join(group, member, rebalance=True)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)

    async def _replace_static_member(
        self, group: ClassicGroup, old: ClassicMember, new: ClassicMember, version: int
    ) -> JoinResult:
        """A static member rejoined with a new member id (KIP-345): the old id is fenced.
        A Stable group whose selected protocol the member still supports keeps its
        assignment, without a rebalance."""
        for waiter in (old.join_waiter, old.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result(
                    JoinResult(ErrorCode.FENCED_INSTANCE_ID, old.member_id)
                    if waiter is old.join_waiter
                    else SyncResult(ErrorCode.FENCED_INSTANCE_ID)
                )
        old.join_waiter = old.sync_waiter = None
        was_leader = group.leader_id == old.member_id
        unchanged = old.metadata(group.protocol_name or "") == new.metadata(group.protocol_name or "")
        group.remove(old.member_id)
        new.assignment = old.assignment
        group.add(new)
        if was_leader:
            group.leader_id = new.member_id
        if group.state is ClassicState.STABLE and unchanged:
            self.keep_alive(group, new)
            # Persist the new member id, so a restart fences the old one as well.
            self.coordinator.spawn(self.coordinator.store_group(group), f"store {group.group_id}")
            result = self._join_result(group, new, with_members=was_leader)
            result.skip_assignment = was_leader and version >= 9
            return result
        new.join_waiter = waiter = self._loop().create_future()
        self._maybe_prepare_rebalance(group, f"static member {new.group_instance_id} rejoined")
        return await waiter

    async def _add_and_rebalance(self, group: ClassicGroup, member: ClassicMember) -> JoinResult:
        group.add(member)
        member.join_waiter = waiter = self._loop().create_future()
        self._maybe_prepare_rebalance(group, f"member {member.member_id} joined")
        return await waiter

    async def _update_and_wait(self, group: ClassicGroup, member: ClassicMember, joining: ClassicMember) -> JoinResult:
        self._update(member, joining)
        return await self._wait_for_join(group, member, rebalance=False)

    async def _wait_for_join(self, group: ClassicGroup, member: ClassicMember, rebalance: bool) -> JoinResult:
        if member.join_waiter is not None and not member.join_waiter.done():  # a retried join replaces the old
            member.join_waiter.set_result(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_waiter = waiter = self._loop().create_future()
        if rebalance:
            self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined with new metadata")
        else:
            self._check_join_complete(group)
        return await waiter

    @staticmethod
    def _update(member: ClassicMember, joining: ClassicMember) -> None:
        member.protocols = joining.protocols
        member.session_timeout_ms = joining.session_timeout_ms
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        member.client_id, member.client_host = joining.client_id, joining.client_host

    def _join_result(self, group: ClassicGroup, member: ClassicMember, with_members: bool = True) -> JoinResult:
        members = []
        if with_members and member.member_id == group.leader_id:
            members = [
                (m.member_id, m.group_instance_id, m.metadata(group.protocol_name or ""))
                for m in group.members.values()
            ]
        return JoinResult(
            ErrorCode.NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            members=members,
        )

    # -- rebalancing ------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE, ClassicState.EMPTY):
            self._prepare_rebalance(group, reason)
        elif group.state is ClassicState.PREPARING_REBALANCE:
            self._check_join_complete(group)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        log.info("preparing to rebalance group %s in generation %d (%s)", group.group_id, group.generation_id, reason)
        if group.state is ClassicState.COMPLETING_REBALANCE:
            self._answer_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        self._cancel(group, "sync_timer")
        group.pending_sync.clear()
        initial = group.state is ClassicState.EMPTY
        group.transition(ClassicState.PREPARING_REBALANCE, _now_ms())
        self._cancel(group, "join_timer")
        if initial:  # Kafka's InitialDelayedJoin: wait for more members before the first generation
            group.initial_join, group.new_member_added = True, False
            remaining = max(group.rebalance_timeout_ms() - self.initial_delay_ms, 0)
            group.join_timer = self._loop().call_later(
                self.initial_delay_ms / 1000, self._initial_delay_expired, group, remaining
            )
        else:
            group.join_timer = self._loop().call_later(group.rebalance_timeout_ms() / 1000, self._complete_join, group)
            self._check_join_complete(group)

    def _initial_delay_expired(self, group: ClassicGroup, remaining: int) -> None:
        if group.new_member_added and remaining > 0:
            group.new_member_added = False
            delay = min(self.initial_delay_ms, remaining)
            group.join_timer = self._loop().call_later(
                delay / 1000, self._initial_delay_expired, group, max(remaining - self.initial_delay_ms, 0)
            )
        else:
            self._complete_join(group)

    def _check_join_complete(self, group: ClassicGroup) -> None:
        if group.state is ClassicState.PREPARING_REBALANCE and not group.initial_join and group.all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """The join phase ends (all members rejoined, or the timer expired): members that did
        not rejoin leave (static members stay, as in Kafka), a new generation starts."""
        self._cancel(group, "join_timer")
        group.initial_join = False
        if group.state is not ClassicState.PREPARING_REBALANCE:
            return
        for member in list(group.members.values()):
            if member.join_waiter is None and not member.is_static:
                self._remove(group, member)
        group.generation_id += 1
        now = _now_ms()
        if group.is_empty:
            group.protocol_name = group.leader_id = None
            group.transition(ClassicState.EMPTY, now)
            self.coordinator.spawn(self.coordinator.store_group(group), f"store {group.group_id}")
            return
        group.protocol_name = group.select_protocol()
        leader = group.members.get(group.leader_id or "")
        if leader is None or leader.join_waiter is None:  # Kafka's maybeElectNewJoinedLeader
            joined = group.awaiting_join()
            group.leader_id = joined[0].member_id if joined else next(iter(group.members))
        group.transition(ClassicState.COMPLETING_REBALANCE, now)
        log.info(
            "group %s: generation %d with %d members (protocol %s)",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
        )
        for member in group.members.values():
            if member.join_waiter is not None:
                if not member.join_waiter.done():
                    member.join_waiter.set_result(self._join_result(group, member))
                member.join_waiter = None
            self.keep_alive(group, member)
        group.pending_sync = set(group.members)
        group.sync_timer = self._loop().call_later(
            group.rebalance_timeout_ms() / 1000, self._sync_expired, group, group.generation_id
        )

    def _sync_expired(self, group: ClassicGroup, generation: int) -> None:
        """Members of ``generation`` that never sent SyncGroup leave the group."""
        group.sync_timer = None
        if group.generation_id != generation or not group.pending_sync:
            return
        if group.state in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE):
            missing = sorted(group.pending_sync)
            for member_id in missing:
                member = group.members.get(member_id)
                if member is not None:
                    self._remove(group, member)
            self._prepare_rebalance(group, f"members {missing} did not sync in time")

    # -- SyncGroup ------------------------------------------------------------------

    async def sync(self, request, version: int) -> SyncResult:
        group, error = self._member_group(request.group_id, request.member_id, request.group_instance_id)
        if error:
            return SyncResult(error)
        if request.generation_id != group.generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[request.member_id]
        group.pending_sync.discard(member.member_id)
        if group.state is ClassicState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is ClassicState.STABLE:
            self.keep_alive(group, member)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        if group.state is not ClassicState.COMPLETING_REBALANCE:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if member.sync_waiter is not None and not member.sync_waiter.done():
            member.sync_waiter.set_result(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        member.sync_waiter = waiter = self._loop().create_future()
        self.keep_alive(group, member)
        if member.member_id == group.leader_id:
            assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
            self.coordinator.spawn(self._complete_sync(group, assignments), f"sync {group.group_id}")
        return await waiter

    async def _complete_sync(self, group: ClassicGroup, assignments: dict[str, bytes]) -> None:
        """Write the leader's assignments (members it left out get an empty one), then hand
        them out: the group is Stable. A failed write starts another rebalance."""
        generation = group.generation_id
        full = {member_id: assignments.get(member_id, b"") for member_id in group.members}
        error = await self.coordinator.store_group(group, full)
        if group.generation_id != generation or group.state is not ClassicState.COMPLETING_REBALANCE:
            return
        if error:
            self._answer_syncs(group, write_error(error))
            self._prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        for member_id, assignment in full.items():
            if member_id in group.members:
                group.members[member_id].assignment = assignment
        self._answer_syncs(group, ErrorCode.NONE)
        group.transition(ClassicState.STABLE, _now_ms())

    def _answer_syncs(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            if error:
                member.assignment = b""
            waiter, member.sync_waiter = member.sync_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(SyncResult(error, group.protocol_type, group.protocol_name, member.assignment))
                self.keep_alive(group, member)

    # -- Heartbeat and LeaveGroup ---------------------------------------------------

    def heartbeat(self, request) -> ErrorCode:
        group, error = self._member_group(request.group_id, request.member_id, request.group_instance_id)
        if error:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is ClassicState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.keep_alive(group, group.members[request.member_id])
        if group.state is ClassicState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, group_id: str, identities: list[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove each (member id, group instance id): the group-level error and one error
        per member. A static member may be named by its instance id alone."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        error = self.coordinator.check_coordinator(group_id)
        group = self.coordinator.groups.get(group_id)
        if not error and (group is None or group.type != ClassicGroup.type):
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error:
            return error, []
        errors = []
        for member_id, instance_id in identities:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            if member_id in group.pending_members:
                timer = group.pending_members.pop(member_id)
                if timer is not None:
                    timer.cancel()
                self._check_join_complete(group)
            elif member_id in group.members:
                self._remove_and_rebalance(group, group.members[member_id], "left the group")
            else:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            errors.append(ErrorCode.NONE)
        return ErrorCode.NONE, errors

    # -- members ----------------------------------------------------------------------

    def _member_group(self, group_id: str, member_id: str, instance_id: str | None) -> tuple[Any, ErrorCode]:
        """The group of a known member, or the error Kafka answers for it."""
        if not group_id:
            return None, ErrorCode.INVALID_GROUP_ID
        error = self.coordinator.check_coordinator(group_id)
        if error:
            return None, error
        group = self.coordinator.groups.get(group_id)
        if group is None or group.type != ClassicGroup.type:
            return None, ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is ClassicState.DEAD:
            return None, ErrorCode.COORDINATOR_NOT_AVAILABLE
        return group, validate_member(group, member_id, instance_id)

    def _remove(self, group: ClassicGroup, member: ClassicMember) -> None:
        for waiter, result in (
            (member.join_waiter, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id)),
            (member.sync_waiter, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)),
        ):
            if waiter is not None and not waiter.done():
                waiter.set_result(result)
        member.join_waiter = member.sync_waiter = None
        group.remove(member.member_id)

    def _remove_and_rebalance(self, group: ClassicGroup, member: ClassicMember, reason: str) -> None:
        self._remove(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} {reason}")

    def keep_alive(self, group: ClassicGroup, member: ClassicMember) -> None:
        """Restart the member's session timer (any request of the member counts)."""
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = self._loop().call_later(
            member.session_timeout_ms / 1000, self._expire_member, group, member.member_id
        )

    def _expire_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or self.coordinator.groups.get(group.group_id) is not group:
            return
        member.expiry = None
        if member.join_waiter is not None or member.sync_waiter is not None:
            return  # parked in a JoinGroup or SyncGroup: its session restarts when answered
        log.info("group %s: member %s's session expired", group.group_id, member_id)
        self._remove_and_rebalance(group, member, "failed to heartbeat in time")

    def _expire_pending(self, group: ClassicGroup, member_id: str) -> None:
        if group.pending_members.pop(member_id, "absent") != "absent":
            self._check_join_complete(group)

    def schedule_sessions(self, group: ClassicGroup) -> None:
        """Start the session timers of a group loaded from the log."""
        for member in group.members.values():
            self.keep_alive(group, member)

    def unload(self, group: ClassicGroup, error: ErrorCode) -> None:
        """The group is no longer coordinated here: answer what waits, stop its timers."""
        self._cancel(group, "join_timer")
        self._cancel(group, "sync_timer")
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
            if member.join_waiter is not None and not member.join_waiter.done():
                member.join_waiter.set_result(JoinResult(error, member.member_id))
            if member.sync_waiter is not None and not member.sync_waiter.done():
                member.sync_waiter.set_result(SyncResult(error))

    @staticmethod
    def _cancel(group: ClassicGroup, name: str) -> None:
        timer = getattr(group, name)
        if timer is not None:
            timer.cancel()
            setattr(group, name, None)

    @staticmethod
    def _loop() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
    """FENCED_INSTANCE_ID when ``instance_id`` belongs to another member id; UNKNOWN_MEMBER_ID
    when the member is not in the group."""
    if instance_id is not None:
        known = group.static_members.get(instance_id)
        if known is not None and known != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return ErrorCode.NONE
