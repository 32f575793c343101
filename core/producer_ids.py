"""Producer ids for InitProducerId, unique across restarts (Kafka's ProducerIdManager).

Kafka's controller hands brokers producer ids in blocks of 1000 and records the next
block's start in its metadata log before a broker uses any id of the block. brokkr does
the same with its storage: the start of the next block is written with
``Storage.write_state("producer-ids", ...)`` before the first id of a block is handed
out, so a restart, even after a crash, continues from a block no earlier id came from
(the rest of the block in use is skipped, as in Kafka). In a cluster, blocks are
reserved from the cluster instead (``ClusterMembership.reserve_producer_ids``: Kafka's
``/latest_producer_id_block`` in ZooKeeper), so no two brokers hand out the same id.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .log import Storage

#: Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE.
PRODUCER_ID_BLOCK_SIZE = 1000
STATE_NAME = "producer-ids"


class ProducerIdManager:
    """Hands out producer ids from persisted blocks. ``floor``: the lowest id that may be
    handed out (ids below it are known to be in use)."""

    def __init__(self, storage: Storage, floor: int = 0):
        self.storage = storage
        text = storage.read_state(STATE_NAME)
        self._next_block = max(json.loads(text)["next_producer_id"] if text else 0, floor)
        self._next = self._block_end = self._next_block  # no block yet: allocated on first use
        #: Set on a cluster: ``reserve(count, floor)`` reserves a block of the cluster's ids.
        self.reserve: Callable[[int, int], Awaitable[int]] | None = None

    async def generate_producer_id(self) -> int:
        if self._next == self._block_end:
            await self._allocate_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    async def _allocate_block(self) -> None:
        """Reserve a new block (in the cluster, or by persisting its end), then use it."""
        if self.reserve is not None:
            start = await self.reserve(PRODUCER_ID_BLOCK_SIZE, self._next_block)
        else:
            start = self._next_block
        end = start + PRODUCER_ID_BLOCK_SIZE
        if self._next != self._block_end:  # another request got a block meanwhile: keep the one in use
            self._next_block = max(self._next_block, end)
            return
        if self.reserve is None:
            self.storage.write_state(STATE_NAME, json.dumps({"version": 0, "next_producer_id": end}))
        self._next, self._block_end, self._next_block = start, end, end
