"""TxnOffsetCommit (key 28), versions 0-4 (v5, KIP-890 part 2's implicit AddOffsetsToTxn,
is not served): a transactional producer's offsets for a group
(``send_offsets_to_transaction``), written to ``__consumer_offsets`` in the producer's
transaction. They count once the transaction commits (its COMMIT marker on the group's
partition) and never if it aborts; meanwhile OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for them.

Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on
the group (else GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED);
unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION. From v3 a group member's commit
carries its generation and member id, checked as OffsetCommit checks them (KIP-447); a
commit without them (generation -1, no member id) is not checked against the group, unless
it is a share group (GROUP_ID_NOT_FOUND, as Kafka's ShareGroup.validateOffsetCommit). A stale
producer epoch answers INVALID_PRODUCER_EPOCH (the partition's producer state refuses it).

KIP-890 part 1: a commit that would start the producer's transaction on the group's
partition is first verified with ``brokkr_transaction_verify`` (AddOffsetsToTxn must have
added the partition): INVALID_TXN_STATE if not, COORDINATOR_NOT_AVAILABLE (retriable) when
the transaction coordinator cannot tell now.
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from ..share_group import ShareGroup
from .offset_commit import authorize_commit, offsets_to_commit

KEY = 28
_R = response_spec(KEY)
TxnOffsetCommitResponse = _R.cls
ResponseTopic = _R.struct("TxnOffsetCommitResponseTopic")
ResponsePartition = _R.struct("TxnOffsetCommitResponsePartition")


async def handle(broker, ctx, request):
    txn_action = Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    group_action = Action(AclOperation.READ, ResourceType.GROUP, request.group_id)
    (txn_ok, group_ok), allowed = authorize_commit(broker, ctx, [txn_action, group_action], request.topics)
    if not txn_ok:
        return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not group_ok:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(request.group_id)
    if error:
        return error_response(request, error)
    errors, offsets = offsets_to_commit(broker, ctx, coordinator, request.topics, allowed=allowed)
    error = ErrorCode.NONE
    member_commit = ctx.api_version >= 3 and (request.member_id or request.generation_id >= 0)
    if member_commit or isinstance(coordinator.groups.get(request.group_id), ShareGroup):  # it takes no commits
        error = coordinator.offsets.validate_commit(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id
        )
    if error:  # Kafka checks the group before each partition's metadata
        errors.update({tp: error for tp, e in errors.items() if e == ErrorCode.OFFSET_METADATA_TOO_LARGE})
    if not error and offsets:
        error = await _verify(broker, coordinator, request)
    if not error and offsets:
        error = await coordinator.offsets.commit_transactional(
            request.group_id, request.producer_id, request.producer_epoch, offsets
        )
    errors.update(dict.fromkeys(offsets, error))
    return _response(request, lambda t, p: errors[(t, p)])


#: Transaction coordinator answers that mean "not now" (the client retries COORDINATOR_NOT_AVAILABLE).
_RETRIABLE = {
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_ENOUGH_REPLICAS,
}


async def _verify(broker, coordinator, request) -> ErrorCode:
    index = coordinator.partition_for(request.group_id)
    partition = broker.partition(coordinator.topic, index)
    if partition is None:
        return ErrorCode.NOT_COORDINATOR
    entry = partition.producers.producers.get(request.producer_id)
    if entry is not None and (
        entry.producer_epoch > request.producer_epoch
        or (entry.producer_epoch == request.producer_epoch and entry.current_txn_first_offset >= 0)
    ):
        return ErrorCode.NONE  # fenced (the append refuses it) or its transaction is open here already
    answer = broker.hook.brokkr_transaction_verify(
        transactional_id=request.transactional_id,
        producer_id=request.producer_id,
        producer_epoch=request.producer_epoch,
        partitions=[(coordinator.topic, index)],
        broker=broker,
        produce_version=-1,  # not a Produce request: verify only (TxnOffsetCommit v5's implicit add is KIP-890 part 2)
    )
    if answer is None:
        return ErrorCode.NONE
    code = (await answer).get((coordinator.topic, index), ErrorCode.INVALID_TXN_STATE)
    return ErrorCode.COORDINATOR_NOT_AVAILABLE if code in _RETRIABLE else code


def _response(request, error_of) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            ResponseTopic(
                name=t.name,
                partitions=[
                    ResponsePartition(partition_index=p.partition_index, error_code=error_of(t.name, p.partition_index))
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def error_response(request, code):
    return _response(request, lambda t, p: code)


API = Api(KEY, 0, 4, handle, error_response)
