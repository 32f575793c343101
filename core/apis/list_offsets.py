"""ListOffsets (key 2), versions 1-10 (Kafka 4.1's): offsets by timestamp, and the special
specs -2 earliest, -1 latest, -3 max timestamp (v7+), -4 earliest local (v8+), -5 latest
tiered (v9+) (Kafka's UnifiedLog.fetchOffsetByTimestamp); another negative spec, or one
older than its version, is answered UNSUPPORTED_VERSION, as Kafka's
``isListOffsetsTimestampUnsupported``. With isolation_level 1 (read_committed, v2+)
everything is bounded by the last stable offset instead of the high watermark, as in
Kafka's ``ReplicaManager.fetchOffsetForTimestamp``."""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import leader_epoch_error, partition_of

KEY = 2
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
#: The first version that knows each special spec (Kafka's timestampMinSupportedVersion).
SPEC_VERSIONS = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
NEVER = 1 << 15  # the version of any other negative spec: none
READ_COMMITTED = 1
_R = response_spec(KEY)
ListOffsetsResponse = _R.cls
ListOffsetsTopicResponse = _R.struct("ListOffsetsTopicResponse")
ListOffsetsPartitionResponse = _R.struct("ListOffsetsPartitionResponse")


def _lookup(partition, spec: int, read_committed: bool) -> tuple[int, int]:
    """(offset, timestamp) for one request, bounded by the high watermark (read_committed:
    the last stable offset)."""
    plog = partition.log
    hw = partition.last_stable_offset if read_committed else partition.high_watermark
    if spec in (EARLIEST, EARLIEST_LOCAL):
        return plog.log_start_offset, -1
    if spec == LATEST:
        return hw, -1
    if spec == LATEST_TIERED:
        return -1, -1  # no tiered storage
    found = plog.max_timestamp() if spec == MAX_TIMESTAMP else plog.offset_for_timestamp(spec)
    if found is None or found.offset >= hw:
        return -1, -1
    return found.offset, found.timestamp


async def handle(broker, ctx, request):
    allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, (t.name for t in request.topics))
    read_committed = request.isolation_level == READ_COMMITTED
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.name)
        parts = []
        for p in t.partitions:
            res = ListOffsetsPartitionResponse(partition_index=p.partition_index)
            partition, missing = partition_of(topic, p.partition_index)
            if not allowed[t.name]:
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                res.error_code = missing
            elif p.timestamp < 0 and ctx.api_version < SPEC_VERSIONS.get(p.timestamp, NEVER):
                res.error_code = ErrorCode.UNSUPPORTED_VERSION
            elif code := leader_epoch_error(partition, p.current_leader_epoch):
                res.error_code = code
            else:
                res.offset, res.timestamp = _lookup(partition, p.timestamp, read_committed)
                res.leader_epoch = partition.leader_epoch if res.offset >= 0 else -1
            parts.append(res)
        topics.append(ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(topics=topics)


def error_response(request, code):
    return ListOffsetsResponse(
        topics=[
            ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


API = Api(KEY, 1, 10, handle, error_response)
