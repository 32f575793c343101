"""The checks of Kafka's ``LogValidator`` that look at individual records: keys on compacted
topics and timestamps against ``message.timestamp.before.max.ms``/``after.max.ms``.

They answer with KIP-467 record errors, (batch index, message), in Kafka's words. Every
list-wide question is asked in C first (``min``/``max`` of the timestamp deltas, the
indexes of keyless records the scan collected); a Python loop over records runs only to
word the errors of a batch that is being rejected.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import attrs

from .config import LONG_MAX
from .errors import ErrorCode
from .protocol.records import NO_TIMESTAMP, BatchHeader, RecordScan, decode_records

if TYPE_CHECKING:
    from .config import TopicConfig
    from .context import RequestContext

LOG_APPEND_TIME = "LogAppendTime"


@attrs.define  # not frozen: a frozen class's __init__ costs three times as much, once a batch
class RecordRules:
    """One topic's record rules at one instant (``now``, in ms), built for each batch whose
    records are walked (:func:`need_records` settles the others) and not changed after."""

    partition: str  # "topic-N", as Kafka names a TopicPartition in its messages
    now: int
    log_append_time: bool
    compacted: bool
    before_max_ms: int
    after_max_ms: int

    @staticmethod
    def settings(config: TopicConfig) -> tuple[bool, bool, int, int]:
        """The topic's ``log_append_time``, ``compacted``, ``before_max_ms`` and
        ``after_max_ms``, read once per change of its settings."""
        settings = config.derived.get(RecordRules)
        if settings is None:
            settings = config.derived[RecordRules] = (
                config["message.timestamp.type"] == LOG_APPEND_TIME,
                "compact" in config["cleanup.policy"],
                config["message.timestamp.before.max.ms"],
                config["message.timestamp.after.max.ms"],
            )
        return settings

    def pass_at_a_glance(self, header: BatchHeader, scan: RecordScan) -> bool:
        """Whether every record keeps the rules, told from the scan's arrays without
        per-record Python (False may still mean all records pass: :meth:`errors` decides)."""
        if (self.compacted and scan.keyless) or header.log_append_time:
            return False
        if self.log_append_time or not header.record_count:
            return True
        return self._within_bounds(header, scan)

    def _within_bounds(self, header: BatchHeader, scan: RecordScan) -> bool:
        """Whether the records' timestamps (CreateTime) lie within before/after.max.ms of now."""
        low, high = header.base_timestamp + scan.min_timestamp_delta, header.base_timestamp + scan.max_timestamp_delta
        return self.now - low <= self.before_max_ms and high - self.now <= self.after_max_ms

    def max_timestamp(self, header: BatchHeader, scan: RecordScan) -> int:
        """The batch's max timestamp as Kafka recomputes it from its (valid) records."""
        if self.log_append_time:
            return self.now
        if header.log_append_time:  # every record reads the header's max timestamp
            return header.max_timestamp
        return max(NO_TIMESTAMP, header.base_timestamp + scan.max_timestamp_delta)

    def errors(
        self, header: BatchHeader, scan: RecordScan, payload: bytes | memoryview
    ) -> tuple[ErrorCode, list[tuple[int, str]]]:
        """The batch's record errors in record order, at most one per record (a missing key
        before a timestamp), and the partition's error: INVALID_TIMESTAMP if any timestamp
        is wrong, else INVALID_RECORD. No errors: ``(NONE, [])``."""
        found: dict[int, str] = {}
        if self.compacted:
            message = f"Compacted topic cannot accept message without key in topic partition {self.partition}"
            found = dict.fromkeys(scan.keyless, message)
        timestamps = {i: m for i, m in self._timestamp_errors(header, scan, payload).items() if i not in found}
        if not found and not timestamps:
            return ErrorCode.NONE, []
        code = ErrorCode.INVALID_TIMESTAMP if timestamps else ErrorCode.INVALID_RECORD
        return code, sorted({**found, **timestamps}.items())

    def _timestamp_errors(self, header: BatchHeader, scan: RecordScan, payload: bytes | memoryview) -> dict[int, str]:
        """Kafka's ``validateTimestamp``, for each record that breaks it."""
        if header.log_append_time and (self.log_append_time or header.max_timestamp == NO_TIMESTAMP):
            return self._wrong_type_errors(header, payload)
        if self.log_append_time:
            return {}
        if header.log_append_time:  # every record of the batch reads the header's max timestamp
            timestamps = [header.max_timestamp] * header.record_count
        else:
            if self._within_bounds(header, scan):
                return {}
            timestamps = [header.base_timestamp + delta for delta in scan.timestamp_deltas]
        return {
            i: f"Timestamp {ts} of message with offset {header.base_offset + scan.offset_deltas[i]} is out of range. "
            f"The timestamp should be within [{self.now - self.before_max_ms}, {self.now + self.after_max_ms}]"
            for i, ts in enumerate(timestamps)
            if ts != NO_TIMESTAMP and (self.now - ts > self.before_max_ms or ts - self.now > self.after_max_ms)
        }

    def _wrong_type_errors(self, header: BatchHeader, payload: bytes | memoryview) -> dict[int, str]:
        return {
            i: f"Invalid timestamp type in message DefaultRecord(offset={r.offset}, timestamp={r.timestamp}, "
            f"key={len(r.key or b'')} bytes, value={len(r.value or b'')} bytes). "
            "Producer should not set timestamp type to LogAppendTime."
            for i, r in enumerate(decode_records(header, payload))
        }


