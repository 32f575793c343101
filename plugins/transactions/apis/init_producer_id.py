"""InitProducerId (key 22), versions 0-5, for transactional ids: the one place that decides
InitProducerId while the transaction coordinator is enabled. Kafka's checks (authorization,
the request's id and epoch, a non-empty id, ``transaction.max.timeout.ms``) are core's
(:func:`brokkr.core.apis.init_producer_id.check`); a request without a transactional id is
core's (a new producer id); one with an id goes to the coordinator, which answers with the
id's producer id and epoch (new, or bumped), PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before
v4) for a KIP-360 request naming an id and epoch that are not the current ones,
CONCURRENT_TRANSACTIONS while the id's transaction completes (or is being aborted because
this producer replaces the one that left it open), NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS when another broker coordinates the id or it is loading.
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.apis import init_producer_id as core

from ..errors import for_version
from . import coordinator

KEY = core.KEY


async def handle(broker, ctx, request):
    if request.transactional_id is None or core.check(broker, ctx, request):
        return await core.handle(broker, ctx, request)
    error, producer_id, epoch = await coordinator(broker).init_producer_id(
        request.transactional_id, request.transaction_timeout_ms, request.producer_id, request.producer_epoch
    )
    if error:
        return core.error(for_version(error, ctx.api_version, 4))
    return core.InitProducerIdResponse(error_code=error, producer_id=producer_id, producer_epoch=epoch)


API = Api(KEY, 0, 5, handle, core.error_response)
