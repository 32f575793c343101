"""One partition on disk: its directory of segments (Kafka's UnifiedLog/LocalLog).

The last segment is active and takes the appends; a new one is rolled on
``segment.bytes``, ``segment.ms``, a full index, or an offset too far from the base for
a relative int32. A rolled segment is sealed (indexes trimmed) at once and fsynced in
the background, after which the recovery point moves past it, as in Kafka. Flushing
otherwise follows ``flush.messages`` and ``flush.ms`` (by default: left to the OS).

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
import time
import uuid
from concurrent.futures import Executor
from pathlib import Path

from brokkr.core.config import LONG_MAX, TopicConfig
from brokkr.core.log import AppendInfo, OffsetOutOfRange, SegmentInfo, TimestampOffset
from brokkr.core.txn_index import AbortedTxn, search

from . import cleaner, files
from .segment import LogSegment

log = logging.getLogger("brokkr.storage")

_EPOCH_AT = 12


class InconsistentTopicId(Exception):
    pass


class SegmentLog:
    """Satisfies :class:`brokkr.core.log.PartitionLog`.

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
        flusher: Executor,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean: bool = False,
        cleaner_offset: int = 0,
    ):
        self.dir = directory
        self.config = config
        self._read_config()
        self.codecs = codecs
        self._flusher = flusher
        self.deleted = False
        directory.mkdir(parents=True, exist_ok=True)
        metadata = directory / files.PARTITION_METADATA
        stored_id = files.read_partition_metadata(metadata)
        if stored_id is None:
            files.write_partition_metadata(metadata, topic_id)
        elif stored_id != topic_id:
            raise InconsistentTopicId(f"{directory} belongs to topic id {stored_id}, not {topic_id}")
        cleaner.complete_swaps(directory)
        self._remove_leftovers()
        self._segments = self._load_segments(recovery_point, log_start_offset, clean)
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
        self._unflushed = 0
        self._last_flush = time.monotonic()
        #: The log cleaner's checkpoint: offsets below it have been cleaned.
        self.first_dirty = min(cleaner_offset, self.log_end_offset)
        self.cleaning = False

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
            files.write_leader_epochs(self._epochs_path, self._epochs)

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
                    later.delete()
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
        epoch = int.from_bytes(records[_EPOCH_AT : _EPOCH_AT + 4], "big", signed=True)
        if epoch >= 0 and (not self._epochs or epoch > self._epochs[-1][0]):
            self._epochs.append((epoch, first_offset))
            files.write_leader_epochs(self._epochs_path, self._epochs)
        active.append(records)
        self._unflushed += record_count
        if self._unflushed >= self._flush_messages or (
            self._flush_ms is not None and (time.monotonic() - self._last_flush) * 1000 >= self._flush_ms
        ):
            self.flush()
        return AppendInfo(first_offset, last_offset, record_count, max_timestamp, len(records), rolled)

    def _roll(self, base_offset: int) -> SegmentInfo:
        old = self._segments[-1]
        old.seal()
        new = self._segment(base_offset)
        new.make_active()
        self._segments.append(new)
        fd = os.dup(old.fd)  # the flush must not race a deletion closing old.fd
        self._flusher.submit(self._flush_rolled, old, fd, base_offset)
        log.debug("rolled %s at offset %d", self.dir.name, base_offset)
        return SegmentInfo(old.base_offset, base_offset, old.size, old.max_timestamp, str(old.path))

    def _flush_rolled(self, segment: LogSegment, fd: int, next_offset: int) -> None:
        try:
            os.fsync(fd)
            files.fsync_path(segment.offset_index.path)  # sealed: nothing left in a map
            files.fsync_path(segment.time_index.path)
            self.recovery_point = max(self.recovery_point, next_offset)
        except OSError:
            log.exception("flushing rolled segment %s failed", segment.path)
        finally:
            os.close(fd)

    def flush(self) -> None:
        """fsync every segment holding offsets past the recovery point."""
        for seg, end in zip(self._segments, self._ends()):
            if end > self.recovery_point:
                seg.sync()
        self.recovery_point = self.log_end_offset
        self._unflushed = 0
        self._last_flush = time.monotonic()

    def _ends(self) -> list[int]:
        return [s.base_offset for s in self._segments[1:]] + [self.log_end_offset]

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        end = self.log_end_offset
        if offset < self._start or offset > end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start}, {end}]")
        if offset == end:
            return b""
        i = max(bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1, 0)
        for seg in self._segments[i:]:
            data = seg.read(offset, max_bytes, max_offset, min_one)
            if data is not None:
                return data
        return b""

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
        if offset <= self._start:
            return
        self._start = offset
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            self._segments.pop(0).delete()
        # Kafka's LeaderEpochFileCache.truncateFromStart: the epoch in force at the new
        # start offset now starts there.
        kept = [(e, s) for e, s in self._epochs if s > offset]
        before = [e for e, s in self._epochs if s <= offset]
        if before:
            kept.insert(0, (before[-1], offset))
        if kept != self._epochs:
            self._epochs = kept
            files.write_leader_epochs(self._epochs_path, kept)

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
                seg.delete()
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
        self.first_dirty = max(self.first_dirty, cleaning.first_dirty)
        return True

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            # Kafka's truncateFromEnd: an epoch starting at the log end (a leader's, with no
            # batch yet) goes even when no record does, or a follower would keep naming it.
            kept = [(e, s) for e, s in self._epochs if s < offset]
            if kept != self._epochs:
                self._epochs = kept
                files.write_leader_epochs(self._epochs_path, kept)
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop().delete()
        last = self._segments[-1]
        if last.base_offset >= offset:
            last.delete()
            self._segments[-1] = last = self._segment(offset)
            last.load(recover=True)
        elif not last.active:
            last.make_active()
        last.truncate_to(offset)
        if not last.active:
            last.make_active()
        self._start = min(self._start, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self.first_dirty = min(self.first_dirty, offset)
        self._epochs = [(e, s) for e, s in self._epochs if s < offset]
        files.write_leader_epochs(self._epochs_path, self._epochs)
        self._delete_snapshots_above(offset)

    # -- aborted transactions (optional in the PartitionLog contract) ---------------------

    def _segment_of(self, offset: int) -> int:
        return max(bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1, 0)

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

    def truncate_aborted_txns(self, offset: int) -> None:
        for seg, end in zip(self._segments, self._ends()):
            if end > offset:
                seg.txn_index.truncate(offset)

    # -- producer snapshots ---------------------------------------------------------------

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        files.write_atomically(self._snapshot_path(offset), data)
        for older in self._snapshot_offsets()[:-2]:
            self._snapshot_path(older).unlink(missing_ok=True)

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        offset = max((o for o in self._snapshot_offsets() if o <= self.log_end_offset), default=None)
        return None if offset is None else (offset, self._snapshot_path(offset).read_bytes())

    def _snapshot_path(self, offset: int) -> Path:
        return files.segment_file(self.dir, offset, files.PRODUCER_SNAPSHOT_SUFFIX)

    def _snapshot_offsets(self) -> list[int]:
        return sorted(int(p.stem) for p in self.dir.glob(f"*{files.PRODUCER_SNAPSHOT_SUFFIX}") if p.stem.isdigit())

    def _delete_snapshots_above(self, offset: int) -> None:
        for above in [o for o in self._snapshot_offsets() if o > offset]:
            log.warning("deleting producer snapshot %s above the log end offset", self._snapshot_path(above))
            self._snapshot_path(above).unlink()

    def close(self) -> None:
        self.flush()
        for seg in self._segments:
            seg.close()

    def delete(self) -> None:
        """Close, rename the directory aside (``{name}.{id}-delete``, shortened as Kafka
        shortens it), then remove it; a crash in between leaves a directory the next start
        removes."""
        for seg in self._segments:
            seg.close()
        topic, partition = files.parse_partition_dir(self.dir.name)
        doomed = self.dir.with_name(files.delete_dir_name(topic, partition))
        os.replace(self.dir, doomed)
        shutil.rmtree(doomed)
        self.deleted = True
