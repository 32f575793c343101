"""OffsetDelete (key 47), version 0: remove a group's committed offsets (KIP-496). An
Empty group loses any; a consumer group with members only those of topics no member
subscribes to (GROUP_SUBSCRIBED_TO_TOPIC); another protocol's active group none
(NON_EMPTY_GROUP). Needs DELETE on the group and READ on each topic, as Kafka checks them."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ...coordinator_partitions import write_error
from .. import coordinator_of
from ..classic import CONSUMER_PROTOCOL_TYPE, ClassicGroup, ClassicState
from . import group_allowed

KEY = 47
_R = response_spec(KEY)
OffsetDeleteResponse = _R.cls
OffsetDeleteResponseTopic = _R.struct("OffsetDeleteResponseTopic")
OffsetDeleteResponsePartition = _R.struct("OffsetDeleteResponsePartition")


async def handle(broker, ctx, request):
    group_id = request.group_id
    if not group_allowed(broker, ctx, AclOperation.DELETE, [group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(group_id)
    group = coordinator.groups.get(group_id)
    if not error and (group is None or getattr(group, "state", None) is ClassicState.DEAD or group.type == "share"):
        error = ErrorCode.GROUP_ID_NOT_FOUND  # a share group has no committed offsets (Kafka's validateOffsetDelete)
    subscribed: set[str] = set()
    if not error and isinstance(group, ClassicGroup) and group.state is not ClassicState.EMPTY:
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            error = ErrorCode.NON_EMPTY_GROUP
        else:
            subscribed = group.subscribed_topics() or set()
    if error:
        return error_response(request, error)
    allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.name for t in request.topics])
    errors: dict[tuple[str, int], ErrorCode] = {}
    for t in request.topics:
        topic = broker.topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if not allowed[t.name]:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif t.name in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            else:
                errors[tp] = ErrorCode.NONE
    deletable = [tp for tp, e in errors.items() if not e]
    tombstones = coordinator.offsets.tombstones(group_id, deletable)
    if tombstones:
        error = await coordinator.write(group_id, tombstones)
        if error:
            return error_response(request, write_error(error))
    return OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)]
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def error_response(request, code):
    return OffsetDeleteResponse(error_code=code)


API = Api(KEY, 0, 0, handle, error_response)
