"""ListPartitionReassignments (key 46), version 0 (KIP-455): the reassignments under way,
for every partition or those named, with their replicas, adding and removing replicas.
Needs DESCRIBE on the cluster."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 46
_R = response_spec(KEY)
ListPartitionReassignmentsResponse = _R.cls
OngoingTopicReassignment = _R.struct("OngoingTopicReassignment")
OngoingPartitionReassignment = _R.struct("OngoingPartitionReassignment")


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    topics = broker.replicas.membership.topics() if broker.replicas is not None else {}
    wanted = None if request.topics is None else {t.name: set(t.partition_indexes) for t in request.topics}
    out = []
    for name, assignment in sorted(topics.items()):
        moving = sorted(set(assignment.adding) | set(assignment.removing))
        if wanted is not None:
            moving = [p for p in moving if p in wanted.get(name, ())]
        if moving:
            out.append(
                OngoingTopicReassignment(
                    name=name,
                    partitions=[
                        OngoingPartitionReassignment(
                            partition_index=p,
                            replicas=list(assignment.replicas[p]),
                            adding_replicas=list(assignment.adding.get(p, ())),
                            removing_replicas=list(assignment.removing.get(p, ())),
                        )
                        for p in moving
                    ],
                )
            )
    return ListPartitionReassignmentsResponse(error_code=ErrorCode.NONE, topics=out)


def error_response(request, code):
    return ListPartitionReassignmentsResponse(error_code=code, error_message=None, topics=[])


API = Api(KEY, 0, 0, handle, error_response)
