"""Retention: which whole segments a partition may drop (Kafka's
``UnifiedLog.deleteOldSegments``), the same for every storage backend.

With ``cleanup.policy`` containing ``delete``, a segment goes when it breaches
``retention.ms`` (its largest timestamp is older than that) or ``retention.bytes`` (the
partition is larger than that without it). Under any policy a segment goes when it lies
wholly below the log start offset (DeleteRecords). Segments are dropped oldest first and
only while each breaches; the active segment is never dropped, nor one holding offsets
at or above the high watermark.
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
    for seg, following in zip(segments, segments[1:]):  # never the last (active) segment
        if following.base_offset > high_watermark:
            break
        below_start = following.base_offset <= log_start_offset
        too_old = delete_policy and retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
        too_big = excess >= seg.size
        if not (below_start or too_old or too_big):
            break
        excess -= seg.size
        keep_from = following.base_offset
    return keep_from
