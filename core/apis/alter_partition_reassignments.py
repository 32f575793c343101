"""AlterPartitionReassignments (key 45), versions 0-1 (KIP-455): move partitions to new
replicas, or cancel a move (null replicas). The new replicas fetch until they are in sync;
the controller then drops the leaving ones (moving the leader first if it leaves).
ListPartitionReassignments shows the moves under way. Needs ALTER on the cluster. Alone,
a partition can only be "moved" to the broker itself, which changes nothing."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 45
_R = response_spec(KEY)
AlterPartitionReassignmentsResponse = _R.cls
ReassignableTopicResponse = _R.struct("ReassignableTopicResponse")
ReassignablePartitionResponse = _R.struct("ReassignablePartitionResponse")


async def _reassign(broker, name: str, index: int, replicas, allow_rf_change: bool) -> None:
    topic = broker.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        raise BrokkrError(f"Topic partition {name}-{index} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    target = None if replicas is None else tuple(replicas)
    if broker.replicas is None:
        if target is None:
            raise BrokkrError(f"No reassignment in progress for {name}-{index}.", ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
        if target != (broker.node_id,):
            raise BrokkrError(
                f"The replica assignment {list(target)} names brokers other than the one registered ({broker.node_id})",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
        return
    current = broker.replicas.membership.topics()[name]
    if target is not None and not allow_rf_change and len(target) != len(current.original(index)):
        raise BrokkrError(
            f"The replication factor is changed from {len(current.original(index))} to {len(target)}",
            ErrorCode.INVALID_REPLICATION_FACTOR,
        )
    await broker.replicas.reassign(name, index, target)


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    allow_rf_change = request.allow_replication_factor_change if ctx.api_version >= 1 else True
    responses = []
    for t in request.topics:
        partitions = []
        for p in t.partitions:
            code, message = ErrorCode.NONE, None
            try:
                await _reassign(broker, t.name, p.partition_index, p.replicas, allow_rf_change)
            except BrokkrError as exc:
                code, message = exc.code, str(exc)
            partitions.append(
                ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=message)
            )
        responses.append(ReassignableTopicResponse(name=t.name, partitions=partitions))
    return AlterPartitionReassignmentsResponse(error_code=ErrorCode.NONE, responses=responses)


def error_response(request, code):
    return AlterPartitionReassignmentsResponse(error_code=code, error_message=None, responses=[])


API = Api(KEY, 0, 1, handle, error_response)