def rejection_message(record_errors: list[tuple[int, str]]) -> str:
    """The partition's error message for a batch refused with KIP-467 record errors, in
    Kafka's words (``LogValidator.processRecordErrors``): their number and the first three."""
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in record_errors[:3])
    return (
        f"One or more records have been rejected due to {len(record_errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )


def need_records(header: BatchHeader, now: int, settings: tuple[bool, bool, int, int]) -> bool:
    """Whether an uncompressed batch must be walked, or its header settles every rule of a
    topic of these :meth:`RecordRules.settings` at ``now`` (a function, not a method: the
    common batch is settled without building a RecordRules).

    Keys are only in the records. A producer setting LogAppendTime is refused record by
    record. Otherwise the header's max timestamp bounds the records from above; nothing
    bounds them from below, but with the default before.max.ms (Long.MAX_VALUE) Kafka's
    check, ``now - timestamp > before.max.ms`` on longs, can never be true.
    """
    log_append_time, compacted, before_max_ms, after_max_ms = settings
    if compacted or header.log_append_time:
        return True
    if log_append_time:
        return False
    return before_max_ms < LONG_MAX or header.max_timestamp - now > after_max_ms


class RefusalLog:
    """The broker's log of the batches Produce refuses (a RecordsError of validation, a
    plugin's validator or the producer state: the partition's error code and message, with
    KIP-467 record errors), as Kafka's ReplicaManager logs each refused append ("Error
    processing append operation on partition"). Bounded: the first refusal of a partition
    is logged with its reason, then at most one line a partition every :attr:`EVERY_S`
    seconds, with how many more there were, so that a client sending refused batches in a
    loop does not flood the log. A producer fenced by a newer epoch is logged at INFO (it is
    how transactions end a zombie), anything else at WARNING."""

    EVERY_S = 60.0
    #: Partitions remembered at most (forgotten all at once past it).
    MAX_PARTITIONS = 10_000
    log = logging.getLogger("brokkr.produce")

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, int]] = {}  # partition -> (when last logged, refusals since)
        self.clock = time.monotonic

    def refused(self, partition: str, context: RequestContext, code: ErrorCode, message: str) -> None:
        now = self.clock()
        last = self._last.get(partition)
        if last is not None and now - last[0] < self.EVERY_S:
            self._last[partition] = (last[0], last[1] + 1)
            return
        if len(self._last) >= self.MAX_PARTITIONS:
            self._last.clear()
        self._last[partition] = (now, 0)
        more = f" ({last[1]} more since the last line)" if last is not None and last[1] else ""
        level = logging.INFO if code == ErrorCode.INVALID_PRODUCER_EPOCH else logging.WARNING
        self.log.log(
            level,
            "produce to %s refused with %s%s (client %s at %s, principal %s): %s",
            partition,
            getattr(code, "name", code),  # a plugin may raise with a plain int
            more,
            context.client_id,
            context.client_host,
            context.principal,
            message,
        )
