"""DeleteRecords (key 21), versions 0-2: advance partitions' log start offsets (Kafka's
ReplicaManager.deleteRecords; an internal topic's records are its coordinator's alone:
INVALID_TOPIC_EXCEPTION). With one replica the new low watermark is known at once,
so the request never waits in a purgatory."""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import partition_of

KEY = 21
_R = response_spec(KEY)
DeleteRecordsResponse = _R.cls
DeleteRecordsTopicResult = _R.struct("DeleteRecordsTopicResult")
DeleteRecordsPartitionResult = _R.struct("DeleteRecordsPartitionResult")


def _result(index: int, code: ErrorCode, low_watermark: int = -1) -> DeleteRecordsPartitionResult:
    return DeleteRecordsPartitionResult(partition_index=index, low_watermark=low_watermark, error_code=code)


async def handle(broker, ctx, request):
    allowed = broker.authorize_topics(ctx, AclOperation.DELETE, (t.name for t in request.topics))
    results = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        partitions = []
        for p in t.partitions:
            partition, missing = partition_of(topic, p.partition_index)
            if not allowed[t.name]:
                res = _result(p.partition_index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif partition is None:
                res = _result(p.partition_index, missing)
            elif t.name in broker.internal_topics:  # Kafka: "Cannot delete records of internal topic"
                res = _result(p.partition_index, ErrorCode.INVALID_TOPIC_EXCEPTION)
            elif "delete" not in partition.config["cleanup.policy"]:
                res = _result(p.partition_index, ErrorCode.POLICY_VIOLATION)
            else:
                try:
                    res = _result(p.partition_index, ErrorCode.NONE, broker.delete_records(partition, p.offset))
                except BrokkrError as exc:
                    res = _result(p.partition_index, exc.code)
            partitions.append(res)
        results.append(DeleteRecordsTopicResult(name=t.name, partitions=partitions))
    return DeleteRecordsResponse(topics=results)


def error_response(request, code):
    return DeleteRecordsResponse(
        topics=[
            DeleteRecordsTopicResult(name=t.name, partitions=[_result(p.partition_index, code) for p in t.partitions])
            for t in request.topics
        ]
    )


API = Api(KEY, 0, 2, handle, error_response)
