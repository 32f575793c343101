"""The transaction coordinator's two timers (Kafka's TransactionStateManager):

- every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, ongoing
  transactions older than their timeout (``transaction.timeout.ms`` as the producer
  asked, bounded by ``transaction.max.timeout.ms``) are aborted with the producer's epoch
  bumped, so the producer that left them open is fenced;
- every ``transaction.remove.expired.transactional.id.cleanup.interval.ms``, ids idle
  (Empty, CompleteCommit or CompleteAbort) for ``transactional.id.expiration.ms`` are
  removed: a tombstone is written and the id is Dead.
"""

from __future__ import annotations

import asyncio
import logging

from .metadata import COMPLETE, TxnState
from .records import encode_key

log = logging.getLogger("brokkr.transactions")


def timed_out(coordinator, now_ms: int) -> list:
    return [
        meta
        for meta in coordinator.txns.values()
        if meta.state == TxnState.ONGOING
        and meta.pending is None
        and meta.start_ms + meta.timeout_ms < now_ms
        and not coordinator.check_coordinator(meta.transactional_id)
    ]


async def abort_timed_out_periodically(coordinator) -> None:
    from .coordinator import now_ms

    interval = coordinator.broker.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] / 1000
    while True:
        await asyncio.sleep(interval)
        for meta in timed_out(coordinator, now_ms()):
            log.info("aborting the transaction of %r: timed out after %d ms", meta.transactional_id, meta.timeout_ms)
            coordinator.spawn(coordinator.fence_and_abort(meta), f"abort {meta.transactional_id}")


async def remove_expired_periodically(coordinator) -> None:
    from .coordinator import now_ms

    config = coordinator.broker.config
    interval = config["transaction.remove.expired.transactional.id.cleanup.interval.ms"] / 1000
    expiration = config["transactional.id.expiration.ms"]
    while True:
        await asyncio.sleep(interval)
        now = now_ms()
        for meta in list(coordinator.txns.values()):
            if (
                (meta.state == TxnState.EMPTY or meta.state in COMPLETE)
                and meta.pending is None
                and meta.last_update_ms + expiration <= now
                and not coordinator.check_coordinator(meta.transactional_id)
            ):
                await remove(coordinator, meta)


async def remove(coordinator, meta) -> None:
    """Write the id's tombstone; once acknowledged, the id is Dead and forgotten."""
    meta.pending = TxnState.DEAD
    try:
        error = await coordinator.write(meta.transactional_id, [(encode_key(meta.transactional_id), None)])
    finally:
        meta.pending = None
    if error:
        log.info("removing expired transactional id %r failed: %s", meta.transactional_id, error.name)
    else:
        meta.state = TxnState.DEAD
