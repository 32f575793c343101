"""What the share-state APIs (Initialize/Read/Write/DeleteShareGroupState,
ReadShareGroupStateSummary: requests between brokers) share: CLUSTER_ACTION on the cluster
(else CLUSTER_AUTHORIZATION_FAILED for every partition, as Kafka's KafkaApis), and one
answer per share partition from the share coordinator of this broker (NOT_COORDINATOR
where it does not coordinate it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from brokkr.core.authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

#: The messages Kafka gives with its INVALID_REQUEST answers of the share coordinator.
UNINITIALIZED = {84: "Read on uninitialized share partition.", 85: "Write on uninitialized share partition."}


def cluster_action_allowed(broker, ctx) -> bool:
    return broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]


def coordinator(broker):
    from .. import share_coordinator_of

    return share_coordinator_of(broker)


async def answer(
    broker,
    ctx,
    key: int,
    request,
    topic_struct: str,
    one: Callable[..., Awaitable[dict]],
):
    """The response: ``one(coordinator, group, topic id, partition data)`` gives each
    partition's fields (an ``error_code`` among them)."""
    spec = response_spec(key)
    result_cls = spec.struct(topic_struct)
    part_cls = spec.struct("PartitionResult")
    allowed = cluster_action_allowed(broker, ctx)
    shard = coordinator(broker)
    results = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if not allowed:
                fields = {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
            elif shard is None:
                fields = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
            else:
                fields = await one(shard, request.group_id, t.topic_id, p)
            code = fields["error_code"]
            if code == ErrorCode.INVALID_REQUEST and key in UNINITIALIZED:
                fields.setdefault("error_message", UNINITIALIZED[key])
            parts.append(part_cls(partition=p.partition, **fields))
        results.append(result_cls(topic_id=t.topic_id, partitions=parts))
    return spec.cls(results=results)


def error_response(key: int, topic_struct: str):
    def respond(request, code):
        spec = response_spec(key)
        result_cls, part_cls = spec.struct(topic_struct), spec.struct("PartitionResult")
        return spec.cls(
            results=[
                result_cls(
                    topic_id=t.topic_id,
                    partitions=[part_cls(partition=p.partition, error_code=code) for p in t.partitions],
                )
                for t in request.topics
            ]
        )

    return respond
