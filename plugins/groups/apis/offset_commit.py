"""OffsetCommit (key 8), versions 2-9: a group's consumed positions, written to
``__consumer_offsets`` before they are answered. Members of a classic group commit with
their generation; anyone may commit for an Empty or absent group with generation -1
(AdminClient, ``assign()`` users). Needs READ on the group and on each topic."""

from __future__ import annotations

import time

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..offsets import OffsetAndMetadata

KEY = 8
_R = response_spec(KEY)
OffsetCommitResponse = _R.cls
OffsetCommitResponseTopic = _R.struct("OffsetCommitResponseTopic")
OffsetCommitResponsePartition = _R.struct("OffsetCommitResponsePartition")


async def handle(broker, ctx, request):
    group_action = Action(AclOperation.READ, ResourceType.GROUP, request.group_id)
    (group_ok,), allowed = authorize_commit(broker, ctx, [group_action], request.topics)
    if not group_ok:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not request.group_id:
        return error_response(request, ErrorCode.INVALID_GROUP_ID)
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(request.group_id)
    if error:
        return error_response(request, error)
    retention = getattr(request, "retention_time_ms", -1)
    errors, offsets = offsets_to_commit(broker, ctx, coordinator, request.topics, retention, allowed)
    error = coordinator.offsets.validate_commit(
        request.group_id,
        request.generation_id_or_member_epoch,
        request.member_id,
        request.group_instance_id,
        ctx.api_version,
    )
    if error:  # Kafka checks the group before each partition's metadata
        errors.update({tp: error for tp, e in errors.items() if e == ErrorCode.OFFSET_METADATA_TOO_LARGE})
    elif offsets:
        error = await coordinator.offsets.commit(request.group_id, request.member_id, offsets)
    errors.update(dict.fromkeys(offsets, error))
    return _response(request, lambda t, p: errors[(t, p)])


def authorize_commit(broker, ctx, actions: list[Action], topics) -> tuple[list[bool], dict[str, bool]]:
    """``actions`` (READ on the group, ...) and READ on each topic, in one authorizer call (a
    commit's cost is mostly per request): the answers to ``actions``, and each topic's."""
    names = sorted({t.name for t in topics})
    answers = broker.authorize(ctx, actions + [Action(AclOperation.READ, ResourceType.TOPIC, n) for n in names])
    return answers[: len(actions)], dict(zip(names, answers[len(actions) :]))


def offsets_to_commit(
    broker, ctx, coordinator, topics, retention_ms: int | None = -1, allowed: dict[str, bool] | None = None
) -> tuple[dict[tuple[str, int], ErrorCode], dict[tuple[str, int], OffsetAndMetadata]]:
    """The offsets a commit request may write and the errors of the partitions it may not
    (READ on each topic, unless ``allowed`` already says; a known partition, metadata within
    ``offset.metadata.max.bytes``)."""
    if allowed is None:
        allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.name for t in topics])
    now = int(time.time() * 1000)
    expire = now + retention_ms if retention_ms is not None and retention_ms >= 0 else None
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in topics:
        topic = broker.topics.get(t.name)
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            metadata = p.committed_metadata or ""
            if not allowed[t.name]:
                errors[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                errors[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif len(metadata.encode()) > coordinator.offsets.max_metadata_bytes:
                errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            else:
                leader_epoch = getattr(p, "committed_leader_epoch", -1)
                offsets[tp] = OffsetAndMetadata(p.committed_offset, leader_epoch, metadata, now, expire)
    return errors, offsets


def _response(request, error_of) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error_of(t.name, p.partition_index)
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def error_response(request, code):
    return _response(request, lambda t, p: code)


API = Api(KEY, 2, 9, handle, error_response)
