"""One partition on disk: its directory of segments (Kafka's UnifiedLog/LocalLog).

The last segment is active and takes the appends; a new one is rolled on
``segment.bytes``, ``segment.ms``, a full index, or an offset too far from the base for
a relative int32. A rolled segment is sealed (indexes trimmed) at once and fsynced in
the background, after which the recovery point moves past it, as in Kafka. Flushing
otherwise follows ``flush.messages`` and ``flush.ms`` (by default: left to the OS).

Nothing here waits for the disk on the event loop. Every fsync, every file written
atomically (producer snapshots, the leader-epoch-checkpoint) and every unlink of a
deleted segment is queued on the storage's flusher, one thread, so they happen in the
order they were asked for (Kafka's ``flushProducerStateSnapshot`` and
``asyncDeleteSegment`` do the same on its scheduler). The loop keeps what is cheap: the
appends' writes into the page cache, renames, and the bookkeeping. The rules that keep
this safe:

- the recovery point moves only once the fsync of everything below it has returned;
- work queued before a truncation or a deletion is void once it runs (the log's
  ``generation``): it neither moves the recovery point nor installs a snapshot;
- a flush holds its own duplicate of each file descriptor, so a deletion meanwhile
  cannot close it under the fsync;
- a snapshot not yet written is served from memory; a crash before it is durable leaves
  the older ones (pruned only after the new one is) or none, and the producer state is
  replayed from the log;
- the epoch entries past the recovery point are re-derived from the batches recovery
  validates (as Kafka's ``LogSegment.recover`` assigns them), so a leader-epoch-checkpoint
  write lost in a crash loses no epoch.

With ``flush.messages`` reached, :meth:`SegmentLog.append` returns the flush's future in
``AppendInfo.flushed``; the broker answers the produce, and moves the high watermark,
only once it is done (so ``flush.messages=1`` still acknowledges only fsynced records).

On open after an unclean shutdown, every segment holding offsets at or past the
recovery point is re-validated batch by batch; the log is truncated at the first torn or
corrupt batch and the segments after it are deleted, and so are producer snapshots above
the new log end (as Kafka's LogLoader does). Producer snapshots are
``{offset:020d}.snapshot`` files beside the segments, the two newest kept.
"""

from __future__ import annotations

import bisect
import logging
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

from brokkr.core.config import LONG_MAX, TopicConfig
from brokkr.core.file_region import FileRegion
from brokkr.core.log import AppendInfo, OffsetOutOfRange, SegmentInfo, TimestampOffset
from brokkr.core.txn_index import AbortedTxn, search

from . import cleaner, files
from .flusher import Flusher, log_failure
from .segment import LogSegment

log = logging.getLogger("brokkr.storage")

_EPOCH_AT = 12
_EPOCH = struct.Struct(">i")


class InconsistentTopicId(Exception):
    pass


