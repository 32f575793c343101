"""DeleteShareGroupOffsets (key 92), version 0: an empty share group forgets the share state
of whole topics (the persister deletes it; the group's ShareGroupStatePartitionMetadata
drops them), so that they start afresh from share.auto.offset.reset. A group with members
answers NON_EMPTY_GROUP, an unknown one or one of another type GROUP_ID_NOT_FOUND; a topic
without state UNKNOWN_TOPIC_OR_PARTITION. Needs DELETE on the group and READ on each topic,
as Kafka checks them. The operation is :meth:`..share_groups.ShareGroups.delete_offsets`."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed
from .alter_share_group_offsets import MESSAGES

KEY = 92
_R = response_spec(KEY)
DeleteShareGroupOffsetsResponse = _R.cls
Topic = _R.struct("DeleteShareGroupOffsetsResponseTopic")
NO_STATE = "There is no offset information to delete."


async def handle(broker, ctx, request):
    if not request.group_id:
        return error_response(request, ErrorCode.INVALID_GROUP_ID)
    if not group_allowed(broker, ctx, AclOperation.DELETE, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.topic_name for t in request.topics])
    responses, ids = [], {}
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        if not allowed[t.topic_name]:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            ids[topic.topic_id] = t.topic_name
            continue
        responses.append(Topic(topic_name=t.topic_name, error_code=code, error_message=MESSAGES[code]))
    error, message, deleted = await coordinator_of(broker).share.delete_offsets(request.group_id, list(ids))
    if error:
        return DeleteShareGroupOffsetsResponse(error_code=error, error_message=message)
    for topic_id, code in deleted.items():
        message = NO_STATE if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
        responses.append(Topic(topic_name=ids[topic_id], topic_id=topic_id, error_code=code, error_message=message))
    return DeleteShareGroupOffsetsResponse(error_code=0, responses=responses)


def error_response(request, code):
    return DeleteShareGroupOffsetsResponse(error_code=code)


API = Api(KEY, 0, 0, handle, error_response)
