"""FindCoordinator (key 10), versions 0-6 (Kafka's KafkaApis.handleFindCoordinatorRequest):
the node coordinating a group (key type 0) or a transactional id (key type 1); from v4
several keys per request, each answered on its own.

A group needs DESCRIBE on it (else GROUP_AUTHORIZATION_FAILED); its coordinator is the
leader of its ``__consumer_offsets`` partition, this node. While that topic does not exist,
the lookup creates it and answers COORDINATOR_NOT_AVAILABLE (the client retries). On a cluster,
the coordinator is that partition's leader, wherever it is. A transactional id needs
DESCRIBE on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED); its coordinator is the leader
of its ``__transaction_state`` partition, found the same way through the transaction
coordinator (:mod:`brokkr.plugins.transactions`; with that plugin blocked the answer is
COORDINATOR_NOT_AVAILABLE). A share partition (key type 2, v6) needs CLUSTER_ACTION (brokers
ask) and is coordinated by the leader of its ``__share_group_state`` partition
(:mod:`brokkr.plugins.share`). Other key types answer INVALID_REQUEST.
"""

from __future__ import annotations

import base64

from brokkr.core.apis import Api
from brokkr.core.authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.listeners import advertised_listener
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of

KEY = 10
GROUP, TRANSACTION, SHARE = 0, 1, 2
SHARE_VERSION = 6  # key type 2 (a share partition, KIP-932) from v6
_R = response_spec(KEY)
FindCoordinatorResponse = _R.cls
Coordinator = _R.struct("Coordinator")


def _answers(broker, ctx, key_type: int, keys: list[str]) -> list:
    """One Coordinator per key, in order (one authorizer call for all keys)."""
    if key_type == SHARE and ctx.api_version >= SHARE_VERSION:
        return _share_answers(broker, ctx, keys)
    if key_type not in (GROUP, TRANSACTION):
        return [_failed(key, ErrorCode.INVALID_REQUEST) for key in keys]
    resource, denied = (
        (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        if key_type == GROUP
        else (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    )
    allowed = broker.authorize(ctx, [Action(AclOperation.DESCRIBE, resource, key) for key in keys])
    coordinator = coordinator_of(broker) if key_type == GROUP else _transaction_coordinator(broker)
    missing = coordinator is None or (any(allowed) and coordinator.topic not in broker.topics)
    if missing and coordinator is not None:
        coordinator.create_topic()
    answers = []
    for key, ok in zip(keys, allowed, strict=True):
        if not ok:
            answers.append(_failed(key, denied))
        elif missing:
            answers.append(_failed(key, ErrorCode.COORDINATOR_NOT_AVAILABLE))
        else:
            answers.append(_leader_of(broker, ctx, key, coordinator.topic, coordinator.partition_for(key)))
    return answers


def _share_answers(broker, ctx, keys: list[str]) -> list:
    """Share-partition keys ("group:topic id:partition"): CLUSTER_ACTION, as brokers ask
    (else CLUSTER_AUTHORIZATION_FAILED); the leader of the key's ``__share_group_state``
    partition, created on first use (:mod:`brokkr.plugins.share`)."""
    try:
        from brokkr.plugins.share import share_coordinator_of
    except ImportError:
        coordinator = None
    else:
        coordinator = share_coordinator_of(broker)
    allowed = broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]
    if not allowed:
        return [_failed(key, ErrorCode.CLUSTER_AUTHORIZATION_FAILED) for key in keys]
    if coordinator is not None and coordinator.topic not in broker.topics:
        coordinator.create_topic()
        coordinator = None
    if coordinator is None:
        return [_failed(key, ErrorCode.COORDINATOR_NOT_AVAILABLE) for key in keys]
    return [
        _leader_of(broker, ctx, key, coordinator.topic, coordinator.partition_for(key))
        if _share_key_valid(key)
        else _failed(key, ErrorCode.INVALID_REQUEST)
        for key in keys
    ]


def _share_key_valid(key: str) -> bool:
    """Kafka's SharePartitionKey.validate: "<group>:<topic id>:<partition>"."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0] or not parts[2].isdigit():
        return False
    try:
        return len(base64.urlsafe_b64decode(parts[1] + "==")) == 16
    except ValueError:
        return False


def _transaction_coordinator(broker):
    """The transaction coordinator, or None when its plugin is blocked."""
    try:
        from brokkr.plugins.transactions import transaction_coordinator_of
    except ImportError:
        return None
    return transaction_coordinator_of(broker)


def _leader_of(broker, ctx, key: str, topic: str, index: int) -> Coordinator:
    """The leader of the key's internal topic partition, as the client reaches it."""
    if broker.replicas is None:
        listener = advertised_listener(broker.listeners, broker.config, ctx.listener)
        return Coordinator(key=key, node_id=broker.node_id, host=listener.host, port=listener.port, error_code=0)
    membership = broker.replicas.membership
    state = membership.partition_state(topic, index)
    leader = membership.brokers().get(state.leader) if state is not None else None
    if leader is None:
        return _failed(key, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    host, port = leader.endpoint(ctx.listener)
    return Coordinator(key=key, node_id=leader.node_id, host=host, port=port, error_code=0)


def _failed(key: str, code: ErrorCode) -> Coordinator:
    return Coordinator(key=key, node_id=-1, host="", port=-1, error_code=code)


async def handle(broker, ctx, request):
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(coordinators=_answers(broker, ctx, request.key_type, request.coordinator_keys))
    (answer,) = _answers(broker, ctx, request.key_type, [request.key])
    return FindCoordinatorResponse(
        error_code=answer.error_code, node_id=answer.node_id, host=answer.host, port=answer.port
    )


def error_response(request, code):
    keys = request.coordinator_keys or []
    return FindCoordinatorResponse(
        error_code=code, node_id=-1, host="", port=-1, coordinators=[_failed(key, code) for key in keys]
    )


API = Api(KEY, 0, 6, handle, error_response)
