"""ConsumerGroupHeartbeat (key 68), versions 0-1: the consumer group protocol of KIP-848.
A member joins (epoch 0), heartbeats, and leaves (-1, or -2 for a static member that will
be back) with this one request; the answer gives its member epoch, the heartbeat interval
and, when it changed, its assignment. Needs READ on the group, and DESCRIBE on every topic
it names (TOPIC_AUTHORIZATION_FAILED otherwise, as Kafka answers); a regex only yields
the topics the member may DESCRIBE. The operations are in :mod:`..consumer_protocol`."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..consumer_member import assignment_items
from . import group_allowed

KEY = 68
_R = response_spec(KEY)
ConsumerGroupHeartbeatResponse = _R.cls


async def handle(broker, ctx, request):
    refused = refusal(broker, ctx, request)
    if refused:
        return error_response(request, refused)
    return answer(_R, *await coordinator_of(broker).consumer.heartbeat(ctx, request))


def refusal(broker, ctx, request) -> ErrorCode:
    """Kafka's checks before a modern heartbeat (also ShareGroupHeartbeat's): READ on the
    group, DESCRIBE on every topic it names."""
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if request.subscribed_topic_names:
        allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, sorted(set(request.subscribed_topic_names)))
        if not all(allowed.values()):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return ErrorCode.NONE


def answer(spec, error: ErrorCode, message: str | None, result):
    """A modern heartbeat's response (``spec``: its response spec): the error, or the member's
    id, epoch, heartbeat interval and, when it is sent, its assignment."""
    if error:
        return spec.cls(error_code=error, error_message=message)
    assignment = None
    if result.assignment is not None:
        partitions = spec.struct("TopicPartitions")
        topics = [partitions(topic_id=t, partitions=ps) for t, ps in assignment_items(result.assignment)]
        assignment = spec.struct("Assignment")(topic_partitions=topics)
    return spec.cls(
        error_code=0,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )


def error_response(request, code):
    return ConsumerGroupHeartbeatResponse(error_code=code)


API = Api(KEY, 0, 1, handle, error_response)
