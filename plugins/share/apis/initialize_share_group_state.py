"""InitializeShareGroupState (key 83), version 0: set a share partition's start offset and
state epoch (a ShareSnapshot); an older state epoch answers FENCED_STATE_EPOCH."""

from __future__ import annotations

from brokkr.core.apis import Api

from .state import answer, error_response

KEY = 83
TOPIC = "InitializeStateResult"


async def _one(shard, group_id, topic_id, p):
    error = await shard.initialize((group_id, topic_id, p.partition), p.state_epoch, p.start_offset)
    return {"error_code": error}


async def handle(broker, ctx, request):
    return await answer(broker, ctx, KEY, request, TOPIC, _one)


API = Api(KEY, 0, 0, handle, error_response(KEY, TOPIC))
