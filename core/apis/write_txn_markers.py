"""WriteTxnMarkers (key 27), version 1 (Kafka 4.1's; v2, KIP-1228, came with 4.2): a
transaction coordinator on another broker asks this one, the leader of some of a
transaction's partitions, to write its COMMIT or ABORT marker there (Kafka's
``KafkaApis.handleWriteTxnMarkersRequest``).

Inter-broker only: CLUSTER_ACTION on the cluster, else every partition answers
CLUSTER_AUTHORIZATION_FAILED. Each marker is :func:`brokkr.core.txn_markers.write_txn_markers`
(the function a coordinator on this broker calls directly); the markers of one request
are appended in request order, then their replication is awaited together.
"""

from __future__ import annotations

import asyncio

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..txn_markers import TxnMarker, write_txn_markers
from . import Api

KEY = 27
_R = response_spec(KEY)
WriteTxnMarkersResponse = _R.cls
MarkerResult = _R.struct("WritableTxnMarkerResult")
TopicResult = _R.struct("WritableTxnMarkerTopicResult")
PartitionResult = _R.struct("WritableTxnMarkerPartitionResult")


def _response(request, codes) -> WriteTxnMarkersResponse:
    """The response in request order; ``codes(i, topic, partition)`` gives each code."""
    return WriteTxnMarkersResponse(
        markers=[
            MarkerResult(
                producer_id=m.producer_id,
                topics=[
                    TopicResult(
                        name=t.name,
                        partitions=[
                            PartitionResult(partition_index=p, error_code=codes(i, t.name, p))
                            for p in t.partition_indexes
                        ],
                    )
                    for t in m.topics
                ],
            )
            for i, m in enumerate(request.markers)
        ]
    )


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    markers = [
        TxnMarker(
            m.producer_id,
            m.producer_epoch,
            m.transaction_result,
            m.coordinator_epoch,
            tuple((t.name, p) for t in m.topics for p in t.partition_indexes),
        )
        for m in request.markers
    ]
    results = await asyncio.gather(*(write_txn_markers(broker, m) for m in markers))
    return _response(request, lambda i, topic, p: results[i][(topic, p)])


def error_response(request, code):
    return _response(request, lambda i, topic, p: code)


API = Api(KEY, 1, 1, handle, error_response)
