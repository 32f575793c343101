"""The group coordinator's Kafka APIs, one module per API (as core's own), each defining
``API``. Group ids are authorized as Kafka's KafkaApis authorizes them: READ to join,
sync, heartbeat (either protocol), leave and commit; DESCRIBE to find the coordinator,
fetch offsets, describe (either protocol) and list; DELETE to delete."""

from __future__ import annotations

from brokkr.core.authorization import AclOperation, Action, ResourceType

MODULES = (
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "txn_offset_commit",
    "offset_delete",
    "list_groups",
    "describe_groups",
    "delete_groups",
)
#: The consumer group protocol's APIs (KIP-848), served while
#: ``group.coordinator.rebalance.protocols`` names "consumer".
CONSUMER_MODULES = ("consumer_group_heartbeat", "consumer_group_describe")
#: The share groups' APIs (KIP-932): membership and the share-group offset admin APIs.
SHARE_MODULES = (
    "share_group_heartbeat",
    "share_group_describe",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
)


def group_allowed(broker, ctx, operation: AclOperation, group_ids: list[str]) -> list[bool]:
    """Whether ``operation`` is allowed on each group (one authorizer call for all)."""
    return broker.authorize(ctx, [Action(operation, ResourceType.GROUP, g) for g in group_ids])
