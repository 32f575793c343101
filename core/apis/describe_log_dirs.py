"""DescribeLogDirs (key 35), versions 1-4 (Kafka 4.1's): each log directory, the partitions in it and
their sizes, and (v4+) the directory's total and usable bytes. Needs DESCRIBE on the
cluster (v3+ answers CLUSTER_AUTHORIZATION_FAILED; older versions an empty list, as
Kafka does). A partition's directory is where its segment files are; a storage without
files (``brokkr.storage=memory``) has no log directories to describe. A replica moving to
another directory (AlterReplicaLogDirs) is also listed there as a future replica, with how
far it is behind (``offset_lag``), as Kafka lists its future logs."""

from __future__ import annotations

import shutil

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..log import log_dir_of
from ..protocol.frames import response_spec
from . import Api

KEY = 35
_R = response_spec(KEY)
DescribeLogDirsResponse = _R.cls
DescribeLogDirsResult = _R.struct("DescribeLogDirsResult")
DescribeLogDirsTopic = _R.struct("DescribeLogDirsTopic")
DescribeLogDirsPartition = _R.struct("DescribeLogDirsPartition")


def _wanted(broker, request):
    if request.topics is None:
        return [p for t in broker.topics.values() for p in t.partitions]
    out = []
    for rt in request.topics:
        topic = broker.topics.get(rt.topic)
        if topic is not None:
            out.extend(topic.partitions[i] for i in rt.partitions if 0 <= i < len(topic.partitions))
    return out


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    # A storage keeping files lists its directories (Capability.LOG_DIRS, see brokkr.core.log).
    dirs = broker.storage.dirs if broker.storage_capabilities.log_dirs else ()
    by_dir: dict[str, dict[str, list]] = {str(d): {} for d in dirs}
    for p in _wanted(broker, request):
        logs = [(p.log, False)] + ([(p.log_move.future, True)] if p.log_move is not None else [])
        for plog, future in logs:
            log_dir = log_dir_of(plog)
            if log_dir is None:
                continue
            described = DescribeLogDirsPartition(
                partition_index=p.index,
                partition_size=sum(s.size for s in plog.segments()),
                offset_lag=max(p.log.log_end_offset - plog.log_end_offset, 0),
                is_future_key=future,
            )
            by_dir.setdefault(str(log_dir), {}).setdefault(p.topic.name, []).append(described)
    results = []
    for log_dir, topics in sorted(by_dir.items()):
        result = DescribeLogDirsResult(
            error_code=ErrorCode.NONE,
            log_dir=log_dir,
            topics=[DescribeLogDirsTopic(name=name, partitions=parts) for name, parts in sorted(topics.items())],
        )
        try:
            usage = shutil.disk_usage(log_dir)
            result.total_bytes, result.usable_bytes = usage.total, usage.free
        except OSError:
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        results.append(result)
    return DescribeLogDirsResponse(error_code=ErrorCode.NONE, results=results)


def error_response(request, code):
    return DescribeLogDirsResponse(error_code=code, results=[])


API = Api(KEY, 1, 4, handle, error_response)
