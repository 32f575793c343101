"""ShareGroupHeartbeat (key 76), version 1: the share group protocol of KIP-932. A member
joins (epoch 0, with its subscription), heartbeats, and leaves (-1) with this one request;
the answer gives its member epoch, the heartbeat interval (the group's
``share.heartbeat.interval.ms``) and, when it changed, its assignment, in which a partition
may be shared with other members. Needs READ on the group, and DESCRIBE on every topic it
names (TOPIC_AUTHORIZATION_FAILED otherwise), as Kafka's KafkaApis checks them. The
operations are in :mod:`..share_protocol`."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from .consumer_group_heartbeat import answer, refusal

KEY = 76
_R = response_spec(KEY)
ShareGroupHeartbeatResponse = _R.cls


async def handle(broker, ctx, request):
    refused = refusal(broker, ctx, request)
    if refused:
        return error_response(request, refused)
    return answer(_R, *await coordinator_of(broker).share.heartbeat(ctx, request))


def error_response(request, code):
    return ShareGroupHeartbeatResponse(error_code=code)


API = Api(KEY, 1, 1, handle, error_response)
