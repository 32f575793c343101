"""Who is heartbeating: the checks of a ConsumerGroupHeartbeat before anything changes
(Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, getOrMaybeCreateConsumerGroup,
getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember and the epoch check), and the
member as the request updates it. Each raises :class:`GroupApiError` with Kafka's code
and message; none changes a group. :mod:`.consumer_protocol` strings them together.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import attrs
from brokkr.core.errors import ErrorCode

from . import consumer_records as rec
from .classic import ClassicGroup, ClassicState
from .consumer_group import ConsumerGroup, GroupApiError
from .consumer_member import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerMember, is_subset

log = logging.getLogger("brokkr.groups")

#: From this ConsumerGroupHeartbeat version the client generates its member id (KIP-1082).
MEMBER_ID_REQUIRED_VERSION = 1
_JAVA_TRIMMED = "".join(map(chr, range(33)))


def new_member_id() -> str:
    """A random id as Kafka's ``Uuid.randomUuid().toString()`` prints one (URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def blank(value: str | None) -> bool:
    """Kafka's throwIfEmptyString test: set, and nothing left after Java's ``trim()``."""
    return value is not None and not value.strip(_JAVA_TRIMMED)


def validate(req: Any, api_version: int, assignors: Sequence[str]) -> None:
    """The request's own consistency (INVALID_REQUEST) and its assignor (UNSUPPORTED_ASSIGNOR)."""

    def invalid(message: str) -> GroupApiError:
        return GroupApiError(ErrorCode.INVALID_REQUEST, message)

    epoch = req.member_epoch
    if (api_version >= MEMBER_ID_REQUIRED_VERSION or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and (
        not req.member_id or blank(req.member_id)
    ):
        raise invalid("MemberId can't be empty.")
    if not req.group_id or blank(req.group_id):
        raise invalid("GroupId can't be empty.")
    if blank(req.instance_id):
        raise invalid("InstanceId can't be empty.")
    if blank(req.rack_id):
        raise invalid("RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or req.topic_partitions:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not getattr(req, "subscribed_topic_regex", None):
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        raise GroupApiError(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: {', '.join(assignors)}.",
        )


def consumer_group(groups: dict[str, Any], group_id: str, create: bool, records: list) -> ConsumerGroup:
    """The group, or a new one when joining (materialized only by the replay of its
    records). An empty classic group gives way to a joining member: its GroupMetadata
    tombstone goes first (its committed offsets stay)."""
    group = groups.get(group_id)
    if isinstance(group, ConsumerGroup):
        return group
    if create and group is None:
        return ConsumerGroup(group_id)
    if create and isinstance(group, ClassicGroup) and group.is_empty and group.state is ClassicState.EMPTY:
        records.append(rec.classic_group_tombstone(group_id))
        return ConsumerGroup(group_id)
    if group is None:
        raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
    raise GroupApiError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")


def check_epoch(member: ConsumerMember, received: int, owned: Any) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: the previous epoch is accepted
    with a subset of the assignment (the answer with the new epoch may have been lost)."""
    if received > member.member_epoch:
        raise GroupApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch and (
        received != member.previous_member_epoch or not is_subset(owned, member.assigned)
    ):
        raise GroupApiError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a smaller member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )


def dynamic_member(group: ConsumerGroup, member_id: str, req: Any, joining: bool) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        if not joining:
            group.member(member_id)  # raises UNKNOWN_MEMBER_ID
        member = ConsumerMember(member_id)
        log.info("group %s: member %s joins", group.group_id, member_id)
    check_epoch(member, req.member_epoch, req.topic_partitions)
    return member


def static_member(group: ConsumerGroup, member_id: str, req: Any, joining: bool, records: list) -> ConsumerMember:
    """A static member (group.instance.id). Joining with an instance id that a member
    holds is refused (UNRELEASED_INSTANCE_ID) unless that member left temporarily (epoch
    -2): then the new member id takes its place, its assignment with it."""
    instance_id = req.instance_id
    existing = group.static_member(instance_id)
    if joining:
        if existing is None:
            log.info("group %s: static member %s (%s) joins", group.group_id, member_id, instance_id)
            return group.members.get(member_id) or ConsumerMember(member_id)
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise GroupApiError(
                ErrorCode.UNRELEASED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                f"instance id is owned by {existing.member_id} member.",
            )
        new = attrs.evolve(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        gid = group.group_id
        records += rec.member_tombstones(gid, existing.member_id)
        records += [
            rec.member_metadata(gid, member_id, new),
            rec.target_assignment(gid, member_id, group.target_assignment.get(existing.member_id, {})),
            rec.current_assignment(gid, member_id, new),
        ]
        log.info("group %s: static member %s rejoins as %s", gid, instance_id, member_id)
        return new
    if existing is None:
        raise GroupApiError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise GroupApiError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} was fenced by member {existing.member_id}.",
        )
    check_epoch(existing, req.member_epoch, req.topic_partitions)
    return existing


def updated_member(member: ConsumerMember, req: Any, client_id: str, client_host: str) -> ConsumerMember:
    """The member with what the request changes (a null field changes nothing)."""
    regex = getattr(req, "subscribed_topic_regex", None)
    names = req.subscribed_topic_names
    rebalance_timeout_ms = req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms
    return attrs.evolve(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
        subscribed_topic_names=tuple(sorted(set(names))) if names is not None else member.subscribed_topic_names,
        subscribed_topic_regex=regex if regex is not None else member.subscribed_topic_regex,
        client_id=client_id,
        client_host=client_host,
        classic_metadata=None,
    )
