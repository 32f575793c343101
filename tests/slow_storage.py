"""A slow disk for tests of work the broker spreads over turns of its event loop."""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable

SLOW_OPEN_S = 0.002  # a slow disk: 0.6 s for 300 partitions


class SlowStorage:
    """Wraps a running broker's ``storage.open_log``: each call waits first, and the call
    numbered ``fail_at`` (from 0) raises ENOSPC instead; ``before``, if given, is called
    first with that number (on the broker's event loop, which it holds)."""

    def __init__(self, broker, fail_at: int | None = None, before: Callable[[int], object] | None = None):
        self.storage = broker.broker.storage
        self.original = self.storage.open_log
        self.fail_at = fail_at
        self.before = before
        self.opened = 0
        self.lock = threading.Lock()
        self.storage.open_log = self.open_log

    def open_log(self, *args):
        if self.before is not None:
            self.before(self.opened)
        time.sleep(SLOW_OPEN_S)
        with self.lock:
            if self.opened == self.fail_at:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.opened += 1
        return self.original(*args)

    def restore(self) -> None:
        self.storage.open_log = self.original
