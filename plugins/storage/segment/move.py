"""Moving a partition's log to another log dir (AlterReplicaLogDirs), as Kafka does it: a
future log in the destination (``{topic}-{partition}.{uuid}-future``) is filled with the
log's batches, as they are, while the partition goes on taking appends in the old one;
once it has caught up it replaces the old one (Kafka's ReplicaAlterLogDirsThread and
``LogManager.replaceCurrentWithFutureLog``).

Why this is safe under concurrent appends: every append, truncation, retention step and
compaction swap of a log happens on the event loop, and so does each :meth:`LogMove.copy`
step. The future log is read from the old one at its own end, so appends meanwhile are
simply copied by a later step; a truncation of the old log truncates the future log too
(``SegmentLog.truncate_to``); retention past what was copied starts the future log again
at the new start. The swap checks that both logs end at the same offset and completes in
the same turn of the loop, so no append can fall between them; it waits while the cleaner
works on the old log (its thread reads the old files).

The swap renames the old directory aside (``-delete``) and the future one to the
partition's name, fsyncing each parent in turn, so a crash leaves either the old log (the
future one, still ``-future``, is dropped at the next start) or no old log and the future
one complete (renamed into place at the next start, :meth:`SegmentStorage._settle_moves`).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from brokkr.core.protocol.records import iter_batches_untrusted

from . import files
from .partition_log import SegmentLog

if TYPE_CHECKING:
    from .storage import SegmentStorage

log = logging.getLogger("brokkr.storage")


class LogMove:
    """Satisfies :class:`brokkr.core.log.LogMove` for a :class:`SegmentLog`."""

    def __init__(self, storage: SegmentStorage, current: SegmentLog, directory: Path):
        self.storage = storage
        self.current = current
        self.directory = directory
        self.key = files.parse_partition_dir(current.dir.name)
        self._cancelled = False
        self.future = self._open_future()

    def _open_future(self) -> SegmentLog:
        """An empty log in the destination, starting where the batch holding the old log's
        start begins (a log start inside a batch, after DeleteRecords, keeps that batch)."""
        current = self.current
        start = current.log_start_offset
        if start < current.log_end_offset:
            first = next(iter_batches_untrusted(current.read(start, 1, current.log_end_offset, True)), None)
            start = first.base_offset if first is not None else start
        future = SegmentLog(
            self.directory / files.future_dir_name(*self.key),
            current.topic_id,
            current.config,
            self.storage.codecs,
            self.storage.flusher,
            log_start_offset=start,
            clean=True,
        )
        current.future = future
        return future

    @property
    def cancelled(self) -> bool:
        return self._cancelled or self.current.deleted or self.current.future is not self.future

    def copy(self, max_bytes: int) -> int:
        current, future = self.current, self.future
        if current.log_start_offset > future.log_end_offset:  # retention passed what was copied
            current.drop_future()
            future = self.future = self._open_future()
        offset = max(future.log_end_offset, current.log_start_offset)
        end = current.log_end_offset
        if offset >= end:
            return 0
        data = bytearray(current.read(offset, max_bytes, end, True))
        headers = [h for h in iter_batches_untrusted(data) if h.base_offset >= future.log_end_offset]
        if not headers:  # batch boundaries are kept by every change of a log: never expected
            raise RuntimeError(f"{current.dir.name}: no batch starts at or after {future.log_end_offset}")
        copied_from = future.log_end_offset
        # One append per run of batches of one leader epoch, so the future log's epoch
        # cache records where each starts (as a follower appends them).
        run: list = []
        for h in [*headers, None]:
            if run and (h is None or h.leader_epoch != run[-1].leader_epoch):
                future.append(
                    data[run[0].position : run[-1].end],
                    run[0].base_offset,
                    run[-1].last_offset,
                    max(r.max_timestamp for r in run),
                    sum(r.record_count for r in run),
                )
                run = []
            if h is not None:
                run.append(h)
        # The aborted transactions whose markers were copied, each in the segment holding it.
        for txn in current.aborted_txns_marked(copied_from, future.log_end_offset):
            future.append_aborted_txn(txn)
        return sum(h.size for h in headers)

    def caught_up(self) -> bool:
        current = self.current
        return not self.cancelled and self.future.log_end_offset == current.log_end_offset and not current.cleaning

    def flush(self) -> Future:
        return self.future.flush_in_background()

    def complete(self) -> SegmentLog:
        current, future = self.current, self.future
        if not self.caught_up():
            raise RuntimeError(f"{current.dir.name}: the move to {self.directory} has not caught up")
        future.delete_before(current.log_start_offset)
        future.take_epochs(current.leader_epochs())
        future.high_watermark, future.last_stable_offset = current.high_watermark, current.last_stable_offset
        old_dir, name = current.dir.parent, current.dir.name
        current.future = None
        current.delete()  # renamed aside first: a crash now leaves the complete future log alone
        try:
            files.fsync_path(old_dir)
            future.rename_dir(self.directory / name)
        except OSError as exc:  # it serves under its -future name; the next start renames it
            log.error("%s: renaming %s failed (%s); the next start renames it", name, future.dir, exc)
        logs = self.storage.logs
        logs[old_dir].pop(self.key, None)
        logs[self.directory][self.key] = future
        return future

    def cancel(self) -> None:
        self._cancelled = True
        if self.current.future is self.future:
            self.current.future = None
        if not self.future.deleted:
            self.future.delete()