class SegmentLog:
    """Satisfies :class:`brokkr.core.log.PartitionLog` and every capability protocol of
    a log there (:class:`~brokkr.core.log.LeaderEpochs`, ``ReadRegions``, ``TxnIndex``,
    ``ProducerSnapshots``, ``KeptHighWatermark``), as ``SegmentStorage`` declares.

    ``high_watermark`` is the partition's high watermark as the broker last set it (None
    until then, or as read from ``replication-offset-checkpoint`` at open); the storage
    writes it to that checkpoint, Kafka's record of it across restarts."""

    high_watermark: int | None = None
    #: The partition's last stable offset as the broker last set it: the cleaner compacts
    #: nothing at or past it (Kafka's firstUncleanableDirtyOffset), so records of open
    #: transactions are neither removed nor used to remove others.
    last_stable_offset: int | None = None

    def __init__(
        self,
        directory: Path,
        topic_id: uuid.UUID,
        config: TopicConfig,
        codecs: dict,
        flusher: Flusher,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = False,
        cleaner_offset: int = 0,
    ):
        self.dir = directory
        self.topic_id = topic_id
        self.config = config
        self._read_config()
        self.codecs = codecs
        self._flusher = flusher
        self.deleted = False
        #: Held briefly by the loop and the flusher thread around what both change: the
        #: recovery point, the generation, the snapshots pending and their files.
        self._lock = threading.Lock()
        #: Bumped by a truncation or deletion: background work queued before is void.
        self._generation = 0
        self._pending_snapshots: dict[int, bytes] = {}  # queued, not yet in their files
        directory.mkdir(parents=True, exist_ok=True)
        metadata = directory / files.PARTITION_METADATA
        stored_id = files.read_partition_metadata(metadata)
        if stored_id is not None and stored_id != topic_id:
            raise InconsistentTopicId(f"{directory} belongs to topic id {stored_id}, not {topic_id}")
        cleaner.complete_swaps(directory)
        self._remove_leftovers()
        if stored_id is None:  # queued once the leftovers (a .tmp among them) are gone
            # On the flusher, with the other partitions' (see flusher.py): written here, its
            # two fsyncs were most of the time a topic's creation held the event loop.
            self._write_metadata()
        self._segments = self._load_segments(recovery_point, log_start_offset, clean)
        self._bases: list[int] | None = None  # the segments' base offsets, kept between reads
        self._segments[-1].make_active()
        self._delete_snapshots_above(self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset) if clean else self.log_end_offset
        self._start = min(max(log_start_offset, self._segments[0].base_offset), self.log_end_offset)
        self._epochs_path = directory / files.LEADER_EPOCH_CHECKPOINT
        # Epochs starting past the end are from batches recovery dropped; one starting at the
        # end is a leader's epoch with no batch yet (as assign_epoch writes it).
        self._epochs = [
            (e, start) for e, start in files.read_leader_epochs(self._epochs_path) if start <= self.log_end_offset
        ]
        self._recover_epochs()
        self._unflushed = 0
        self._last_flush = time.monotonic()
        #: The log cleaner's checkpoint: offsets below it have been cleaned.
        self.first_dirty = min(cleaner_offset, self.log_end_offset)
        self.cleaning = False
        #: The log a move to another log dir fills (:mod:`.move`): truncated with this one,
        #: deleted with it, and dropped when it closes.
        self.future: SegmentLog | None = None

    def _write_metadata(self) -> None:
        """Queue the write of ``partition.metadata`` (dropped if the log is deleted or its
        directory renamed before it runs)."""
        directory = self.dir
        data = files.partition_metadata_bytes(self.topic_id)
        self._flusher.replace_file(
            directory / files.PARTITION_METADATA, data, lambda: not self.deleted and self.dir == directory
        )

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch of the leader-epoch-checkpoint (-1 when it has none)."""
        return self._epochs[-1][0] if self._epochs else -1

    def leader_epochs(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of each leader epoch in the log, oldest first (Kafka's
        leader-epoch-checkpoint entries)."""
        return list(self._epochs)

    def assign_epoch(self, epoch: int) -> None:
        """Start leader epoch ``epoch`` at the log end, as a Kafka broker does when it becomes
        leader (``LeaderEpochFileCache.assign``); an epoch not above the latest is ignored."""
        if epoch > self.latest_epoch:
            self._epochs.append((epoch, self.log_end_offset))
            self._write_epochs()

    def _write_epochs(self) -> None:
        """Queue a write of the leader-epoch-checkpoint as it is now (the flusher writes
        them in order, so the last one queued is the one left), with the other small files
        queued alongside (see :mod:`.flusher`)."""
        generation = self._generation
        data = files.leader_epochs_bytes(self._epochs_path, self._epochs)
        # Void once a truncation (which queues its own entries) or the log's deletion came between.
        self._flusher.replace_file(self._epochs_path, data, lambda: generation == self._generation)

    def _recover_epochs(self) -> None:
        """Kafka's ``LogSegment.recover`` assigns the epoch of each recovered batch: the
        entries from the first recovered batch on are the batches' own, so a checkpoint
        write lost in a crash (it is queued, not awaited) loses no epoch, and one a lost
        truncation write left behind goes. An entry at the log end (a leader's epoch with
        no batch yet) stays. Only the run of recovered segments at the end counts: an
        index rebuilt alone further back says nothing of the epochs after it."""
        recovered: list[tuple[int, int]] = []
        first = None  # where the recovered segments at the log's end begin
        for seg in reversed(self._segments):
            if seg.recovered_epochs is None:
                break
            recovered[:0] = [(e, s) for e, s in seg.recovered_epochs if e >= 0]
            first = seg.base_offset
        if first is None:
            return
        epochs = [(e, s) for e, s in self._epochs if s < first]
        for e, s in recovered:
            if not epochs or e > epochs[-1][0]:
                epochs.append((e, s))
        end = self.log_end_offset
        epochs += [(e, s) for e, s in self._epochs if s == end and s >= first and (not epochs or e > epochs[-1][0])]
        if epochs != self._epochs:
            log.warning("%s: leader epochs %s re-derived from the recovered batches", self.dir.name, epochs)
            self._epochs = epochs
            files.write_leader_epochs(self._epochs_path, epochs)  # at open: nothing is served yet

    # -- opening --------------------------------------------------------------------------

    def _remove_leftovers(self) -> None:
        """Files a crash left mid-deletion, mid-compaction or mid-swap, and index files
        whose log is gone."""
        logs = {p.stem for p in self.dir.glob(f"*{files.LOG_SUFFIX}")}
        for path in self.dir.iterdir():
            orphan = path.suffix in files.INDEX_SUFFIXES and path.stem not in logs
            if path.suffix in files.LEFTOVER_SUFFIXES or orphan:
                log.warning("removing leftover file %s", path)
                path.unlink()

    def _load_segments(self, recovery_point: int, log_start_offset: int, clean: bool) -> list[LogSegment]:
        bases = sorted(int(p.stem) for p in self.dir.glob(f"*{files.LOG_SUFFIX}") if p.stem.isdigit())
        segments = [self._segment(base) for base in bases or [log_start_offset]]
        for i, seg in enumerate(segments):
            unflushed = not clean and (i == len(segments) - 1 or segments[i + 1].base_offset > recovery_point)
            truncated = seg.load(recover=unflushed)
            if unflushed:
                seg.sync()  # what recovery validated is durable before the recovery point moves past it
            if truncated and i < len(segments) - 1:
                for later in segments[i + 1 :]:
                    log.warning("deleting segment %s after the truncated one", later.path)
                    for path in later.delete():
                        path.unlink()
                del segments[i + 1 :]
                break
        return segments

    def _segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir, base_offset, self.config["index.interval.bytes"], self.config["segment.index.bytes"]
        )

    # -- the PartitionLog contract ----------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def start_is_mid_segment(self) -> bool:
        return self._start > self._segments[0].base_offset

    def _read_config(self) -> None:
        """The settings read on every append, looked up once per change of the topic's config."""
        config = self.config
        self._config_version = config.version
        self._roll_limits = (config["segment.bytes"], config["segment.ms"])
        self._flush_messages = config["flush.messages"]
        self._flush_ms = config["flush.ms"] if config["flush.ms"] < LONG_MAX else None

    def append(self, records, first_offset, last_offset, max_timestamp, record_count) -> AppendInfo:
        if self.config.version != self._config_version:  # the topic was altered (AlterConfigs)
            self._read_config()
        rolled = None
        active = self._segments[-1]
        if active.should_roll(len(records), last_offset, max_timestamp, *self._roll_limits):
            rolled = self._roll(first_offset)
            active = self._segments[-1]
        epoch = _EPOCH.unpack_from(records, _EPOCH_AT)[0]
        epochs = self._epochs
        if epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
            epochs.append((epoch, first_offset))
            self._write_epochs()
        active.append(records)
        self._unflushed += record_count
        flushed = None
        if self._unflushed >= self._flush_messages:  # Kafka flushes these before answering
            flushed = self.flush_in_background()
        elif self._flush_ms is not None and (time.monotonic() - self._last_flush) * 1000 >= self._flush_ms:
            self.flush_in_background()  # Kafka's flush.ms flush runs on its scheduler, unawaited
        return AppendInfo(first_offset, last_offset, record_count, max_timestamp, len(records), rolled, flushed=flushed)

    def _roll(self, base_offset: int) -> SegmentInfo:
        old = self._segments[-1]
        old.seal()
        new = self._segment(base_offset)
        new.make_active()
        self._segments.append(new)
        self._bases = None
        self._background(self._fsync, [self._sync_target(old)], base_offset, self._generation)
        log.debug("rolled %s at offset %d", self.dir.name, base_offset)
        return SegmentInfo(old.base_offset, base_offset, old.size, old.max_timestamp, str(old.path))

    def flush_in_background(self) -> Future:
        """Queue an fsync of every segment holding offsets past the recovery point; the
        recovery point moves to the current log end once it is done."""
        pending = [seg for seg, end in zip(self._segments, self._ends()) if end > self.recovery_point]
        for seg in pending:
            seg.write_index()  # the active segment's entries are in memory until now
        targets = [self._sync_target(seg) for seg in pending]
        self._unflushed = 0
        self._last_flush = time.monotonic()
        return self._background(self._fsync, targets, self.log_end_offset, self._generation)

    @staticmethod
    def _sync_target(seg: LogSegment) -> tuple[int, tuple[Path, ...]]:
        """A duplicate of the segment's descriptor (a deletion meanwhile must not close the
        one being fsynced) and its index files, fsynced by name (a file gone is skipped)."""
        return os.dup(seg.fd), (seg.offset_index.path, seg.time_index.path, seg.txn_index.path)

    def _fsync(self, targets: list[tuple[int, tuple[Path, ...]]], end: int, generation: int) -> None:
        """On the flusher: fsync ``targets``, then move the recovery point to ``end``
        unless a truncation came in between (its offsets may hold other records now)."""
        try:
            for fd, paths in targets:
                os.fsync(fd)
                for path in paths:
                    files.fsync_path(path)
        finally:
            for fd, _ in targets:
                os.close(fd)
        with self._lock:
            if generation == self._generation:
                self.recovery_point = max(self.recovery_point, end)

    def _background(self, fn, *args) -> Future:
        """Queue ``fn(*args)`` on the flusher; a failure is logged (and kept in the future)."""
        future = self._flusher.submit(fn, *args)
        future.add_done_callback(self._log_failure)
        return future

    def _log_failure(self, future: Future) -> None:
        log_failure(future, f"{self.dir.name}: background disk work")

    def flush(self) -> None:
        """fsync every segment holding offsets past the recovery point, now (at close:
        the broker no longer serves, and the clean-shutdown marker must come after)."""
        for seg, end in zip(self._segments, self._ends()):
            if end > self.recovery_point:
                seg.sync()
        self.recovery_point = self.log_end_offset
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def _ends(self) -> list[int]:
        return [s.base_offset for s in self._segments[1:]] + [self.log_end_offset]

    def _segment_of(self, offset: int) -> int:
        """The index in ``_segments`` of the segment holding ``offset``. The base offsets
        are kept between reads, not rebuilt per fetch: every change to ``_segments`` (a
        roll, retention, truncation, a compaction swap) drops them."""
        bases = self._bases
        if bases is None:
            bases = self._bases = [s.base_offset for s in self._segments]
        return max(bisect.bisect_right(bases, offset) - 1, 0)

    def _readable_from(self, offset: int) -> Iterator[LogSegment]:
        """The segments a read at ``offset`` looks in, from the one holding it (none at
        the log end), without copying the list; raises OffsetOutOfRange outside [log
        start, log end]."""
        end = self.log_end_offset
        if offset < self._start or offset > end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start}, {end}]")
        if offset < end:
            segments = self._segments
            for i in range(self._segment_of(offset), len(segments)):
                yield segments[i]

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        for seg in self._readable_from(offset):
            data = seg.read(offset, max_bytes, max_offset, min_one)
            if data is not None:
                return data
        return b""

    def read_region(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> FileRegion | bytes | None:
        """The batches :meth:`read` returns, as a region of their segment's file with a
        descriptor of its own (:class:`brokkr.core.log.ReadRegions`): Fetch sends them
        with sendfile. Fewer than ``file_region.MIN_BYTES`` come as bytes
        (:meth:`LogSegment.read_region`)."""
        for seg in self._readable_from(offset):
            found = seg.read_region(offset, max_bytes, max_offset, min_one)
            if found is not None:
                return found or None
        return None

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        for seg, end in zip(self._segments, self._ends()):
            if seg.max_timestamp >= timestamp and end > self._start:
                found = seg.find_timestamp(timestamp, self._start, self.codecs)
                if found is not None:
                    return found
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        best = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        return None if best is None else best.max_timestamp_record(self.codecs)

    def segments(self) -> list[SegmentInfo]:
        return [
            SegmentInfo(s.base_offset, end, s.size, s.max_timestamp, str(s.path))
            for s, end in zip(self._segments, self._ends())
        ]

    def delete_before(self, offset: int) -> None:
        if offset < self._start:
            return
        if offset == self.log_end_offset > self._segments[-1].base_offset:
            # Every record goes: as Kafka's deleteSegments, roll a new, empty segment at the
            # log end (a log always has one), so that the old active one can go too.
            self._roll(offset)
        elif offset == self._start:
            return
        self._start = offset
        doomed = []
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            doomed += self._segments.pop(0).delete()
            self._bases = None
        self._unlink_in_background(doomed)
        # Kafka's LeaderEpochFileCache.truncateFromStart: the epoch in force at the new
        # start offset now starts there.
        kept = [(e, s) for e, s in self._epochs if s > offset]
        before = [e for e, s in self._epochs if s <= offset]
        if before:
            kept.insert(0, (before[-1], offset))
        if kept != self._epochs:
            self._epochs = kept
            self._write_epochs()

    def _unlink_in_background(self, paths: list[Path]) -> None:
        """Unlink the ``.deleted`` files of segments gone (Kafka's asyncDeleteSegment)."""
        if paths:
            self._background(_unlink_all, paths)

    def install_cleaned(self, cleaning: cleaner.Cleaning) -> bool:
        """Swap in the segments a cleaner thread prepared (event loop, no record walks):
        one list assignment, so a reader sees the old segments or the new, then the old
        files go and the ``.swap`` files take their names. Discarded if retention or a
        truncation changed the segments meanwhile."""
        current = {id(s) for s in self._segments}
        if self.deleted or any(id(s) not in current for group in cleaning.replaced for s in group):
            for base in cleaning.bases:
                for suffix in (files.LOG_SUFFIX, *files.INDEX_SUFFIXES):
                    files.segment_file(self.dir, base, suffix + cleaner.SWAP).unlink(missing_ok=True)
            return False
        segments = list(self._segments)
        for group, base in zip(cleaning.replaced, cleaning.bases):
            for seg in group:
                self._unlink_in_background(seg.delete())
            for suffix in (files.LOG_SUFFIX, *files.INDEX_SUFFIXES):
                final = files.segment_file(self.dir, base, suffix)
                swapped = final.with_name(final.name + cleaner.SWAP)
                if suffix != files.TXN_INDEX_SUFFIX or swapped.exists():  # a .txnindex only with entries
                    os.replace(swapped, final)
            new = self._segment(base)
            new.load(recover=False)
            i = segments.index(group[0])
            segments[i : i + len(group)] = [new]
        self._segments = segments
        self._bases = None
        self.first_dirty = max(self.first_dirty, cleaning.first_dirty)
        return True

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            # Kafka's truncateFromEnd: an epoch starting at the log end (a leader's, with no
            # batch yet) goes even when no record does, or a follower would keep naming it.
            kept = [(e, s) for e, s in self._epochs if s < offset]
            if kept != self._epochs:
                self._epochs = kept
                self._write_epochs()
            return
        with self._lock:  # what the flusher was asked before this is about other records
            self._generation += 1
            self.recovery_point = min(self.recovery_point, offset)
            self._delete_snapshots_above(offset)
        doomed = []
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            doomed += self._segments.pop().delete()
            self._bases = None
        last = self._segments[-1]
        if last.base_offset >= offset:
            doomed += last.delete()
            self._segments[-1] = last = self._segment(offset)
            self._bases = None
            last.load(recover=True)
        elif not last.active:
            last.make_active()
        last.truncate_to(offset)
        if not last.active:
            last.make_active()
        self._unlink_in_background(doomed)
        self._start = min(self._start, offset)
        self.first_dirty = min(self.first_dirty, offset)
        self._epochs = [(e, s) for e, s in self._epochs if s < offset]
        self._write_epochs()
        if self.future is not None:  # what it copied past here is no longer this log's
            self.future.truncate_to(min(offset, self.future.log_end_offset))

    # -- aborted transactions (brokkr.core.log.TxnIndex) -----------------------------------

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker."""
        self._segments[self._segment_of(txn.last_offset)].txn_index.append(txn)

    def aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTxns``: from the segment holding ``fetch_offset`` on,
        until an entry's last stable offset reaches ``upper_bound``."""
        out: list[AbortedTxn] = []
        for seg in self._segments[self._segment_of(fetch_offset) :]:
            if search(seg.txn_index.entries, fetch_offset, upper_bound, out):
                break
        return out

    def aborted_txns_marked(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions whose markers lie in [start, end), oldest first."""
        out = []
        for seg in self._segments[self._segment_of(start) :]:
            if seg.base_offset >= end:
                break
            out += [t for t in seg.txn_index.entries if start <= t.last_offset < end]
        return out

    def truncate_aborted_txns(self, offset: int) -> None:
        for seg, end in zip(self._segments, self._ends()):
            if end > offset:
                seg.txn_index.truncate(offset)

    # -- producer snapshots ---------------------------------------------------------------

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        """Queued (Kafka writes it at the roll and flushes it on its scheduler); served
        from memory until its file is in place."""
        with self._lock:
            self._pending_snapshots[offset] = data
        self._background(self._write_snapshot, offset, data, self._generation)

    def _write_snapshot(self, offset: int, data: bytes, generation: int) -> None:
        """On the flusher: the temporary file is written and fsynced, renamed into place
        (unless it was dropped meanwhile: by a truncation below its offset, the log's
        deletion, or a newer snapshot at the same offset), the directory fsynced, and only
        then, unless a truncation or deletion came in between, are the snapshots beyond
        the two newest removed."""
        path = self._snapshot_path(offset)
        tmp = path.with_name(path.name + ".tmp")
        try:
            if self._pending_snapshots.get(offset) is data:
                files.write_synced(tmp, data)
            with self._lock:
                if self._pending_snapshots.get(offset) is not data:
                    tmp.unlink(missing_ok=True)
                    return
                os.replace(tmp, path)
            files.fsync_path(self.dir)
            with self._lock:
                if generation == self._generation:
                    for older in self._snapshot_offsets()[:-2]:
                        self._snapshot_path(older).unlink(missing_ok=True)
        finally:
            with self._lock:
                if self._pending_snapshots.get(offset) is data:
                    del self._pending_snapshots[offset]

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        end = self.log_end_offset
        with self._lock:
            pending = max((o for o in self._pending_snapshots if o <= end), default=None)
            offset = max((o for o in self._snapshot_offsets() if o <= end), default=None)
            if pending is not None and (offset is None or pending >= offset):
                return pending, self._pending_snapshots[pending]
            return None if offset is None else (offset, self._snapshot_path(offset).read_bytes())

    def _snapshot_path(self, offset: int) -> Path:
        return files.segment_file(self.dir, offset, files.PRODUCER_SNAPSHOT_SUFFIX)

    def _snapshot_offsets(self) -> list[int]:
        return sorted(int(p.stem) for p in self.dir.glob(f"*{files.PRODUCER_SNAPSHOT_SUFFIX}") if p.stem.isdigit())

    def _delete_snapshots_above(self, offset: int) -> None:
        for above in [o for o in self._pending_snapshots if o > offset]:
            del self._pending_snapshots[above]
        for above in [o for o in self._snapshot_offsets() if o > offset]:
            log.warning("deleting producer snapshot %s above the log end offset", self._snapshot_path(above))
            self._snapshot_path(above).unlink(missing_ok=True)

    def close(self) -> None:
        self.drop_future()
        self.flush()
        for seg in self._segments:
            seg.close()

    def drop_future(self) -> None:
        """Delete the log a move was filling (the move is given up)."""
        if self.future is not None:
            self.future.delete()
            self.future = None

    def rename_dir(self, directory: Path) -> None:
        """Rename the log's directory to ``directory`` (a move's swap), durably; the files
        queued for the old names are written again under the new ones."""
        with self._lock:
            self._generation += 1  # queued writes under the old names are dropped
        os.replace(self.dir, directory)
        files.fsync_path(directory.parent)
        self.dir = directory
        self._epochs_path = directory / files.LEADER_EPOCH_CHECKPOINT
        for seg in self._segments:
            seg.moved(directory)
        self._write_epochs()
        if not (directory / files.PARTITION_METADATA).exists():  # its queued write was for the old name
            self._write_metadata()

    def take_epochs(self, epochs: list[tuple[int, int]]) -> None:
        """Replace the leader epochs with ``epochs`` (a move's swap: those of the log it copied)."""
        self._epochs = list(epochs)
        self._write_epochs()

    def delete(self) -> None:
        """Close, rename the directory aside (``{name}.{id}-delete``, shortened as Kafka
        shortens it), then remove it; a crash in between leaves a directory the next start
        removes."""
        self.drop_future()
        with self._lock:
            self._generation += 1  # queued snapshot and epoch writes are dropped
            self._pending_snapshots.clear()
            self.deleted = True  # before the rename: a queued partition.metadata is dropped
        for seg in self._segments:
            seg.close()
        topic, partition = files.parse_partition_dir(self.dir.name) or files.parse_future_dir(self.dir.name)
        doomed = self.dir.with_name(files.delete_dir_name(topic, partition))
        os.replace(self.dir, doomed)
        self._background(shutil.rmtree, doomed)  # after the queued work, which writes no more there


def _unlink_all(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
