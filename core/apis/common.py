"""Small pieces several API handlers share."""

from __future__ import annotations

import uuid

import attrs

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..partition import Partition, Topic


def resolve_topic(broker, name: str | None, topic_id: uuid.UUID | None, by_id: bool) -> tuple[Topic | None, ErrorCode]:
    """A topic named by name (older versions) or by id (newer ones), with Kafka's error."""
    if by_id:
        topic = broker.topics_by_id.get(topic_id)
        return topic, ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_ID
    topic = broker.topics.get(name)
    return topic, ErrorCode.NONE if topic else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def leadership(broker, partition: Partition) -> dict:
    """A partition's leader and replicas as Metadata-like responses give them (one
    replica: this broker leads every partition)."""
    node = broker.node_id
    return {
        "error_code": ErrorCode.NONE,
        "partition_index": partition.index,
        "leader_id": node,
        "leader_epoch": partition.leader_epoch,
        "replica_nodes": [node],
        "isr_nodes": [node],
    }


def partition_of(topic: Topic | None, index: int) -> Partition | None:
    if topic is None or not 0 <= index < len(topic.partitions):
        return None
    return topic.partitions[index]


def leader_epoch_error(partition: Partition, current_leader_epoch: int) -> ErrorCode:
    """Kafka's check of a client's view of the leader epoch (-1: not checked)."""
    if current_leader_epoch < 0 or current_leader_epoch == partition.leader_epoch:
        return ErrorCode.NONE
    if current_leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH


def cluster_store(broker, ctx, operation: AclOperation, store_hook, missing: tuple[ErrorCode, str]):
    """For admin APIs whose data a plugin keeps (ACLs, client quotas): ``(store, None)``
    when the request may perform ``operation`` on the cluster and ``store_hook`` gives a
    store, else ``(None, (error code, message))``: CLUSTER_AUTHORIZATION_FAILED, or
    ``missing`` when no plugin keeps a store."""
    if not broker.authorize(ctx, [Action(operation, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return None, (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    store = store_hook(broker=broker)
    return (store, None) if store is not None else (None, missing)


#: Operations reported in TopicAuthorizedOperations, as a bit field of AclOperation codes.
TOPIC_OPERATIONS = (
    AclOperation.READ,
    AclOperation.WRITE,
    AclOperation.CREATE,
    AclOperation.DELETE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
)


def authorized_operations(broker, ctx, resource_type: ResourceType, operations, names: list[str]) -> dict[str, int]:
    """The ``operations`` the principal may perform on each named resource, as Kafka's bit
    field of AclOperation codes (one hook call for all)."""
    actions = [Action(op, resource_type, n, log_if_denied=False) for n in names for op in operations]
    allowed = iter(broker.authorize(ctx, actions))
    return {n: sum(1 << op for op in operations if next(allowed)) for n in names}


def topic_authorized_operations(broker, ctx, names: list[str]) -> dict[str, int]:
    """The topic operations the principal may perform on each topic, one hook call for all."""
    return authorized_operations(broker, ctx, ResourceType.TOPIC, TOPIC_OPERATIONS, names)


#: The operations Kafka reports in ClusterAuthorizedOperations (bits of AclOperation codes).
CLUSTER_OPERATIONS = (
    AclOperation.CREATE,
    AclOperation.ALTER,
    AclOperation.DESCRIBE,
    AclOperation.CLUSTER_ACTION,
    AclOperation.DESCRIBE_CONFIGS,
    AclOperation.ALTER_CONFIGS,
    AclOperation.IDEMPOTENT_WRITE,
)


def cluster_authorized_operations(broker, ctx) -> int:
    """The cluster operations the request's principal may perform, as Kafka's bit field."""
    actions = [Action(op, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False) for op in CLUSTER_OPERATIONS]
    return sum(1 << op for op, ok in zip(CLUSTER_OPERATIONS, broker.authorize(ctx, actions)) if ok)


@attrs.frozen
class NoResponse:
    """A handler's answer when the client expects none (Produce with acks=0): nothing is
    sent, but the connection is still not read for ``throttle_time_ms`` (KIP-219)."""

    throttle_time_ms: int = 0
