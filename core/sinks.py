"""The sink contract: what a sink is told, when, and how it reports progress.

A sink copies a broker's partitions somewhere else (a data lake, an object store, another
system) beside the broker, never on its produce path. It is an ordinary plugin of three
observer hooks and one progress hook:

``brokkr_segment_rolled(partition, segment, broker)``
    a segment was closed; ``segment.path`` names its ``.log`` file, whose bytes will not
    change again until retention deletes it. Closed segments are the sink's main unit of
    work.
``brokkr_high_watermark_advanced(partition, old, new, broker)``
    records below ``new`` are visible. A sink that also mirrors the active segment (on an
    interval of its own) reads it only up to the last high watermark it was told.
``brokkr_broker_started`` / ``brokkr_broker_stopping``
    start and stop the sink's background work; the closed segments of earlier runs are
    listed by ``partition.log.segments()[:-1]`` at start.
``brokkr_sink_mirrored_offset(partition, broker)``
    the sink's progress: every offset below the returned one is mirrored (stored durably
    at the destination). Retention (:meth:`brokkr.core.broker.Broker.apply_retention`)
    never drops a segment holding an offset at or above the smallest answer, so a sink
    that falls behind holds data back instead of losing it. A sink lets retention go on
    regardless by answering None (the Spark sink does so with
    ``brokkr.sink.retention.wait=false``).

The hooks only *record* work (a list append, an integer store): the sink does its copying
in another thread or process and catches up at its own pace (backpressure: the broker
never waits for a sink). :class:`SinkProgress` is the bookkeeping most sinks need.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence

import attrs

from .log import SegmentInfo


@attrs.define
class PartitionWork:
    """What a sink has been told about one partition: its closed segments not yet mirrored
    and the last high watermark."""

    closed: list[SegmentInfo] = attrs.field(factory=list)
    high_watermark: int = 0


class SinkProgress:
    """Per topic-partition: the work recorded from the hooks and the mirrored offset.

    The event loop records work (segment_closed, high_watermark) while a sink's worker
    thread marks progress (mark_mirrored), which replaces a partition's list of closed
    segments: every change holds one lock, so a segment closed while the worker filters
    the list is never dropped."""

    def __init__(self) -> None:
        self.work: dict[tuple[str, int], PartitionWork] = {}
        self.mirrored: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def segment_closed(self, topic: str, partition: int, segment: SegmentInfo) -> None:
        with self._lock:
            work = self.work.setdefault((topic, partition), PartitionWork())
            if not any(s.base_offset == segment.base_offset for s in work.closed):
                work.closed.append(segment)

    def seed(self, topic: str, partition: int, segments: Sequence[SegmentInfo], high_watermark: int) -> None:
        """Start the partition afresh from the closed segments (all but the last, active
        one) found now."""
        with self._lock:
            self.work.pop((topic, partition), None)
        for seg in segments[:-1]:
            self.segment_closed(topic, partition, seg)
        self.high_watermark(topic, partition, high_watermark)

    def high_watermark(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            work = self.work.setdefault((topic, partition), PartitionWork())
            work.high_watermark = max(work.high_watermark, offset)

    def closed(self, topic: str, partition: int) -> list[SegmentInfo]:
        """The closed segments not yet mirrored, oldest first (a copy)."""
        with self._lock:
            return sorted(self.work[(topic, partition)].closed, key=lambda s: s.base_offset)

    def mark_mirrored(self, topic: str, partition: int, offset: int) -> None:
        """Offsets below ``offset`` are mirrored; closed segments wholly below it are done."""
        key = (topic, partition)
        with self._lock:
            self.mirrored[key] = max(self.mirrored.get(key, 0), offset)
            work = self.work.get(key)
            if work is not None:
                work.closed = [s for s in work.closed if s.next_offset > offset]

    def mirrored_offset(self, topic: str, partition: int) -> int:
        return self.mirrored.get((topic, partition), 0)


def retention_limit(offset: int | None, held: Iterable[int | None], segments: Sequence[SegmentInfo]) -> int | None:
    """``offset`` (retention's new log start, or None) lowered so that no segment holding an
    offset at or above ``min(held)`` is dropped: the base of the segment containing it."""
    limits = [h for h in held if h is not None]
    if offset is None or not limits:
        return offset
    limit = min(limits)
    if offset <= limit:
        return offset
    bases = [s.base_offset for s in segments if s.base_offset <= limit]
    kept = max(bases, default=None)
    return kept if kept is not None and kept > segments[0].base_offset else None
