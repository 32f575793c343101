"""AddOffsetsToTxn (key 25), versions 0-4: the group's ``__consumer_offsets`` partition joins
the producer's transaction, so its TxnOffsetCommit is committed or aborted with it. Needs
WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and READ on the
group (else GROUP_AUTHORIZATION_FAILED); then the coordinator answers as for
AddPartitionsToTxn (PRODUCER_FENCED as INVALID_PRODUCER_EPOCH before v2).
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ...coordinator_partitions import partition_for
from ..errors import for_version
from . import coordinator, txn_allowed

KEY = 25
AddOffsetsToTxnResponse = response_spec(KEY).cls
OFFSETS_TOPIC = "__consumer_offsets"


async def handle(broker, ctx, request):
    if not txn_allowed(broker, ctx, AclOperation.WRITE, [request.transactional_id])[0]:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not broker.authorize(ctx, [Action(AclOperation.READ, ResourceType.GROUP, request.group_id)])[0]:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    topic = broker.topics.get(OFFSETS_TOPIC)
    num_partitions = len(topic.partitions) if topic is not None else broker.config["offsets.topic.num.partitions"]
    partition = (OFFSETS_TOPIC, partition_for(request.group_id, num_partitions))
    error = await coordinator(broker).add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch, {partition}
    )
    return AddOffsetsToTxnResponse(error_code=for_version(error, ctx.api_version, 2))


def error_response(request, code):
    return AddOffsetsToTxnResponse(error_code=code)


API = Api(KEY, 0, 4, handle, error_response)
