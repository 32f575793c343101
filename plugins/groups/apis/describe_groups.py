"""DescribeGroups (key 15), versions 0-6: a classic group's state, protocol and members
(their metadata and assignments once Stable). Needs DESCRIBE on each group; v3+ can
report the group operations allowed.

An unknown group is described as Dead; from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and
"Group <id> not found.", and so is a consumer (KIP-848) group, "Group <id> is not a classic
group." (ConsumerGroupDescribe describes it), as Kafka's GroupMetadataManager.describeGroups.
Before v6 such a group keeps being described by its state and protocol type "consumer"."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.apis.common import authorized_operations
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..classic import ClassicGroup, ClassicState
from . import group_allowed
from .list_groups import protocol_type_of

KEY = 15
_R = response_spec(KEY)
DescribeGroupsResponse = _R.cls
DescribedGroup = _R.struct("DescribedGroup")
DescribedGroupMember = _R.struct("DescribedGroupMember")
#: The first version answering GROUP_ID_NOT_FOUND with a message (KIP-1043).
NOT_FOUND_VERSION = 6
#: The operations Kafka reports in a group's AuthorizedOperations.
GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE)


def _describe(coordinator, group_id: str, version: int) -> DescribedGroup:
    error = coordinator.check_coordinator(group_id)
    if error:
        return _failed(group_id, error)
    group = coordinator.groups.get(group_id)
    if group is None or (version >= NOT_FOUND_VERSION and not isinstance(group, ClassicGroup)):
        why = "not found" if group is None else "is not a classic group"
        return _dead(group_id, f"Group {group_id} {why}." if version >= NOT_FOUND_VERSION else None)
    if not isinstance(group, ClassicGroup):  # consumer (KIP-848), share (KIP-932): described by their own APIs
        return DescribedGroup(
            error_code=0,
            group_id=group_id,
            group_state=group.state_name,
            protocol_type=group.protocol_type,
            protocol_data="",
        )
    stable = group.state is ClassicState.STABLE
    members = [
        DescribedGroupMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata(group.protocol_name or "") if stable else b"",
            member_assignment=m.assignment if stable else b"",
        )
        for m in group.members.values()
    ]
    return DescribedGroup(
        error_code=0,
        group_id=group_id,
        group_state=group.state_name,
        protocol_type=protocol_type_of(group),
        protocol_data=(group.protocol_name or "") if stable else "",
        members=members,
    )


def _dead(group_id: str, message: str | None) -> DescribedGroup:
    """An unknown group (v6+: with GROUP_ID_NOT_FOUND and ``message``)."""
    code = ErrorCode.GROUP_ID_NOT_FOUND if message else ErrorCode.NONE
    return DescribedGroup(
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="Dead",
        protocol_type="",
        protocol_data="",
    )


def _failed(group_id: str, code: ErrorCode) -> DescribedGroup:
    return DescribedGroup(error_code=code, group_id=group_id, group_state="", protocol_type="", protocol_data="")


async def handle(broker, ctx, request):
    coordinator = coordinator_of(broker)
    allowed = group_allowed(broker, ctx, AclOperation.DESCRIBE, request.groups)
    described = []
    for group_id, ok in zip(request.groups, allowed, strict=True):
        d = (
            _describe(coordinator, group_id, ctx.api_version)
            if ok
            else _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        )
        described.append(d)
    if request.include_authorized_operations:
        ids = [d.group_id for d in described if not d.error_code]
        ops = authorized_operations(broker, ctx, ResourceType.GROUP, GROUP_OPERATIONS, ids)
        for d in described:
            if d.group_id in ops:
                d.authorized_operations = ops[d.group_id]
    return DescribeGroupsResponse(groups=described)


def error_response(request, code):
    return DescribeGroupsResponse(groups=[_failed(g, code) for g in request.groups])


API = Api(KEY, 0, 6, handle, error_response)
