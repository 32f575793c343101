"""Delayed operations (Kafka's DelayedOperationPurgatory): requests that answer later.

An operation is tried once when created; if it cannot complete, it is watched under one
key per partition it waits on and tried again each time :meth:`Purgatory.check` is
called for one of those keys (after an append moves that partition's high watermark, and
when its topic is deleted: a fetch or an acks=-1 produce waiting on it is then answered
at once).
It completes on the first successful try or expires after its timeout; either way its
future resolves exactly once. Nothing blocks the event loop: waiting is an ``await``
on that future.

The mechanism only: what completes an acks=-1 write (the completion policy) is
:mod:`brokkr.core.append`'s.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable


class DelayedOperation:
    """Completes when ``try_complete()`` returns true, or expires after ``timeout_ms``."""

    def __init__(self, timeout_ms: int, try_complete: Callable[[], bool]):
        self.timeout_ms = timeout_ms
        self.try_complete = try_complete
        self.future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._timer: asyncio.TimerHandle | None = None
        self._keys: tuple[Hashable, ...] = ()

    @property
    def done(self) -> bool:
        return self.future.done()


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[DelayedOperation]] = defaultdict(set)

    def __len__(self) -> int:
        return len({op for ops in self._watchers.values() for op in ops})

    async def wait(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Try ``op``; if not complete, watch it under ``keys`` until it completes (True)
        or expires (False)."""
        if op.try_complete():
            return True
        op._keys = tuple(keys)
        for key in op._keys:
            self._watchers[key].add(op)
        loop = asyncio.get_running_loop()
        op._timer = loop.call_later(max(op.timeout_ms, 0) / 1000, self._finish, op, False)
        try:
            return await op.future
        finally:
            self._unwatch(op)

    def check(self, key: Hashable) -> int:
        """Try every operation watching ``key``; returns how many completed."""
        ops = self._watchers.get(key)
        if not ops:
            return 0
        completed = 0
        for op in list(ops):
            if not op.done and op.try_complete():
                self._finish(op, True)
                completed += 1
        return completed

    def _finish(self, op: DelayedOperation, completed: bool) -> None:
        if not op.done:
            op.future.set_result(completed)
        self._unwatch(op)

    def _unwatch(self, op: DelayedOperation) -> None:
        if op._timer is not None:
            op._timer.cancel()
        for key in op._keys:
            ops = self._watchers.get(key)
            if ops is not None:
                ops.discard(op)
                if not ops:
                    del self._watchers[key]

    def expire_all(self) -> None:
        """Expire everything now (broker shutdown)."""
        for ops in list(self._watchers.values()):
            for op in list(ops):
                self._finish(op, False)
