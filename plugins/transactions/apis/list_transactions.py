"""ListTransactions (key 66), versions 0-2: the transactional ids this broker coordinates,
filtered by state names (unknown names are echoed in ``unknown_state_filters``), producer
ids, and (v1+) ``duration_filter``: only transactions started more than that many ms ago (as Kafka, by
the start time the id keeps after its transaction completed).
Ids the principal may not DESCRIBE are left out; COORDINATOR_LOAD_IN_PROGRESS while a
partition loads. v2's ``transactional_id_pattern`` (KIP-1152) is not served: a request
with one answers INVALID_REQUEST.
"""

from __future__ import annotations

import time

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..metadata import TxnState
from . import coordinator, txn_allowed

KEY = 66
_R = response_spec(KEY)
ListTransactionsResponse = _R.cls
TransactionState = _R.struct("TransactionState")


async def handle(broker, ctx, request):
    if ctx.api_version >= 2 and request.transactional_id_pattern:
        return ListTransactionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    txns = coordinator(broker)
    names = list(request.state_filters or ())
    states = {TxnState.from_kafka_name(n) for n in names} - {None}
    unknown = [n for n in names if TxnState.from_kafka_name(n) is None]
    producer_ids = set(request.producer_id_filters or ())
    duration = request.duration_filter if ctx.api_version >= 1 else -1
    now = int(time.time() * 1000)
    listed = [
        meta
        for meta in txns.txns.values()
        if (not names or meta.state in states)
        and (not producer_ids or meta.producer_id in producer_ids)
        and (duration < 0 or now - meta.start_ms > duration)
        and meta.state != TxnState.DEAD
    ]
    allowed = txn_allowed(broker, ctx, AclOperation.DESCRIBE, [m.transactional_id for m in listed])
    loading = any(not loaded for loaded, _ in txns.owned.values())
    return ListTransactionsResponse(
        error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if loading else ErrorCode.NONE,
        unknown_state_filters=unknown,
        transaction_states=[
            TransactionState(
                transactional_id=m.transactional_id, producer_id=m.producer_id, transaction_state=m.state.kafka_name
            )
            for m, ok in sorted(zip(listed, allowed, strict=True), key=lambda x: x[0].transactional_id)
            if ok
        ],
    )


def error_response(request, code):
    return ListTransactionsResponse(error_code=code)


API = Api(KEY, 0, 2, handle, error_response)
