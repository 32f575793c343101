"""DescribeQuorum (key 55), versions 0-2: the metadata quorum, as Kafka's controllers answer
it for the partition ``__cluster_metadata``-0 (``kafka-metadata-quorum describe``).

brokkr has no KRaft quorum and no metadata log: its cluster's state lives in the cluster
membership (ZooKeeper, :mod:`brokkr.core.cluster`), which elects the controller. So the
answer is the membership's own, and claims nothing it does not hold:

- the leader is the controller (alone: this broker), its epoch the controller epoch
  (alone: 0);
- the voters are the live brokers, every one of which the membership may elect
  controller (a KRaft controller quorum's voters are those that may lead); there are no
  observers;
- the high watermark and every log end offset are 0, as the metadata log is empty: there
  is none. The leader's fetch and caught-up times are now, the others' unknown (-1), and
  directory ids unknown (zero), as Kafka reports what its leader has not seen;
- v2's nodes are the voters with the listener the client is connected on.

Needs DESCRIBE on the cluster (else a top-level CLUSTER_AUTHORIZATION_FAILED). Any request
but exactly ``__cluster_metadata`` partition 0 answers UNKNOWN_TOPIC_OR_PARTITION for each
partition it names; while no controller is elected, NOT_LEADER_OR_FOLLOWER (Kafka's
KafkaRaftClient.handleDescribeQuorumRequest). Every broker answers alike: the membership
is the same on all of them, where Kafka's brokers forward the request to the controller.
"""

from __future__ import annotations

import time
import uuid

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..partition import CLUSTER_METADATA_TOPIC
from ..protocol.frames import response_spec
from . import Api
from .common import cluster_brokers

KEY = 55
_R = response_spec(KEY)
DescribeQuorumResponse = _R.cls
TopicData = _R.struct("TopicData")
PartitionData = _R.struct("PartitionData")
ReplicaState = _R.struct("ReplicaState")
Node = _R.struct("Node")
Listener = _R.struct("Listener")
#: Kafka's default messages of the errors answered (Errors.message()).
MESSAGES = {
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "For requests intended only for the leader, this error indicates that the "
    "broker is not the current leader. For requests intended for any replica, this error indicates that the broker "
    "is not a replica of the topic partition.",
}


def _controller(broker) -> tuple[int, int]:
    """The controller's id (-1 while none is elected) and its epoch."""
    if broker.replicas is None:
        return broker.node_id, 0
    m = broker.replicas.membership
    return (m.controller_id if m.controller_id is not None else -1), m.controller_epoch


def _partition_errors(request, code: ErrorCode) -> DescribeQuorumResponse:
    return DescribeQuorumResponse(
        error_code=ErrorCode.NONE,
        topics=[
            TopicData(
                topic_name=t.topic_name,
                partitions=[
                    PartitionData(partition_index=p.partition_index, error_code=code, error_message=MESSAGES[code])
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    topics = request.topics
    if not (
        len(topics) == 1
        and topics[0].topic_name == CLUSTER_METADATA_TOPIC
        and [p.partition_index for p in topics[0].partitions] == [0]
    ):
        return _partition_errors(request, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    leader, epoch = _controller(broker)
    if leader < 0:
        return _partition_errors(request, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    brokers, _ = cluster_brokers(broker, ctx.listener)
    now = int(time.time() * 1000)
    voters = [
        ReplicaState(
            replica_id=node,
            replica_directory_id=uuid.UUID(int=0),
            log_end_offset=0,
            last_fetch_timestamp=now if node == leader else -1,
            last_caught_up_timestamp=now if node == leader else -1,
        )
        for node, _, _, _ in brokers
    ]
    partition = PartitionData(
        partition_index=0,
        error_code=ErrorCode.NONE,
        leader_id=leader,
        leader_epoch=epoch,
        high_watermark=0,
        current_voters=voters,
        observers=[],
    )
    return DescribeQuorumResponse(
        error_code=ErrorCode.NONE,
        topics=[TopicData(topic_name=CLUSTER_METADATA_TOPIC, partitions=[partition])],
        nodes=[Node(node_id=n, listeners=[Listener(name=ctx.listener, host=h, port=p)]) for n, h, p, _ in brokers],
    )


def error_response(request, code):
    return DescribeQuorumResponse(error_code=code, error_message=MESSAGES.get(code), topics=[])


API = Api(KEY, 0, 2, handle, error_response)
