"""OffsetForLeaderEpoch (key 23), versions 2-4 (KIP-101, KIP-320): where a leader epoch
ends in the leader's log, so that a follower or a consumer whose log or position came from
an older leader finds where it parted from this one (Kafka's
LeaderEpochFileCache.endOffsetFor). Consumers need DESCRIBE on the topic; followers
(``replica_id`` >= 0) CLUSTER_ACTION, which also stands for DESCRIBE, as in Kafka."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..replication import epoch_end_offset, leader_epochs
from . import Api
from .common import leader_epoch_error, partition_of

KEY = 23
_R = response_spec(KEY)
OffsetForLeaderEpochResponse = _R.cls
OffsetForLeaderTopicResult = _R.struct("OffsetForLeaderTopicResult")
EpochEndOffset = _R.struct("EpochEndOffset")


def end_of_epoch(partition, epoch: int) -> tuple[int, int]:
    """(epoch, end offset) as Kafka answers: an epoch newer than the log's latest, or
    undefined, is (-1, -1); a log that keeps no epochs knows only its current one."""
    epochs = leader_epochs(partition)
    if epochs is None:
        current = partition.leader_epoch
        return (current, partition.log.log_end_offset) if epoch == current else (-1, -1)
    if epoch < 0 or not epochs or epoch > epochs[-1][0]:
        return -1, -1
    return epoch_end_offset(partition, epoch)


async def handle(broker, ctx, request):
    names = {t.topic for t in request.topics}
    if broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        allowed = dict.fromkeys(names, True)
    else:
        allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, names)
    topics = []
    for t in request.topics:
        topic = broker.topics.get(t.topic)
        results = []
        for p in t.partitions:
            res = EpochEndOffset(partition=p.partition)
            partition, res.error_code = partition_of(topic, p.partition)
            if not allowed[t.topic]:
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is not None:
                res.error_code = leader_epoch_error(partition, p.current_leader_epoch)
                if not res.error_code:
                    res.leader_epoch, res.end_offset = end_of_epoch(partition, p.leader_epoch)
            results.append(res)
        topics.append(OffsetForLeaderTopicResult(topic=t.topic, partitions=results))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


def error_response(request, code):
    return OffsetForLeaderEpochResponse(
        topics=[
            OffsetForLeaderTopicResult(
                topic=t.topic, partitions=[EpochEndOffset(partition=p.partition, error_code=code) for p in t.partitions]
            )
            for t in request.topics
        ]
    )


API = Api(KEY, 2, 4, handle, error_response)
