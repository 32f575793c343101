"""The segment storage's flusher: one thread that does the storage's disk work in the
order it was queued (fsyncs, producer snapshots, checkpoint files, deletions), so that none
of it waits on the event loop.

Small files replaced one after another share one job. A new topic's partitions each
write their ``partition.metadata`` as they are created, and their
``leader-epoch-checkpoint`` at their first append (or as they become leaders): a job each
would take the GIL from the event loop's thread twice a file, and while a thread waits
for the GIL, every system call of the event loop's thread wakes it. Batched, the flusher
writes them all in one call that lets go of the GIL once (:func:`.files.replace_files`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from . import files

log = logging.getLogger("brokkr.storage")


class Flusher(ThreadPoolExecutor):
    """A one-thread executor whose :meth:`replace_file` calls, when nothing else was
    queued between them, are done by one job: the order of all the work queued is kept."""

    def __init__(self) -> None:
        super().__init__(1, thread_name_prefix="brokkr-flush")
        self._batch_lock = threading.Lock()
        #: The replacements of the last job queued, while it is a batch that has not started.
        self._open_batch: dict[Path, tuple[bytes, Callable[[], bool]]] | None = None

    def submit(self, fn, /, *args, **kwargs) -> Future:
        with self._batch_lock:
            self._open_batch = None  # replacements queued after this run after it
            return super().submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._batch_lock:
            self._open_batch = None  # what is queued from now on is refused, as submit refuses it
        super().shutdown(wait=wait, cancel_futures=cancel_futures)

    def replace_file(self, path: Path, data: bytes, wanted: Callable[[], bool]) -> None:
        """Queue :func:`.files.write_atomically` of ``data`` to ``path``, unless
        ``wanted()`` (asked on the flusher) says otherwise by then. The last data queued
        for a path is the one left."""
        with self._batch_lock:
            batch = self._open_batch
            if batch is None:
                batch = self._open_batch = {}
                super().submit(self._replace, batch).add_done_callback(
                    lambda future: log_failure(future, "replacing files on the flusher")
                )
            batch[path] = (data, wanted)

    def _replace(self, batch: dict[Path, tuple[bytes, Callable[[], bool]]]) -> None:
        with self._batch_lock:
            if self._open_batch is batch:
                self._open_batch = None  # started: what is queued from now on comes after
        items = [(path, data, wanted) for path, (data, wanted) in batch.items() if wanted()]
        errors = files.replace_files([(path, data) for path, data, _ in items])
        for (path, _, wanted), error in zip(items, errors):
            if error is not None and wanted():  # else its log was deleted meanwhile
                log.error("writing %s failed: %s", path, error)


def log_failure(future: Future, what: str) -> None:
    """Log the exception of a flusher job that raised one (one cancelled by a shutdown
    did not)."""
    exc = None if future.cancelled() else future.exception()
    if exc is not None:
        log.error("%s failed: %s", what, exc, exc_info=exc)
