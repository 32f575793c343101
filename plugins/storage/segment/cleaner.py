"""Log compaction (Kafka's LogCleaner, Cleaner and LogCleanerManager) for segment logs.

A log with ``compact`` in ``cleanup.policy`` is cleaned when its dirty share (bytes past
the cleaner checkpoint over the bytes of the cleanable segments) reaches
``min.cleanable.dirty.ratio``, or when a dirty segment is older than
``max.compaction.lag.ms``. Segments holding a record newer than ``min.compaction.lag.ms``
and the active segment are never cleaned. The work runs on ``log.cleaner.threads`` threads:

1. a key map (key -> last offset, bounded by ``log.cleaner.dedupe.buffer.size`` at 24 bytes
   an entry, as Kafka's SkimpyOffsetMap) is built over the dirty section; when it is full
   it stops at the first record whose key does not fit, and the records from there on are
   kept as they are (Kafka's map.latestOffset), to be cleaned next time;
2. each group of segments (Kafka's grouping: total size within ``segment.bytes``) is
   rewritten into ``<base>.log.cleaned`` keeping a record when no later offset of its key
   is in the map; tombstones are kept until their segment is older than
   ``delete.retention.ms``; the batch carrying each producer's last sequence is kept
   (emptied if need be) so idempotent producer state survives. Transactions (Kafka's
   CleanedTransactionMetadata): the records of aborted transactions go (and never enter
   the key map), committed ones are compacted like any record; a COMMIT or ABORT marker
   goes once no record of its transaction is left and its segment is older than
   ``delete.retention.ms`` (with its ``.txnindex`` entry), unless it is its producer's
   last batch. Nothing at or past the last stable offset is cleaned;
3. the cleaned files of all groups are fsynced (several at once) and renamed to
   ``.swap``; the event loop then swaps the
   segment objects in one list assignment, deletes the old segments and renames ``.swap``
   to the final names. Recovery completes a swap it finds (as Kafka's LogLoader does)
   and removes ``.cleaned`` files.

Reads and writes are throttled to ``log.cleaner.io.max.bytes.per.second``. The key map
and the two record walks run in C (``_cleaner.c``: ``OffsetMap``, without the GIL); a
batch the C walk does not accept, or every batch where it is not built, is walked in
Python here, which reads it or raises its error.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import struct
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from brokkr.core.errors import ConfigError
from brokkr.core.protocol.records import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    BatchHeader,
    _record_at,
)
from brokkr.core.txn_index import AbortedByProducer, by_producer, is_aborted
from crc32c import crc32c

from .files import (
    INDEX_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    fsync_path,
    segment_file,
)
from .segment import LogSegment, scan_batches

try:
    from . import _cleaner  # the key map and record walks in C (_cleaner.c)
except ImportError:  # not built: the Python walks run
    _cleaner = None

log = logging.getLogger("brokkr.storage.cleaner")

CLEANED, SWAP = ".cleaned", ".swap"
_MAP_ENTRY = 24  # bytes per key map entry, as Kafka's SkimpyOffsetMap (MD5 + offset)
_FSYNC_THREADS = 8  # a cleaning's files fsynced at once
_CRC = struct.Struct(">I")


@dataclass
class CleanerSettings:
    dedupe_buffer_size: int
    io_buffer_size: int
    io_max_bytes_per_second: float
    threads: int

    @property
    def map_slots(self) -> int:
        # Kafka: 90% load factor, split over the threads.
        return max(int(self.dedupe_buffer_size / self.threads * 0.9) // _MAP_ENTRY, 1)

    @property
    def map_capacity(self) -> int:
        """The most 24-byte entries one thread's share of the dedupe buffer holds."""
        return max(int(self.dedupe_buffer_size / self.threads) // _MAP_ENTRY, 2)


class Throttler:
    """Sleeps so that bytes read and written stay within a rate (Kafka's Throttler)."""

    def __init__(self, rate: float):
        self.rate = rate
        self.start = time.monotonic()
        self.done = 0

    def tick(self, nbytes: int) -> None:
        self.done += nbytes
        ahead = self.done / self.rate - (time.monotonic() - self.start)
        if ahead > 0.001:
            time.sleep(ahead)


@dataclass
class Cleaning:
    """One log's cleaning, prepared on a cleaner thread and installed on the event loop."""

    replaced: list[list[LogSegment]] = field(default_factory=list)  # per group: old segments
    bases: list[int] = field(default_factory=list)  # per group: base offset of the .swap files
    first_dirty: int = 0  # the new cleaner checkpoint
    read: int = 0
    written: int = 0


def cleanable_end(plog, now_ms: int) -> int:
    """Offsets below this may be cleaned: not the active segment, not a segment holding
    a record younger than min.compaction.lag.ms or reaching the last stable offset (Kafka's
    firstUncleanableDirtyOffset)."""
    lag = plog.config["min.compaction.lag.ms"]
    end = plog._segments[-1].base_offset
    stable = plog.last_stable_offset
    for seg in plog._segments[:-1]:
        if (lag > 0 and seg.max_timestamp > now_ms - lag) or (stable is not None and seg.next_offset > stable):
            return seg.base_offset
    return end


def needs_cleaning(plog, first_dirty: int, now_ms: int) -> bool:
    """Kafka's LogCleanerManager.grabFilthiestCompactedLog test for one log."""
    end = cleanable_end(plog, now_ms)
    first_dirty = max(first_dirty, plog.log_start_offset)
    if first_dirty >= end:
        return False
    segs = [s for s in plog._segments[:-1] if s.base_offset < end]
    clean = sum(s.size for s in segs if s.next_offset <= first_dirty)
    dirty = sum(s.size for s in segs if s.next_offset > first_dirty)
    if not dirty:
        return False
    max_lag = plog.config["max.compaction.lag.ms"]
    overdue = (
        any(0 <= s.rolling_base_ms < now_ms - max_lag for s in segs if s.next_offset > first_dirty)
        if max_lag < 2**63 - 1
        else False
    )
    return overdue or dirty / (clean + dirty) >= plog.config["min.cleanable.dirty.ratio"]


class PythonOffsetMap:
    """The key map where ``_cleaner`` is not built: MD5 of the key -> last offset, at most
    ``limit`` keys; its ``add`` and ``retain`` leave every batch to the Python walks."""

    def __init__(self, limit: int):
        self.limit = limit
        self.offsets: dict[bytes, int] = {}

    @property
    def size(self) -> int:
        return len(self.offsets)

    def put(self, key: bytes, offset: int) -> bool:
        """Map ``key`` to ``offset``; False when the key is new and the map is full."""
        digest = hashlib.md5(key, usedforsecurity=False).digest()
        if digest not in self.offsets and len(self.offsets) >= self.limit:
            return False
        self.offsets[digest] = offset
        return True

    def get(self, key: bytes) -> int:
        return self.offsets.get(hashlib.md5(key, usedforsecurity=False).digest(), -1)

    def add(self, payload, count: int, base_offset: int, start: int) -> None:
        return None

    def retain(self, payload, count: int, base_offset: int, reached: int, drop_tombstones: bool) -> None:
        return None


def new_offset_map(settings: CleanerSettings):
    """An empty key map within one thread's share of the dedupe buffer: ``_cleaner.OffsetMap``
    (its digest keyed by a seed drawn for it), or :class:`PythonOffsetMap`."""
    if _cleaner is None:
        return PythonOffsetMap(settings.map_slots)
    return _cleaner.OffsetMap(settings.map_capacity, settings.map_slots, os.urandom(16))


def _records(seg: LogSegment, codecs, chunk: int, throttle: Throttler):
    """(header, buffer, decompressed records payload) for every batch of a sealed segment."""
    for _, h, buf in scan_batches(seg.fd, 0, seg.size, max(chunk, LOG_OVERHEAD + HEADER_SIZE)):
        throttle.tick(h.size)
        payload = memoryview(buf)[h.position + HEADER_SIZE : h.end]
        if h.codec:
            payload = memoryview(codecs[h.codec].decompress(payload))
        yield h, buf, payload


def _walk(h: BatchHeader, payload: memoryview):
    """(offset delta, timestamp delta, key, value is null, record bytes) per record."""
    pos, end = 0, len(payload)
    for _ in range(h.record_count):
        start = pos
        ts_delta, off_delta, key, value, _, pos = _record_at(payload, pos, end)
        k = None if key is None else bytes(payload[key[0] : key[1]])
        yield off_delta, ts_delta, k, value is None, payload[start:pos]


def _add_batch(offsets, h: BatchHeader, payload: memoryview, start: int) -> int:
    """Map the batch's keyed records at or past ``start``: -1, or the offset of the first
    record whose key did not fit (the map is full)."""
    full_at = offsets.add(payload, h.record_count, h.base_offset, start)
    if full_at is not None:
        return full_at
    for off_delta, _, key, _, _ in _walk(h, payload):  # the C walk did not take the batch
        offset = h.base_offset + off_delta
        if key is not None and offset >= start and not offsets.put(key, offset):
            return offset
    return -1


def _retain_batch(offsets, h: BatchHeader, payload: memoryview, reached: int, drop_tombstones: bool):
    """(records kept, their bytes or None when all are): every record at or past
    ``reached`` (past the map), and below it a record whose key has no later offset in the
    map, unless it is a tombstone and ``drop_tombstones``."""
    found = offsets.retain(payload, h.record_count, h.base_offset, reached, drop_tombstones)
    if found is not None:
        return found
    kept = []  # the C walk did not take the batch
    for off_delta, _, key, tombstone, raw in _walk(h, payload):
        offset = h.base_offset + off_delta
        if offset < reached:
            if key is not None and offsets.get(key) > offset:
                continue  # a later record of the key is in the map
            if tombstone and drop_tombstones:
                continue
        kept.append(raw)
    return len(kept), None if len(kept) == h.record_count else b"".join(kept)


def _note_producer(last: dict[int, int], h: BatchHeader) -> None:
    if h.producer_id != NO_PRODUCER_ID and h.base_offset > last.get(h.producer_id, -1):
        last[h.producer_id] = h.base_offset


def build_map(
    plog,
    codecs,
    first_dirty: int,
    end: int,
    settings: CleanerSettings,
    throttle,
    aborted: AbortedByProducer,
    last: dict[int, int],
) -> tuple[object, int, list[LogSegment]]:
    """The key map (key -> last offset) over [first_dirty, end), records of aborted
    transactions left out, the offset it reached (``end``, or once the map is full the
    first record whose key did not fit: Kafka's buildOffsetMap) and the segments it read
    whole, whose producers' last batches it noted in ``last``."""
    offsets = new_offset_map(settings)
    reached = first_dirty
    whole: list[LogSegment] = []
    for seg in plog._segments[:-1]:
        if seg.next_offset <= first_dirty or seg.base_offset >= end:
            continue
        for h, _, payload in _records(seg, codecs, settings.io_buffer_size, throttle):
            _note_producer(last, h)
            if h.is_control or h.last_offset < first_dirty:
                continue
            if h.is_transactional and is_aborted(aborted, h.producer_id, h.base_offset):
                continue
            full_at = _add_batch(offsets, h, payload, first_dirty)
            if full_at >= 0:
                return offsets, full_at, whole
        reached = seg.next_offset
        whole.append(seg)
    return offsets, reached, whole


def producer_last_batches(plog, chunk: int, last: dict[int, int], read: list[LogSegment]) -> set[int]:
    """Base offsets of the batch holding each producer's last sequence: ``last`` holds
    them for the segments ``read`` already; the other segments' headers are scanned."""
    last, done = dict(last), {id(seg) for seg in read}
    for seg in list(plog._segments):
        if id(seg) not in done:
            for _, h, _ in scan_batches(seg.fd, 0, seg.size, chunk):
                _note_producer(last, h)
    return set(last.values())


def _groups(segs: list[LogSegment], max_size: int, max_index: int) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose total log and index sizes
    fit one segment and whose offsets fit a relative int32."""
    groups: list[list[LogSegment]] = []
    while segs:
        group = [segs.pop(0)]
        size, index = group[0].size, group[0].offset_index.entries * 8
        while segs:
            nxt = segs[0]
            if (
                size + nxt.size > max_size
                or index + nxt.offset_index.entries * 8 > max_index
                or nxt.next_offset - 1 - group[0].base_offset > 2**31 - 1
            ):
                break
            size += nxt.size
            index += nxt.offset_index.entries * 8
            group.append(segs.pop(0))
        groups.append(group)
    return groups


def _rewrite_batch(h: BatchHeader, count: int, records: bytes, codecs) -> bytes:
    """The batch with only the ``count`` kept ``records`` (their deltas unchanged); the
    header keeps its base offset, last offset delta, timestamps and producer fields, as
    Kafka keeps them when it filters a batch."""
    payload = records
    if h.codec and count:
        payload = codecs[h.codec].compress(payload)
    attributes = h.attributes if count else h.attributes & ~0x07
    batch = bytearray(
        HEADER.pack(
            h.base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(payload),
            h.leader_epoch,
            h.magic,
            0,
            attributes,
            h.last_offset_delta,
            h.base_timestamp,
            h.max_timestamp,
            h.producer_id,
            h.producer_epoch,
            h.base_sequence,
            count,
        )
    )
    batch += payload
    _CRC.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def clean(plog, codecs, first_dirty: int, now_ms: int, settings: CleanerSettings) -> Cleaning | None:
    """Prepare a cleaning of ``plog`` (cleaner thread): ``.swap`` files ready to install."""
    throttle = Throttler(settings.io_max_bytes_per_second)
    end = cleanable_end(plog, now_ms)
    first_dirty = max(first_dirty, plog.log_start_offset)
    aborted = by_producer(plog.aborted_txns(plog.log_start_offset, end))
    last: dict[int, int] = {}  # per producer: the base offset of its last batch
    offsets, reached, read = build_map(plog, codecs, first_dirty, end, settings, throttle, aborted, last)
    if reached <= first_dirty:
        return None
    keep_batches = producer_last_batches(plog, settings.io_buffer_size or 65536, last, read)
    delete_horizon = now_ms - plog.config["delete.retention.ms"]
    segs = [s for s in plog._segments[:-1] if s.base_offset < reached]
    result = Cleaning(first_dirty=reached)
    txn_data_kept: dict[int, bool] = {}  # per producer: whether its transaction's records remain
    written: list = []  # the .cleaned files
    for group in _groups(segs, plog.config["segment.bytes"], plog.config["segment.index.bytes"]):
        base = group[0].base_offset
        cleaned = LogSegment(
            plog.dir, base, plog.config["index.interval.bytes"], plog.config["segment.index.bytes"], suffix=CLEANED
        )
        cleaned.make_active()
        dropped_markers: set[int] = set()
        for seg in group:
            # Kafka: tombstones and transaction markers in a segment last modified before
            # the horizon go (a marker only once no record of its transaction is left).
            drop_tombstones = os.fstat(seg.fd).st_mtime * 1000 < delete_horizon
            for h, buf, payload in _records(seg, codecs, settings.io_buffer_size, throttle):
                result.read += h.size
                if h.is_control:
                    has_data = txn_data_kept.pop(h.producer_id, False)
                    if has_data or not drop_tombstones or h.base_offset in keep_batches:
                        out = bytes(buf[h.position : h.end])
                    else:
                        dropped_markers.add(h.base_offset)
                        continue
                elif h.is_transactional and is_aborted(aborted, h.producer_id, h.base_offset):
                    txn_data_kept.setdefault(h.producer_id, False)
                    continue  # an aborted transaction's records go
                else:
                    count, records = _retain_batch(offsets, h, payload, reached, drop_tombstones)
                    if records is None:
                        out = bytes(buf[h.position : h.end])
                    elif count or h.base_offset in keep_batches:
                        out = _rewrite_batch(h, count, records, codecs)
                    else:
                        continue
                    if h.is_transactional:
                        txn_data_kept[h.producer_id] = True
                cleaned.append(out)
                result.written += len(out)
                throttle.tick(len(out))
            for txn in seg.txn_index.entries:  # an entry stays as long as its marker
                if txn.last_offset not in dropped_markers:
                    cleaned.txn_index.append(txn)
        cleaned.seal()
        cleaned.close()
        written.extend(cleaned.paths())
        result.replaced.append(group)
        result.bases.append(base)
    # Every file fsynced once all are written, several at once (concurrent fsyncs share the
    # journal commits and the disk's cache flushes), then renamed: a .swap is whole on disk.
    with ThreadPoolExecutor(max(min(len(written), _FSYNC_THREADS), 1), "brokkr-cleaner-sync") as pool:
        list(pool.map(fsync_path, written))
    for path in written:
        os.replace(path, path.with_name(path.name[: -len(CLEANED)] + SWAP))
    return result


def complete_swaps(directory) -> None:
    """Recovery: a ``.log.swap`` is a whole cleaned segment (fsynced before it was
    renamed), so finish its swap as Kafka's LogLoader does: remove the segments it
    replaces (offsets from its base to its last offset) and give it its final name."""
    swaps = sorted(directory.glob(f"*{LOG_SUFFIX}{SWAP}"))
    for swap in swaps:
        stem = swap.name[: -len(LOG_SUFFIX + SWAP)]
        if not stem.isdigit():
            continue  # not one of ours: removed with the other leftovers
        base = int(stem)
        fd = os.open(swap, os.O_RDONLY)
        try:
            size, end = os.fstat(fd).st_size, base
            for _, h, _ in scan_batches(fd, 0, size):
                end = h.last_offset + 1
        finally:
            os.close(fd)
        if size and end == base:
            continue  # not a whole cleaned segment: removed with the leftovers, the old segments stay
        for old in directory.glob(f"*{LOG_SUFFIX}"):
            if old.stem.isdigit() and base <= int(old.stem) < end:
                for path in (old, *(old.with_suffix(suffix) for suffix in INDEX_SUFFIXES)):
                    path.unlink(missing_ok=True)
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            path = segment_file(directory, base, suffix + SWAP)
            path.unlink(missing_ok=True)  # rebuilt on load
        txn_swap = segment_file(directory, base, TXN_INDEX_SUFFIX + SWAP)
        if txn_swap.exists():  # not rebuilt from the segment alone: keep it
            os.replace(txn_swap, segment_file(directory, base, TXN_INDEX_SUFFIX))
        log.warning("completing the swap of %s", swap)
        os.replace(swap, segment_file(directory, base, LOG_SUFFIX))


class LogCleaner:
    """The broker's cleaner threads (Kafka's LogCleaner): which logs to clean, on which
    thread, and installing the result on the event loop."""

    def __init__(self, config, codecs):
        self.enabled = config["log.cleaner.enable"]
        threads = config["log.cleaner.threads"]
        self.settings = CleanerSettings(
            config["log.cleaner.dedupe.buffer.size"],
            config["log.cleaner.io.buffer.size"] // threads // 2,  # Kafka: a read and a write buffer
            config["log.cleaner.io.max.bytes.per.second"],
            threads,
        )
        if config["log.cleaner.dedupe.buffer.size"] / threads < 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread")
        if config["log.cleaner.io.max.bytes.per.second"] <= 0:
            raise ConfigError("log.cleaner.io.max.bytes.per.second must be positive")
        self.codecs = codecs
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="brokkr-cleaner") if self.enabled else None
        #: Bytes read and written by finished cleanings (benchmarks and tests).
        self.stats = {"cleanings": 0, "read": 0, "written": 0}

    def schedule(self, logs) -> None:
        if self.pool is None:
            return
        loop = asyncio.get_running_loop()
        now_ms = int(time.time() * 1000)
        for plog in logs:
            if plog.cleaning or plog.deleted or "compact" not in plog.config["cleanup.policy"]:
                continue
            if not needs_cleaning(plog, plog.first_dirty, now_ms):
                continue
            plog.cleaning = True
            future = self.pool.submit(clean, plog, self.codecs, plog.first_dirty, now_ms, self.settings)
            future.add_done_callback(lambda f, plog=plog: loop.call_soon_threadsafe(self._install, plog, f))

    def _install(self, plog, future) -> None:
        plog.cleaning = False
        try:
            cleaning = future.result()
        except Exception:
            log.exception("cleaning %s failed", plog.dir)
            return
        if cleaning is not None and plog.install_cleaned(cleaning):
            self.stats["cleanings"] += 1
            self.stats["read"] += cleaning.read
            self.stats["written"] += cleaning.written
            log.info("cleaned %s: %d bytes to %d", plog.dir.name, cleaning.read, cleaning.written)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
