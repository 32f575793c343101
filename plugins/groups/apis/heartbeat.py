"""Heartbeat (key 12), versions 0-4: a classic member is alive; the answer tells it when
its group rebalances (REBALANCE_IN_PROGRESS). Needs READ on the group."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 12
HeartbeatResponse = response_spec(KEY).cls


async def handle(broker, ctx, request):
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return HeartbeatResponse(error_code=coordinator_of(broker).classic.heartbeat(request))


def error_response(request, code):
    return HeartbeatResponse(error_code=code)


API = Api(KEY, 0, 4, handle, error_response)
