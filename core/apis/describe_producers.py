"""DescribeProducers (key 61), version 0 (KIP-664): the active producers of partitions this
broker leads, from their producer state (``core/producer_state.py``), with the offset
where each one's open transaction started (``kafka-transactions.sh describe-producers``
uses it to find hanging transactions). READ on the topic, else TOPIC_AUTHORIZATION_FAILED;
not led here: NOT_LEADER_OR_FOLLOWER (Kafka's ``ReplicaManager.activeProducerState``)."""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import partition_of

KEY = 61
_R = response_spec(KEY)
DescribeProducersResponse = _R.cls
TopicResponse = _R.struct("TopicResponse")
PartitionResponse = _R.struct("PartitionResponse")
ProducerState = _R.struct("ProducerState")


def active_producers(partition) -> list[ProducerState]:
    return [
        ProducerState(
            producer_id=producer_id,
            producer_epoch=entry.producer_epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for producer_id, entry in partition.producers.producers.items()
    ]


async def handle(broker, ctx, request):
    allowed = broker.authorize_topics(ctx, AclOperation.READ, (t.name for t in request.topics))
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            res = PartitionResponse(partition_index=index, error_code=ErrorCode.NONE)
            if not allowed[t.name]:
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                partition, res.error_code = partition_of(broker.topics.get(t.name), index)
                if partition is not None:
                    res.active_producers = active_producers(partition)
            parts.append(res)
        topics.append(TopicResponse(name=t.name, partitions=parts))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


def error_response(request, code):
    return DescribeProducersResponse(
        topics=[
            TopicResponse(
                name=t.name,
                partitions=[PartitionResponse(partition_index=i, error_code=code) for i in t.partition_indexes],
            )
            for t in request.topics
        ]
    )


API = Api(KEY, 0, 0, handle, error_response)
