"""The transaction coordinator's Kafka APIs, one module per API, each defining ``API``.
Transactional ids are authorized as Kafka's KafkaApis authorizes them: WRITE to start a
producer, add partitions or offsets, and end a transaction; DESCRIBE to describe and list
(FindCoordinator's DESCRIBE is checked in :mod:`brokkr.plugins.groups.apis.find_coordinator`)."""

from __future__ import annotations

from brokkr.core.authorization import AclOperation, Action, ResourceType

MODULES = (
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "describe_transactions",
    "list_transactions",
)


def txn_allowed(broker, ctx, operation: AclOperation, transactional_ids: list[str]) -> list[bool]:
    """Whether ``operation`` is allowed on each transactional id (one authorizer call for all)."""
    return broker.authorize(ctx, [Action(operation, ResourceType.TRANSACTIONAL_ID, t) for t in transactional_ids])


def coordinator(broker):
    from .. import transaction_coordinator_of

    return transaction_coordinator_of(broker)
