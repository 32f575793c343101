"""EndTxn (key 26), versions 0-4: commit or abort the producer's transaction. Needs WRITE
on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED). Answered once
PrepareCommit/PrepareAbort is written (the markers follow): NONE (also for a retry of a
completed EndTxn), INVALID_TXN_STATE (nothing ongoing, or the other outcome under way),
CONCURRENT_TRANSACTIONS (the same outcome still being completed), INVALID_PRODUCER_ID_MAPPING,
PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2).

Version 5 (KIP-890 part 2, an epoch bump on every transaction) is not served.
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..errors import for_version
from . import coordinator, txn_allowed

KEY = 26
EndTxnResponse = response_spec(KEY).cls


async def handle(broker, ctx, request):
    if not txn_allowed(broker, ctx, AclOperation.WRITE, [request.transactional_id])[0]:
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = await coordinator(broker).end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed
    )
    return EndTxnResponse(error_code=for_version(error, ctx.api_version, 2))


def error_response(request, code):
    return EndTxnResponse(error_code=code)


API = Api(KEY, 0, 4, handle, error_response)
