"""Retention: which whole segments a partition may drop (Kafka's
``UnifiedLog.deleteOldSegments``), the same for every storage backend.

With ``cleanup.policy`` containing ``delete``, a segment goes when it breaches
``retention.ms`` (its largest timestamp is older than that) or ``retention.bytes`` (the
partition is larger than that without it). Under any policy a segment goes when it lies
wholly below the log start offset (DeleteRecords). Segments are dropped oldest first and
only while each breaches, never one holding offsets at or above the high watermark. The
active segment goes too when it breaches retention.ms or retention.bytes and holds
records: the new log start is then the log end offset, and the log rolls a new, empty
segment there before it drops the old one (Kafka's ``deletableSegments`` and
``deleteSegments``), so a partition whose only segment is too old is emptied, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .log import SegmentInfo


def retention_offset(
    segments: Sequence[SegmentInfo],
    config: Mapping[str, Any],
    now_ms: int,
    high_watermark: int,
    log_start_offset: int,
) -> int | None:
    """The new log start offset (the base of the first segment kept), or None to keep all."""
    delete_policy = "delete" in config["cleanup.policy"]
    retention_ms = config["retention.ms"]
    retention_bytes = config["retention.bytes"]
    excess = sum(s.size for s in segments) - retention_bytes if delete_policy and retention_bytes >= 0 else -1
    keep_from = None
    for i, seg in enumerate(segments):
        active = i == len(segments) - 1
        if seg.next_offset > high_watermark or (active and seg.size == 0):
            break
        below_start = not active and seg.next_offset <= log_start_offset
        too_old = delete_policy and retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
        too_big = excess >= seg.size
        if not (below_start or too_old or too_big):
            break
        excess -= seg.size
        keep_from = seg.next_offset
    return keep_from
