"""OffsetFetch (key 9), versions 1-9: a group's committed offsets (several groups per
request from v8; all of a group's offsets when no topics are named, v2+). A partition
without a committed offset answers -1. Needs DESCRIBE on the group (as Kafka checks it)
and on each topic; unauthorized topics are left out of an all-topics answer. With
``require_stable`` (v7+), a partition with a transactional offset commit not yet
committed or aborted answers UNSTABLE_OFFSET_COMMIT (the consumer retries), as Kafka does."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..consumer_group import ConsumerGroup
from . import group_allowed

KEY = 9
GROUPS_VERSION = 8
_R = response_spec(KEY)
OffsetFetchResponse = _R.cls
OldTopic, OldPartition = _R.struct("OffsetFetchResponseTopic"), _R.struct("OffsetFetchResponsePartition")
Group = _R.struct("OffsetFetchResponseGroup")
Topic, Partition = _R.struct("OffsetFetchResponseTopics"), _R.struct("OffsetFetchResponsePartitions")


def _group_offsets(
    broker, ctx, group_id: str, topics, member_id: str | None = None, member_epoch: int = -1, stable: bool = False
) -> tuple[ErrorCode, dict[str, list[tuple]]]:
    """(group error, {topic: [(partition, offset, leader epoch, metadata, error)]}); ``topics``
    is [(name, [partition])] or None for all."""
    if not group_allowed(broker, ctx, AclOperation.DESCRIBE, [group_id])[0]:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(group_id)
    if error:
        return error, {}
    group = coordinator.groups.get(group_id)
    if isinstance(group, ConsumerGroup) and (member_id is not None or member_epoch >= 0):
        # v9: a consumer group's member fetches with its current epoch (ConsumerGroup.validateOffsetFetch)
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, {}
        if member_epoch != member.member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH, {}
    committed = coordinator.offsets.get(group_id)
    unstable = coordinator.offsets.pending_partitions(group_id) if stable else set()
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
        allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, list(wanted))
        wanted = {t: ps for t, ps in wanted.items() if allowed[t]}
    else:
        wanted = {}
        for name, partitions in topics:
            wanted.setdefault(name, []).extend(partitions)
        allowed = broker.authorize_topics(ctx, AclOperation.DESCRIBE, list(wanted))
    out = {}
    for topic, partitions in wanted.items():
        rows = []
        for p in partitions:
            o = committed.get((topic, p))
            if not allowed[topic]:
                rows.append((p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            elif (topic, p) in unstable:
                rows.append((p, -1, -1, "", ErrorCode.UNSTABLE_OFFSET_COMMIT))
            elif o is None:
                rows.append((p, -1, -1, "", ErrorCode.NONE))
            else:
                rows.append((p, o.offset, o.leader_epoch, o.metadata, ErrorCode.NONE))
        out[topic] = rows
    return ErrorCode.NONE, out


async def handle(broker, ctx, request):
    version = ctx.api_version
    if version >= GROUPS_VERSION:
        groups = []
        for g in request.groups:
            topics = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
            error, found = _group_offsets(
                broker, ctx, g.group_id, topics, g.member_id, g.member_epoch, request.require_stable
            )
            groups.append(
                Group(
                    group_id=g.group_id,
                    error_code=error,
                    topics=[
                        Topic(name=t, partitions=[_partition(Partition, row) for row in rows])
                        for t, rows in found.items()
                    ],
                )
            )
        return OffsetFetchResponse(groups=groups)
    topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
    error, found = _group_offsets(broker, ctx, request.group_id, topics, stable=version >= 7 and request.require_stable)
    if error and version < 2:  # no group-level error field: each partition carries it
        found = {t: [(p, -1, -1, "", error) for p in ps] for t, ps in (topics or [])}
    return OffsetFetchResponse(
        error_code=error,
        topics=[
            OldTopic(name=t, partitions=[_partition(OldPartition, row) for row in rows]) for t, rows in found.items()
        ],
    )


def _partition(cls, row: tuple):
    p, offset, epoch, metadata, error = row
    return cls(
        partition_index=p, committed_offset=offset, committed_leader_epoch=epoch, metadata=metadata, error_code=error
    )


def error_response(request, code):
    if request.groups:
        return OffsetFetchResponse(groups=[Group(group_id=g.group_id, error_code=code) for g in request.groups])
    return OffsetFetchResponse(error_code=code)


API = Api(KEY, 1, 9, handle, error_response)
