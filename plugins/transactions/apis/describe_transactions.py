"""DescribeTransactions (key 65), version 0: each transactional id's state, producer id and
epoch, timeout, start time and partitions. DESCRIBE on the id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an id this broker does not coordinate answers
NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS), an unknown one TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..metadata import TxnState
from . import coordinator, txn_allowed

KEY = 65
_R = response_spec(KEY)
DescribeTransactionsResponse = _R.cls
TransactionState = _R.struct("TransactionState")
TopicData = _R.struct("TopicData")


def _failed(txn_id: str, code: int):
    return TransactionState(
        error_code=code,
        transactional_id=txn_id,
        transaction_state="",
        transaction_timeout_ms=0,
        transaction_start_time_ms=-1,
        producer_id=-1,
        producer_epoch=-1,
        topics=[],
    )


def _describe(txns, txn_id: str):
    error = txns.check_coordinator(txn_id)
    meta = txns.txns.get(txn_id)
    if error:
        return _failed(txn_id, error)
    if meta is None or meta.state == TxnState.DEAD:
        return _failed(txn_id, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(meta.partitions):
        topics.setdefault(topic, []).append(index)
    return TransactionState(
        error_code=ErrorCode.NONE,
        transactional_id=txn_id,
        transaction_state=meta.state.kafka_name,
        transaction_timeout_ms=meta.timeout_ms,
        transaction_start_time_ms=meta.start_ms,
        producer_id=meta.producer_id,
        producer_epoch=meta.producer_epoch,
        topics=[TopicData(topic=t, partitions=ps) for t, ps in topics.items()],
    )


async def handle(broker, ctx, request):
    ids = list(request.transactional_ids or ())
    allowed = txn_allowed(broker, ctx, AclOperation.DESCRIBE, ids)
    txns = coordinator(broker)
    return DescribeTransactionsResponse(
        transaction_states=[
            _describe(txns, t) if ok else _failed(t, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for t, ok in zip(ids, allowed, strict=True)
        ]
    )


def error_response(request, code):
    return DescribeTransactionsResponse(transaction_states=[_failed(t, code) for t in request.transactional_ids or ()])


API = Api(KEY, 0, 0, handle, error_response)
