"""AlterShareGroupOffsets (key 91), version 0: make an empty share group's partitions start
over at the offsets given (their share state initialized afresh at a new group epoch); a
group with members answers NON_EMPTY_GROUP, one of another type GROUP_ID_NOT_FOUND, an empty
group id INVALID_GROUP_ID. Needs
READ on the group and on each topic (TOPIC_AUTHORIZATION_FAILED for its partitions); an
unknown topic or partition answers UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers. The
operation is :meth:`..share_groups.ShareGroups.alter_offsets`."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 91
_R = response_spec(KEY)
AlterShareGroupOffsetsResponse = _R.cls
Topic = _R.struct("AlterShareGroupOffsetsResponseTopic")
Partition = _R.struct("AlterShareGroupOffsetsResponsePartition")
UNKNOWN = "This server does not host this topic-partition."
MESSAGES = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: UNKNOWN,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
}


async def handle(broker, ctx, request):
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not request.group_id:  # GroupCoordinatorService's check: no share group of that name is made
        return error_response(request, ErrorCode.INVALID_GROUP_ID)
    allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.topic_name for t in request.topics])
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets = {}
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        for p in t.partitions:
            key = (t.topic_name, p.partition_index)
            if not allowed[t.topic_name]:
                errors[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                errors[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                offsets[(topic.topic_id, p.partition_index)] = p.start_offset
    error, message, altered = await coordinator_of(broker).share.alter_offsets(request.group_id, offsets)
    if error:
        return AlterShareGroupOffsetsResponse(error_code=error, error_message=message)
    for (topic_id, index), code in altered.items():
        errors[(broker.topics_by_id[topic_id].name, index)] = code
    responses = []
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        partitions = []
        for p in t.partitions:
            code = errors[(t.topic_name, p.partition_index)]
            message = MESSAGES.get(code) if code else None
            partitions.append(Partition(partition_index=p.partition_index, error_code=code, error_message=message))
        topic_id = topic.topic_id if topic is not None and allowed[t.topic_name] else None
        responses.append(Topic(topic_name=t.topic_name, topic_id=topic_id, partitions=partitions))
    return AlterShareGroupOffsetsResponse(error_code=0, responses=responses)


def error_response(request, code):
    return AlterShareGroupOffsetsResponse(error_code=code)


API = Api(KEY, 0, 0, handle, error_response)
