"""WriteShareGroupState (key 85), versions 0-1: a share partition's leader writes the state
batches that changed and its start offset (a ShareUpdate, or a ShareSnapshot every
``share.coordinator.snapshot.update.records.per.snapshot`` updates)."""

from __future__ import annotations

from brokkr.core.apis import Api

from ..records import StateBatch
from .state import answer, error_response

KEY = 85
TOPIC = "WriteStateResult"


async def _one(shard, group_id, topic_id, p):
    batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]
    error = await shard.write_state(
        (group_id, topic_id, p.partition),
        p.state_epoch,
        p.leader_epoch,
        p.start_offset,
        batches,
        p.delivery_complete_count if p.delivery_complete_count is not None else -1,
    )
    return {"error_code": error}


async def handle(broker, ctx, request):
    return await answer(broker, ctx, KEY, request, TOPIC, _one)


API = Api(KEY, 0, 1, handle, error_response(KEY, TOPIC))
