"""ShareGroupDescribe (key 77), version 1: a share group (KIP-932) as its coordinator holds
it: state, group and assignment epochs, the assignor (``simple``), and each member with its
subscription and current assignment. An unknown group, or one of another type, answers
GROUP_ID_NOT_FOUND with Kafka's message. Needs DESCRIBE on each group; a group whose members
hold a topic the principal may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED without its
members, as Kafka does (the checks of :mod:`.consumer_group_describe`)."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..share_group import ShareGroup
from . import group_allowed
from .consumer_group_describe import described_assignment, hide_and_authorize

KEY = 77
_R = response_spec(KEY)
ShareGroupDescribeResponse = _R.cls
DescribedGroup = _R.struct("DescribedGroup")
Member = _R.struct("Member")


def describe(broker, coordinator, group_id: str) -> DescribedGroup:
    """One group as ShareGroupDescribe answers it (also for ``brokkr share-groups``)."""
    error = coordinator.check_coordinator(group_id)
    if error:
        return _failed(group_id, error)
    group = coordinator.groups.get(group_id)
    if not isinstance(group, ShareGroup):
        message = f"Group {group_id} not found." if group is None else f"Group {group_id} is not a share group."
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, message)
    members = [
        Member(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names),
            assignment=described_assignment(broker, m.assigned, _R),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    ]
    return DescribedGroup(
        error_code=0,
        group_id=group_id,
        group_state=group.state_name,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.assignor_name,
        members=members,
    )


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> DescribedGroup:
    return DescribedGroup(
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="",
        group_epoch=0,
        assignment_epoch=0,
        assignor_name="",
    )


def _topics(described: DescribedGroup) -> set[str]:
    return {tp.topic_name for m in described.members for tp in m.assignment.topic_partitions}


async def handle(broker, ctx, request):
    coordinator = coordinator_of(broker)
    allowed = group_allowed(broker, ctx, AclOperation.DESCRIBE, request.group_ids)
    described = [
        describe(broker, coordinator, g) if ok else _failed(g, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        for g, ok in zip(request.group_ids, allowed, strict=True)
    ]
    hide_and_authorize(broker, ctx, request, described, _topics, _failed)
    return ShareGroupDescribeResponse(groups=described)


def error_response(request, code):
    return ShareGroupDescribeResponse(groups=[_failed(g, code) for g in request.group_ids])


API = Api(KEY, 1, 1, handle, error_response)
