"""The share plugin's Kafka APIs, one module per API, each defining ``API``: ShareFetch and
ShareAcknowledge (consumers; GROUP READ on the group, TOPIC READ on each topic, as Kafka's
KafkaApis authorizes them) and the share-state requests brokers send the share coordinator
(CLUSTER_ACTION on the cluster)."""

from __future__ import annotations

from brokkr.core.apis.common import partition_of
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode

MODULES = (
    "share_fetch",
    "share_acknowledge",
    "initialize_share_group_state",
    "read_share_group_state",
    "write_share_group_state",
    "delete_share_group_state",
    "read_share_group_state_summary",
)
#: The highest acknowledge type: Renew (4) from version 2 (KIP-1222), Reject (3) before.
MAX_ACK_TYPE = {1: 3, 2: 4}


def member_id_valid(member_id: str | None) -> bool:
    """Kafka's KafkaApis.isMemberIdValid."""
    return bool(member_id) and len(member_id) <= 36


def refusal(broker, ctx, request) -> ErrorCode | None:
    """What ShareFetch and ShareAcknowledge answer before their session is looked at (Kafka's
    order): INVALID_REQUEST without a group id, GROUP_AUTHORIZATION_FAILED without READ on
    the group, INVALID_REQUEST for a member id that is not valid; None when none applies."""
    if request.group_id is None:
        return ErrorCode.INVALID_REQUEST
    if not broker.authorize(ctx, [Action(AclOperation.READ, ResourceType.GROUP, request.group_id)])[0]:
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if not member_id_valid(request.member_id):
        return ErrorCode.INVALID_REQUEST
    return None


def check_ack_batches(batches, version: int, is_renew_ack: bool) -> ErrorCode:
    """Kafka's validateAcknowledgementBatches: increasing, non-overlapping batches, one
    type or one per offset, each a known type (Renew only in a renew request)."""
    previous_end = -1
    for b in batches:
        types = b.acknowledge_types
        if b.first_offset > b.last_offset or b.first_offset < previous_end or not types:
            return ErrorCode.INVALID_REQUEST
        if len(types) > 1 and b.last_offset - b.first_offset != len(types) - 1:
            return ErrorCode.INVALID_REQUEST
        if any(t < 0 or t > MAX_ACK_TYPE.get(version, 4) for t in types):
            return ErrorCode.INVALID_REQUEST
        if 4 in types and not is_renew_ack:
            return ErrorCode.INVALID_REQUEST
        previous_end = b.last_offset
    return ErrorCode.NONE


def share_partition_of(broker, manager, group_id: str, topic, index: int, create: bool = True):
    """(share partition, error) for one partition of a share fetch or acknowledge; without
    ``create`` (acknowledgements, as Kafka's SharePartitionManager.acknowledge) one no fetch
    made is UNKNOWN_TOPIC_OR_PARTITION."""
    partition, error = partition_of(topic, index)
    if error:
        return None, error
    if partition.deleted:
        manager.drop_partition(partition)
        return None, ErrorCode.UNKNOWN_TOPIC_ID
    sp = manager.share_partition(group_id, partition) if create else manager.existing(group_id, partition)
    return sp, ErrorCode.NONE if sp is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def acknowledge(broker, manager, group_id: str, member_id: str, topic, index: int, batches) -> ErrorCode:
    """Apply one partition's acknowledgements and write its state before answering; when
    the write fails they are undone (nothing is answered acknowledged that is not durable)."""
    sp, error = share_partition_of(broker, manager, group_id, topic, index, create=False)
    if error:
        return error
    error = await sp.ready()
    if error:
        return error
    error, undo = sp.acknowledge(member_id, batches)
    if error or not undo.changed:
        return error  # renewed locks and offsets already done: nothing to write (Kafka's too)
    error = await sp.persist()
    if error:
        sp.rollback(undo)
    else:
        sp.commit(undo)
    return error
