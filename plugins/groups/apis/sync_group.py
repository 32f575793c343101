"""SyncGroup (key 14), versions 0-5: the leader hands in the assignments of a classic
group's new generation; every member gets its own once they are written. Needs READ on
the group."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 14
SyncGroupResponse = response_spec(KEY).cls


async def handle(broker, ctx, request):
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    result = await coordinator_of(broker).classic.sync(request, ctx.api_version)
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


def error_response(request, code):
    return SyncGroupResponse(error_code=code, assignment=b"")


API = Api(KEY, 0, 5, handle, error_response)
