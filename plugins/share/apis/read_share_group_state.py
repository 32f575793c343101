"""ReadShareGroupState (key 84), version 0: a share partition's state for its leader, whose
leader epoch is recorded (an older one answers FENCED_LEADER_EPOCH)."""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.protocol.frames import response_spec

from .state import answer, error_response

KEY = 84
TOPIC = "ReadStateResult"
StateBatch = response_spec(KEY).struct("StateBatch")


async def _one(shard, group_id, topic_id, p):
    error, state = await shard.read((group_id, topic_id, p.partition), p.leader_epoch)
    if error:
        return {"error_code": error, "state_epoch": -1, "start_offset": -1, "state_batches": []}
    return {
        "error_code": error,
        "state_epoch": state.state_epoch,
        "start_offset": state.start_offset,
        "state_batches": [StateBatch(**b._asdict()) for b in state.batches],
    }


async def handle(broker, ctx, request):
    return await answer(broker, ctx, KEY, request, TOPIC, _one)


API = Api(KEY, 0, 0, handle, error_response(KEY, TOPIC))
