"""AddPartitionsToTxn (key 24), versions 0-5 (Kafka's KafkaApis.handleAddPartitionsToTransactionRequest).

v0-3 (producers): one transaction; the partitions join the producer's transaction (starting
it). It needs WRITE on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
every partition) and WRITE on each topic: a denied topic answers TOPIC_AUTHORIZATION_FAILED,
a topic or partition that does not exist UNKNOWN_TOPIC_OR_PARTITION, and the other
partitions OPERATION_NOT_ATTEMPTED. Then the coordinator's answer for all: NONE,
INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2),
CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, ...

v4-5 (brokers, KIP-890): several transactions per request, needing CLUSTER_ACTION (else a
top-level CLUSTER_AUTHORIZATION_FAILED); with ``verify_only`` a transaction is only checked
(NONE for a partition in its ongoing transaction, else INVALID_TXN_STATE), without it
added as in v0-3.
"""

from __future__ import annotations

import asyncio

from brokkr.core.apis import Api
from brokkr.core.apis.common import partition_leader
from brokkr.core.authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..errors import for_version
from . import coordinator

KEY = 24
_R = response_spec(KEY)
AddPartitionsToTxnResponse = _R.cls
TopicResult = _R.struct("AddPartitionsToTxnTopicResult")
PartitionResult = _R.struct("AddPartitionsToTxnPartitionResult")
TxnResult = _R.struct("AddPartitionsToTxnResult")


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t.name, p) for t in topics or () for p in t.partitions or ()]


def _topic_results(results: dict[tuple[str, int], int]) -> list:
    by_topic: dict[str, list] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append(PartitionResult(partition_index=index, partition_error_code=code))
    return [TopicResult(name=t, results_by_partition=ps) for t, ps in by_topic.items()]


async def _one(broker, ctx, txn_id: str, producer_id: int, epoch: int, topics, verify_only: bool, version: int):
    """The result of each partition of one transaction."""
    partitions = _partitions(topics)
    if not partitions:
        return {}
    # The transactional id and the topics in one authorizer call (a producer sends one a transaction).
    names = sorted({t for t, _ in partitions})
    answers = broker.authorize(
        ctx,
        [Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)]
        + [Action(AclOperation.WRITE, ResourceType.TOPIC, t) for t in names],
    )
    if not answers[0]:
        return dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    allowed = dict(zip(names, answers[1:]))
    failed: dict[tuple[str, int], int] = {}
    for topic, index in partitions:
        if not allowed[topic]:
            failed[(topic, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif partition_leader(broker, topic, index) is None:
            failed[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return {tp: failed.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in partitions}
    txns = coordinator(broker)
    if verify_only:
        return txns.verify(txn_id, producer_id, epoch, partitions)
    error = await txns.add_partitions(txn_id, producer_id, epoch, set(partitions))
    return dict.fromkeys(partitions, for_version(error, version, 2))


async def handle(broker, ctx, request):
    version = ctx.api_version
    if version < 4:
        results = await _one(
            broker,
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
            version,
        )
        return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=_topic_results(results))
    if not broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    answers = await asyncio.gather(
        *(
            _one(broker, ctx, t.transactional_id, t.producer_id, t.producer_epoch, t.topics, t.verify_only, version)
            for t in request.transactions
        )
    )
    return AddPartitionsToTxnResponse(
        results_by_transaction=[
            TxnResult(transactional_id=t.transactional_id, topic_results=_topic_results(results))
            for t, results in zip(request.transactions, answers, strict=True)
        ]
    )


def error_response(request, code):
    if request.transactions:
        return AddPartitionsToTxnResponse(error_code=code)
    return AddPartitionsToTxnResponse(
        error_code=code,
        results_by_topic_v3_and_below=_topic_results(dict.fromkeys(_partitions(request.v3_and_below_topics), code)),
    )


API = Api(KEY, 0, 5, handle, error_response)
