"""LeaveGroup (key 13), versions 0-5: members leave a classic group (several per request
from v3, static members by their group instance id, KIP-345), which then rebalances.
Needs READ on the group."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 13
BATCHED_VERSION = 3
_R = response_spec(KEY)
LeaveGroupResponse = _R.cls
MemberResponse = _R.struct("MemberResponse")


async def handle(broker, ctx, request):
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    batched = ctx.api_version >= BATCHED_VERSION
    identities = (
        [(m.member_id, m.group_instance_id) for m in request.members] if batched else [(request.member_id, None)]
    )
    error, errors = coordinator_of(broker).classic.leave(request.group_id, identities)
    if not batched:
        return LeaveGroupResponse(error_code=error or (errors[0] if errors else ErrorCode.NONE))
    return LeaveGroupResponse(
        error_code=error,
        members=[
            MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(identities, errors, strict=False)
        ],
    )


def error_response(request, code):
    return LeaveGroupResponse(error_code=code)


API = Api(KEY, 0, 5, handle, error_response)
