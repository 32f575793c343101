"""DeleteShareGroupState (key 86), version 0: forget a share partition's state (a tombstone)."""

from __future__ import annotations

from brokkr.core.apis import Api

from .state import answer, error_response

KEY = 86
TOPIC = "DeleteStateResult"


async def _one(shard, group_id, topic_id, p):
    return {"error_code": await shard.delete((group_id, topic_id, p.partition))}


async def handle(broker, ctx, request):
    return await answer(broker, ctx, KEY, request, TOPIC, _one)


API = Api(KEY, 0, 0, handle, error_response(KEY, TOPIC))
