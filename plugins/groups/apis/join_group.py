"""JoinGroup (key 11), versions 0-9: a member joins a classic group, or rejoins it for a
rebalance; the answer waits until the group's next generation starts (see
:mod:`brokkr.plugins.groups.classic_protocol`). Needs READ on the group."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 11
_R = response_spec(KEY)
JoinGroupResponse = _R.cls
JoinGroupResponseMember = _R.struct("JoinGroupResponseMember")


async def handle(broker, ctx, request):
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED, ctx.api_version)
    result = await coordinator_of(broker).classic.join(ctx, request, ctx.api_version)
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=_protocol_name(result.protocol_name, ctx.api_version),
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=data) for m, i, data in result.members
        ],
    )


def _protocol_name(name: str | None, version: int) -> str | None:
    return name if name is not None or version >= 7 else ""  # nullable from v7


def error_response(request, code, version: int = 0):
    return JoinGroupResponse(
        error_code=code,
        generation_id=-1,
        protocol_name=_protocol_name(None, version),
        leader="",
        member_id=request.member_id or "",
    )


API = Api(KEY, 0, 9, handle, error_response)
