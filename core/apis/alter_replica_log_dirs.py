"""AlterReplicaLogDirs (key 34), versions 1-2: move this broker's replicas of partitions to
another of its log dirs (``log.dirs``, JBOD), as Kafka's ReplicaManager.alterReplicaLogDirs.

Needs ALTER on the cluster (else every partition answers CLUSTER_AUTHORIZATION_FAILED).
Per partition, in Kafka's order: INVALID_TOPIC_EXCEPTION when the topic's name is too long
for the move's directory; LOG_DIR_NOT_FOUND for a path that is not exactly one of the log
dirs (as Kafka compares absolute paths; a storage without files has none);
UNKNOWN_TOPIC_OR_PARTITION for a partition the cluster does not have, REPLICA_NOT_AVAILABLE
for one this broker holds no replica of; KAFKA_STORAGE_ERROR when the move's directory
cannot be made. Else NONE: the replica is there already, is on its way there, or starts
moving (a move to another dir under way is given up first). The move runs in the
background (``Partition.start_log_move``, the storage's :class:`~brokkr.core.log.LogMove`);
DescribeLogDirs shows the replica being filled in its new dir as a future replica until it
has replaced the old one.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..log import log_dir_of
from ..protocol.frames import response_spec
from . import Api

log = logging.getLogger("brokkr")

KEY = 34
_R = response_spec(KEY)
AlterReplicaLogDirsResponse = _R.cls
TopicResult = _R.struct("AlterReplicaLogDirTopicResult")
PartitionResult = _R.struct("AlterReplicaLogDirPartitionResult")


def _alter(broker, dirs: dict[str, Path], path: str, name: str, index: int) -> ErrorCode:
    if len(f"{name}-{index}.{'0' * 32}-future") > 255:  # Kafka's logFutureDirName must fit a file name
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    directory = dirs.get(path)
    if directory is None:
        return ErrorCode.LOG_DIR_NOT_FOUND
    topic = broker.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    partition = topic.partitions[index]
    if partition is None:
        return ErrorCode.REPLICA_NOT_AVAILABLE
    if partition.log_move is not None:
        if partition.log_move.directory == directory:
            return ErrorCode.NONE
        partition.cancel_log_move()
    if log_dir_of(partition.log) != directory:
        try:
            partition.start_log_move(broker.storage.move_log(partition.log, directory))
        except OSError as exc:  # the new log's directory cannot be made there
            log.error("%s: cannot start moving the log to %s: %s", partition.name, directory, exc)
            return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


def _response(request, code_of) -> AlterReplicaLogDirsResponse:
    """Each partition's result by topic; ``code_of(path, topic, partition)`` gives its code."""
    results: dict[str, list] = {}
    for d in request.dirs:
        for t in d.topics:
            for index in t.partitions:
                code = code_of(d.path, t.name, index)
                results.setdefault(t.name, []).append(PartitionResult(partition_index=index, error_code=code))
    return AlterReplicaLogDirsResponse(results=[TopicResult(topic_name=n, partitions=ps) for n, ps in results.items()])


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    dirs = {str(d): d for d in broker.storage.dirs} if broker.storage_capabilities.log_dirs else {}
    return _response(request, lambda path, name, index: _alter(broker, dirs, path, name, index))


def error_response(request, code):
    return _response(request, lambda path, name, index: code)


API = Api(KEY, 1, 2, handle, error_response)
