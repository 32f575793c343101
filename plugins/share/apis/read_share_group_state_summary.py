"""ReadShareGroupStateSummary (key 87), versions 0-1: a share partition's start offset and
epochs (DescribeShareGroupOffsets)."""

from __future__ import annotations

from brokkr.core.apis import Api

from .state import answer, error_response

KEY = 87
TOPIC = "ReadStateSummaryResult"


async def _one(shard, group_id, topic_id, p):
    error, state = shard.summary((group_id, topic_id, p.partition), p.leader_epoch)
    if error:
        return {"error_code": error, "state_epoch": -1, "leader_epoch": -1, "start_offset": -1}
    return {
        "error_code": error,
        "state_epoch": state.state_epoch,
        "leader_epoch": state.leader_epoch,
        "start_offset": state.start_offset,
        "delivery_complete_count": state.delivery_complete_count,
    }


async def handle(broker, ctx, request):
    return await answer(broker, ctx, KEY, request, TOPIC, _one)


API = Api(KEY, 0, 1, handle, error_response(KEY, TOPIC))
