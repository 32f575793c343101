"""TxnOffsetCommit (key 28), versions 0-5: a transactional producer's offsets for a group
(``send_offsets_to_transaction``), written to ``__consumer_offsets`` in the producer's
transaction. They count once the transaction commits (its COMMIT marker on the group's
partition) and never if it aborts; meanwhile OffsetFetch with ``require_stable`` answers
UNSTABLE_OFFSET_COMMIT for them.

Needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED), READ on
the group (else GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED);
unknown partitions answer UNKNOWN_TOPIC_OR_PARTITION. From v3 a group member's commit
carries its generation and member id, checked as OffsetCommit checks them (KIP-447); a
commit without them (generation -1, no member id) is not checked against the group. A stale
producer epoch answers INVALID_PRODUCER_EPOCH (the partition's producer state refuses it).
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from .. import coordinator_of
from . import group_allowed
from .offset_commit import offsets_to_commit

KEY = 28
_R = response_spec(KEY)
TxnOffsetCommitResponse = _R.cls
ResponseTopic = _R.struct("TxnOffsetCommitResponseTopic")
ResponsePartition = _R.struct("TxnOffsetCommitResponsePartition")


async def handle(broker, ctx, request):
    txn_action = Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    if not broker.authorize(ctx, [txn_action])[0]:
        return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not group_allowed(broker, ctx, AclOperation.READ, [request.group_id])[0]:
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = coordinator_of(broker)
    error = coordinator.check_coordinator(request.group_id)
    if error:
        return error_response(request, error)
    errors, offsets = offsets_to_commit(broker, ctx, coordinator, request.topics)
    error = ErrorCode.NONE
    if ctx.api_version >= 3 and (request.member_id or request.generation_id >= 0):
        error = coordinator.offsets.validate_commit(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id
        )
    if not error and offsets:
        error = await coordinator.offsets.commit_transactional(
            request.group_id, request.producer_id, request.producer_epoch, offsets
        )
    errors.update(dict.fromkeys(offsets, error))
    return _response(request, lambda t, p: errors[(t, p)])


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


API = Api(KEY, 0, 5, handle, error_response)
