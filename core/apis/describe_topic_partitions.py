"""DescribeTopicPartitions (key 75), version 0 (KIP-966): topics and their partitions, page
by page. The topics named (all, sorted by name, when none are) are answered from the
cursor on, at most ``response_partition_limit`` partitions per response, and
``next_cursor`` says where the next page starts. Topics the principal may not DESCRIBE
answer TOPIC_AUTHORIZATION_FAILED when named and are left out of an all-topics answer."""

from __future__ import annotations

from ..authorization import AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import leadership, topic_authorized_operations

KEY = 75
_R = response_spec(KEY)
DescribeTopicPartitionsResponse = _R.cls
ResponseTopic = _R.struct("DescribeTopicPartitionsResponseTopic")
ResponsePartition = _R.struct("DescribeTopicPartitionsResponsePartition")
Cursor = _R.struct("Cursor")


async def handle(broker, ctx, request):
    named = bool(request.topics)
    names = sorted({t.name for t in request.topics}) if named else sorted(broker.topics)
    if request.cursor is not None:
        names = [n for n in names if n >= request.cursor.topic_name]
    describe = dict(
        zip(
            names,
            broker.authorize(
                ctx, [Action(AclOperation.DESCRIBE, ResourceType.TOPIC, n, log_if_denied=named) for n in names]
            ),
        )
    )
    operations = topic_authorized_operations(broker, ctx, [n for n in names if describe[n] and n in broker.topics])
    budget = max(1, min(request.response_partition_limit, 2000))
    topics, next_cursor = [], None
    for i, name in enumerate(names):
        topic = broker.topics.get(name)
        if not describe[name]:
            if named:
                topics.append(ResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            continue
        if topic is None:
            topics.append(ResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
            continue
        first = (
            request.cursor.partition_index if request.cursor is not None and name == request.cursor.topic_name else 0
        )
        partitions = list(range(len(topic.partitions)))[first:]
        if len(partitions) > budget:
            next_cursor = Cursor(topic_name=name, partition_index=first + budget)
            partitions = partitions[:budget]
        budget -= len(partitions)
        topics.append(
            ResponseTopic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=topic.topic_id,
                is_internal=name in broker.internal_topics,
                partitions=[
                    ResponsePartition(**leadership(broker, topic, i), eligible_leader_replicas=[], last_known_elr=[])
                    for i in partitions
                ],
                topic_authorized_operations=operations[name],
            )
        )
        if next_cursor is not None:
            break
        if budget == 0 and name != names[-1]:
            next_cursor = Cursor(topic_name=names[i + 1], partition_index=0)
            break
    return DescribeTopicPartitionsResponse(topics=topics, next_cursor=next_cursor)


def error_response(request, code):
    return DescribeTopicPartitionsResponse(topics=[ResponseTopic(error_code=code, name=t.name) for t in request.topics])


API = Api(KEY, 0, 0, handle, error_response)
