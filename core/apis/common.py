"""Small pieces several API handlers share."""

from __future__ import annotations

import uuid

import attrs

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..listeners import advertised_listener
from ..partition import Partition, Topic

_NONE = ErrorCode.NONE  # a module constant: an IntEnum member costs a class lookup each time
_UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
_UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
_NOT_LEADER_OR_FOLLOWER = ErrorCode.NOT_LEADER_OR_FOLLOWER


def resolve_topic(broker, name: str | None, topic_id: uuid.UUID | None, by_id: bool) -> tuple[Topic | None, ErrorCode]:
    """A topic named by name (older versions) or by id (newer ones), with Kafka's error."""
    if by_id:
        topic = broker.topics_by_id.get(topic_id)
        return topic, _NONE if topic else _UNKNOWN_TOPIC_ID
    topic = broker.topics.get(name)
    return topic, _NONE if topic else _UNKNOWN_TOPIC_OR_PARTITION


def leadership(broker, topic: Topic, index: int) -> dict:
    """A partition's leader and replicas as Metadata-like responses give them: alone, this
    broker leads every partition; on a cluster, as the cluster's state says."""
    node = broker.node_id
    if broker.replicas is None:
        return {
            "error_code": ErrorCode.NONE,
            "partition_index": index,
            "leader_id": node,
            "leader_epoch": topic.partitions[index].leader_epoch,
            "replica_nodes": [node],
            "isr_nodes": [node],
        }
    m = broker.replicas.membership
    assignment = m.topics().get(topic.name)
    replicas = list(assignment.replicas.get(index, ())) if assignment else []
    state = m.partition_state(topic.name, index)
    live = m.brokers()
    if state is None or state.leader < 0:
        leader, epoch, isr, code = -1, state.leader_epoch if state else -1, [], ErrorCode.LEADER_NOT_AVAILABLE
    else:
        leader, epoch, isr, code = state.leader, state.leader_epoch, list(state.isr), ErrorCode.NONE
    return {
        "error_code": code,
        "partition_index": index,
        "leader_id": leader,
        "leader_epoch": epoch,
        "replica_nodes": replicas,
        "isr_nodes": isr,
        "offline_replicas": [r for r in replicas if r not in live],
    }


def partition_leader(broker, topic: str, index: int) -> int | None:
    """A partition's leader as this broker knows it: a node id, -1 while it has none, None
    when there is no such partition (alone: this broker leads every partition it holds)."""
    if broker.replicas is None:
        return broker.node_id if broker.partition(topic, index) is not None else None
    state = broker.replicas.membership.partition_state(topic, index)
    return None if state is None else state.leader


def cluster_brokers(broker, listener_name: str) -> tuple[list[tuple[int, str, int, str | None]], int]:
    """The live brokers as a client on ``listener_name`` reaches them (id, host, port, rack),
    and the controller's id (-1 while none)."""
    if broker.replicas is None:
        listener = advertised_listener(broker.listeners, broker.config, listener_name)
        return [(broker.node_id, listener.host, listener.port, broker.config["broker.rack"])], broker.node_id
    m = broker.replicas.membership
    brokers = [
        (b.node_id, *b.endpoint(listener_name), b.rack) for b in sorted(m.brokers().values(), key=lambda b: b.node_id)
    ]
    return brokers, m.controller_id if m.controller_id is not None else -1


def partition_of(topic: Topic | None, index: int) -> tuple[Partition | None, ErrorCode]:
    """The partition this broker leads, or the error Kafka answers: UNKNOWN_TOPIC_OR_PARTITION
    for no such partition, NOT_LEADER_OR_FOLLOWER when another broker leads it."""
    if topic is None or not 0 <= index < len(topic.partitions):
        return None, _UNKNOWN_TOPIC_OR_PARTITION
    partition = topic.partitions[index]
    if partition is None or not partition.is_leader:
        return None, _NOT_LEADER_OR_FOLLOWER
    return partition, _NONE


def replica_of(topic: Topic | None, index: int) -> tuple[Partition | None, ErrorCode]:
    """The partition this broker holds a replica of, leader or follower (a consumer may fetch
    from its closest replica, KIP-392), or the error Kafka answers: UNKNOWN_TOPIC_OR_PARTITION
    for no such partition, NOT_LEADER_OR_FOLLOWER when this broker holds no replica of it."""
    if topic is None or not 0 <= index < len(topic.partitions):
        return None, _UNKNOWN_TOPIC_OR_PARTITION
    partition = topic.partitions[index]
    return (partition, _NONE) if partition is not None else (None, _NOT_LEADER_OR_FOLLOWER)


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
    sent, but the connection is still not read for the throttle time of the request's
    usage (KIP-219)."""
