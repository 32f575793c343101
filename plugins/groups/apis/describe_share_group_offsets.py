"""DescribeShareGroupOffsets (key 90), versions 0-1: where each share partition of a group
starts (its share state's start offset, read through the persister ``broker.share_state``)
and, from v1 (KIP-1226), its lag: the partition's end offset as its leader answers it
(``ShareGroups.end_offsets``: ListOffsets to another broker), less the start offset and the
records delivered past it (Kafka's computeShareGroupLagAndBuildResponse); a partition whose
leader does not answer carries the error instead. Topics null: every partition whose state
the group initialized. Needs DESCRIBE on the group; a topic the principal may not DESCRIBE is
left out of an all-topics answer and answers start offset -1 when named, as Kafka answers;
so do a topic that does not exist and a partition without state."""

from __future__ import annotations

import uuid

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed

KEY = 90
_R = response_spec(KEY)
DescribeShareGroupOffsetsResponse = _R.cls
Group = _R.struct("DescribeShareGroupOffsetsResponseGroup")
Topic = _R.struct("DescribeShareGroupOffsetsResponseTopic")
Partition = _R.struct("DescribeShareGroupOffsetsResponsePartition")
UNINITIALIZED, DEFAULT_LEADER_EPOCH = -1, 0
ZERO_UUID = uuid.UUID(int=0)


def _needs_lag(summary) -> bool:
    """Whether a share partition's lag is computed (Kafka's shouldComputeSharePartitionLag):
    its state was read, with a start offset and a delivery-complete count."""
    return not summary[0] and summary[1] >= 0 and len(summary) >= 5 and summary[4] >= 0


def _exists(broker, topic_id: uuid.UUID, partition: int) -> bool:
    """Whether the partition exists: the share state of no other is asked for, so that the
    work a request makes is bounded by the topics' partitions, not by the indexes it names
    (any other answers start offset -1, as the share coordinator's error gives)."""
    topic = broker.topics_by_id.get(topic_id)
    return topic is not None and 0 <= partition < len(topic.partitions)


async def describe(broker, ctx, group_id: str, topics) -> Group:
    """One group's answer (``topics``: the request's, None for all)."""
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(group_id)
    if error:
        return Group(group_id=group_id, error_code=error)
    if topics is None:
        wanted = {
            t: (tp.name, sorted(tp.partitions)) for t, tp in coordinator.share.initialized_partitions(group_id).items()
        }
        names = [name for name, _ in wanted.values()]
        visible = broker.authorize_topics(ctx, AclOperation.DESCRIBE, names)
        wanted = {t: v for t, v in wanted.items() if visible[v[0]] and t in broker.topics_by_id}
        missing = []
    else:
        names = [t.topic_name for t in topics]
        visible = broker.authorize_topics(ctx, AclOperation.DESCRIBE, names)
        wanted, missing = {}, []
        for t in topics:
            topic = broker.topics.get(t.topic_name)
            if topic is None or not visible[t.topic_name]:
                missing.append(t)
            else:
                wanted[topic.topic_id] = (t.topic_name, list(t.partitions))
    persister = coordinator.share.persister
    keys = list(dict.fromkeys((t, p) for t, (_, ps) in wanted.items() for p in ps if _exists(broker, t, p)))
    summaries = await persister.read_summary(group_id, keys) if persister is not None and keys else {}
    lagging = [(wanted[t][0], p) for (t, p), summary in summaries.items() if _needs_lag(summary)]
    ends = await coordinator.share.end_offsets(lagging) if lagging else {}
    out = []
    for topic_id, (name, partitions) in wanted.items():
        answered = []
        for p in partitions:
            summary = summaries.get((topic_id, p), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, 0, -1))
            ok = not summary[0]
            error, end = ends.get((name, p), (ErrorCode.NONE, -1))
            if error:  # the leader's end offset is not known: its error, as Kafka answers it
                answered.append(Partition(partition_index=p, error_code=error))
                continue
            answered.append(
                Partition(
                    partition_index=p,
                    start_offset=summary[1] if ok else UNINITIALIZED,
                    leader_epoch=summary[2] if ok else DEFAULT_LEADER_EPOCH,
                    # the end offset - the start offset - the records delivered beyond it
                    lag=end - summary[1] - summary[4] if (name, p) in ends else UNINITIALIZED,
                )
            )
        out.append(Topic(topic_name=name, topic_id=topic_id, partitions=answered))
    for t in missing:
        unknown = [Partition(partition_index=p, start_offset=UNINITIALIZED, lag=UNINITIALIZED) for p in t.partitions]
        out.append(Topic(topic_name=t.topic_name, topic_id=ZERO_UUID, partitions=unknown))
    return Group(group_id=group_id, topics=out)


async def handle(broker, ctx, request):
    ids = [g.group_id for g in request.groups]
    allowed = group_allowed(broker, ctx, AclOperation.DESCRIBE, ids)
    groups = []
    for g, ok in zip(request.groups, allowed, strict=True):
        if not ok:
            groups.append(Group(group_id=g.group_id, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED))
        elif g.topics is not None and not g.topics:
            groups.append(Group(group_id=g.group_id))
        else:
            groups.append(await describe(broker, ctx, g.group_id, g.topics))
    return DescribeShareGroupOffsetsResponse(groups=groups)


def error_response(request, code):
    return DescribeShareGroupOffsetsResponse(
        groups=[Group(group_id=g.group_id, error_code=code) for g in request.groups]
    )


API = Api(KEY, 0, 1, handle, error_response)
