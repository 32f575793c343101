"""ElectLeaders (key 43), versions 0-2: move partitions' leadership to their preferred
replica (election type 0; the only type in v0) or, for partitions with no live leader, to
any live replica (type 1, unclean: records the old leader held beyond it may be lost).
Needs ALTER on the cluster. Alone, the broker leads every partition it is preferred for,
so every election answers ELECTION_NOT_NEEDED. See :mod:`brokkr.core.controller`."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..controller import PREFERRED, UNCLEAN, elect
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 43
_R = response_spec(KEY)
ElectLeadersResponse = _R.cls
ReplicaElectionResult = _R.struct("ReplicaElectionResult")
PartitionResult = _R.struct("PartitionResult")


async def handle(broker, ctx, request):
    election_type = request.election_type if ctx.api_version >= 1 else PREFERRED
    if election_type not in (PREFERRED, UNCLEAN):
        return error_response(request, ErrorCode.INVALID_REQUEST)
    if not broker.authorize(ctx, [Action(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.topic_partitions is None:  # every partition
        wanted = [(name, list(range(len(t.partitions)))) for name, t in sorted(broker.topics.items())]
    else:
        wanted = [(tp.topic, tp.partitions) for tp in request.topic_partitions]
    results = []
    for name, partitions in wanted:
        out = []
        for index in partitions:
            code, message = await _elect_one(broker, election_type, name, index)
            if request.topic_partitions is None and code == ErrorCode.ELECTION_NOT_NEEDED:
                continue  # as Kafka: an all-partitions election reports only what it did or could not do
            out.append(PartitionResult(partition_id=index, error_code=code, error_message=message))
        if out or request.topic_partitions is not None:
            results.append(ReplicaElectionResult(topic=name, partition_result=out))
    return ElectLeadersResponse(error_code=ErrorCode.NONE, replica_election_results=results)


async def _elect_one(broker, election_type: int, name: str, index: int) -> tuple[ErrorCode, str | None]:
    topic = broker.topics.get(name)
    if topic is None or not 0 <= index < len(topic.partitions):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The partition {name}-{index} does not exist."
    if broker.replicas is None:
        return ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
    m = broker.replicas.membership
    replicas = m.topics()[name].replicas[index]
    state = m.partition_state(name, index)
    if state is None:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    new, code = elect(election_type, replicas, state, set(m.brokers()), m.controller_epoch)
    if new is None:
        return code, None
    if await m.write_partition_state(name, index, new) is None:  # the state moved meanwhile
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, "The partition's state changed during the election."
    return ErrorCode.NONE, None


def error_response(request, code):
    return ElectLeadersResponse(
        error_code=code,
        replica_election_results=[
            ReplicaElectionResult(
                topic=tp.topic,
                partition_result=[PartitionResult(partition_id=p, error_code=code) for p in tp.partitions],
            )
            for tp in request.topic_partitions or []
        ],
    )


API = Api(KEY, 0, 2, handle, error_response)
