"""In-memory storage: each partition's appends held in Python lists, grouped in segments.

Selected with ``brokkr.storage=memory``. Nothing survives a restart (not even the topics);
useful for tests, for embedding, and as the smallest example of a storage plugin.
Segments roll on ``segment.bytes`` and ``segment.ms`` as on disk, so retention and
``brokkr_segment_rolled`` behave exactly as they would with files.
"""

from __future__ import annotations

import bisect
import time

from brokkr.core.log import (
    AppendInfo,
    Capability,
    OffsetOutOfRange,
    SegmentInfo,
    StoredTopic,
    TimestampOffset,
    batch_records,
)
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.records import iter_batches_untrusted
from brokkr.core.txn_index import AbortedTxnList


class _Segment:
    __slots__ = ("base_offset", "batches", "firsts", "lasts", "max_timestamps", "size", "created")

    def __init__(self, base_offset: int):
        self.base_offset = base_offset  # of the segment, even once its first batches are gone
        self.batches: list[bytes | bytearray] = []  # one entry per append: whole batches
        self.firsts: list[int] = []
        self.lasts: list[int] = []
        self.max_timestamps: list[int] = []
        self.size = 0
        self.created = time.monotonic()


class MemoryLog(AbortedTxnList):
    """One partition held in memory (satisfies :class:`brokkr.core.log.PartitionLog`,
    aborted transactions included: :class:`~brokkr.core.txn_index.AbortedTxnList`)."""

    def __init__(self, config, codecs):
        self.config = config
        self.codecs = codecs
        self._segments = [_Segment(0)]
        self._start = 0
        self._end = 0
        self._snapshots: list[tuple[int, bytes]] = []  # the two newest producer snapshots, oldest first
        super().__init__()

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    def append(self, records, first_offset, last_offset, max_timestamp, record_count) -> AppendInfo:
        rolled = None
        seg = self._segments[-1]
        too_big = seg.size + len(records) > self.config["segment.bytes"]
        too_old = (time.monotonic() - seg.created) * 1000 >= self.config["segment.ms"]
        if seg.batches and (too_big or too_old):
            rolled = self._info(-1)
            seg = _Segment(first_offset)
            self._segments.append(seg)
        # ``records`` may be a view of a request buffer the broker reuses: keep a copy.
        seg.batches.append(bytes(records))
        seg.firsts.append(first_offset)
        seg.lasts.append(last_offset)
        seg.max_timestamps.append(max_timestamp)
        seg.size += len(records)
        self._end = last_offset + 1
        return AppendInfo(first_offset, last_offset, record_count, max_timestamp, len(records), rolled)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        if offset < self._start or offset > self._end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start}, {self._end}]")
        out: list[bytes] = []
        size = 0
        si = max(bisect.bisect_right([s.base_offset for s in self._segments], offset) - 1, 0)
        for seg in self._segments[si:]:
            bi = bisect.bisect_left(seg.lasts, offset)
            for batch, first in zip(seg.batches[bi:], seg.firsts[bi:]):
                if first >= max_offset:
                    return b"".join(out)
                if size + len(batch) > max_bytes and not (min_one and not out):
                    return b"".join(out)
                out.append(batch)
                size += len(batch)
        return b"".join(out)

    def _batches(self):
        for seg in self._segments:
            yield from zip(seg.batches, seg.max_timestamps)

    def _records(self, entry: bytes):
        return [rec for h in iter_batches_untrusted(entry) for rec in batch_records(entry, h, self.codecs)]

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        for batch, max_ts in self._batches():
            if max_ts >= timestamp:
                for rec in self._records(batch):
                    if rec.timestamp >= timestamp and rec.offset >= self._start:
                        return TimestampOffset(rec.offset, rec.timestamp)
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        best = None
        for batch, max_ts in self._batches():
            if best is None or max_ts > best[1]:
                best = (batch, max_ts)
        if best is None:
            return None
        records = self._records(best[0])
        rec = next((r for r in records if r.timestamp == best[1]), records[-1])
        return TimestampOffset(rec.offset, best[1])

    def _info(self, index: int) -> SegmentInfo:
        index %= len(self._segments)
        seg = self._segments[index]
        following = self._segments[index + 1].base_offset if index + 1 < len(self._segments) else self._end
        return SegmentInfo(seg.base_offset, following, seg.size, max(seg.max_timestamps, default=-1))

    def segments(self) -> list[SegmentInfo]:
        return [self._info(i) for i in range(len(self._segments))]

    def delete_before(self, offset: int) -> None:
        if offset < self._start:
            return
        self._start = offset
        if offset == self._end and self._segments[-1].batches:  # every record goes: a new, empty segment (Kafka's roll)
            self._segments = [_Segment(offset)]
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            del self._segments[0]
        self.drop_aborted_txns_before(offset)

    def truncate_to(self, offset: int) -> None:
        if offset >= self._end:
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            self._segments.pop()
        seg = self._segments[-1]
        keep = bisect.bisect_left(seg.firsts, offset)
        if keep < len(seg.firsts) and seg.firsts[keep] != offset:
            raise ValueError(f"offset {offset} is not a batch boundary")
        for column in (seg.batches, seg.firsts, seg.lasts, seg.max_timestamps):
            del column[keep:]
        seg.size = sum(len(b) for b in seg.batches)
        self._end = offset
        self._start = min(self._start, offset)
        self._snapshots = [s for s in self._snapshots if s[0] <= offset]
        self.truncate_aborted_txns(offset)

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        kept = [s for s in self._snapshots if s[0] != offset]
        self._snapshots = sorted([*kept, (offset, bytes(data))])[-2:]

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        return max((s for s in self._snapshots if s[0] <= self._end), default=None)

    def close(self) -> None:
        pass

    def delete(self) -> None:
        self._segments = [_Segment(self._end)]
        self._start = self._end
        self._snapshots = []
        self.entries = []


class MemoryStorage:
    """Satisfies :class:`brokkr.core.log.Storage`; keeps nothing across restarts."""

    durable = False
    #: Its logs keep aborted transactions and producer snapshots (in memory); no leader
    #: epochs, so a cluster refuses it.
    capabilities = Capability.TXN_INDEX | Capability.PRODUCER_SNAPSHOTS

    def __init__(self, codecs):
        self.codecs = codecs
        self._state: dict[str, str] = {}

    def load_topics(self) -> list[StoredTopic]:
        return []

    def save_topics(self, topics: list[StoredTopic]) -> None:
        pass

    def open_log(self, topic: StoredTopic, partition: int, config) -> MemoryLog:
        return MemoryLog(config, self.codecs)

    def read_state(self, name: str) -> str | None:
        return self._state.get(name)

    def write_state(self, name: str, text: str) -> None:
        self._state[name] = text

    def checkpoint(self) -> None:
        pass

    def close(self) -> None:
        pass


@hookimpl(trylast=True)
def brokkr_open_storage(broker) -> MemoryStorage | None:
    if broker.config["brokkr.storage"] != "memory":
        return None
    return MemoryStorage(broker.codecs)
