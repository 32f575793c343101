"""Writing to a partition: the one way in, for every origin (Kafka's
``ReplicaManager.appendRecords`` and ``Partition.appendRecordsToLeader``/
``appendRecordsToFollowerOrFutureReplica``), with one rule per question an append raises.

===========  ====================================  ====================  ========================
origin       what it appends                       min.insync.replicas   answered once
===========  ====================================  ====================  ========================
CLIENT       a producer's batch, validated by      with acks=-1          acks=-1: the ISR has it
             ``brokkr_validate_records``                                 (Produce)
COORDINATOR  a coordinator's own batch (groups,    never (Kafka's        the ISR has it
             transactions, share state)            writer appends
                                                   with acks=1)
MARKER       a transaction's COMMIT/ABORT marker   always (acks=-1)      the ISR has it
REPLICATION  the leader's batches, as they are     never                 (a follower answers no one)
===========  ====================================  ====================  ========================

- :func:`append` writes as leader (CLIENT, COORDINATOR, MARKER): the min.insync.replicas
  rule, the producer-state checks, offsets, the append, then :func:`appended` (the
  ``brokkr_after_log_append`` observers and the high watermark). Raises RecordsError with
  the error a producer gets, or OSError (the disk); :func:`error_of` maps either to Kafka's
  answer, the one error mapping of every origin.
- :func:`wait_acknowledged` is the one acks wait: until the completion policy (the
  ``brokkr_produce_complete`` hook; the built-in one, below, is Kafka's DelayedProduce
  check) says each partition holds its write, the waiting itself done by the purgatory
  (:mod:`brokkr.core.delayed`); then the error of each partition that did not make it.
- :func:`append_replicated` is a follower's append (``ReplicaManager`` calls it).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .delayed import DelayedOperation
from .errors import ErrorCode
from .plugins import hookimpl
from .protocol.records import iter_batches_untrusted
from .validation import RecordsError, ValidatedRecords

if TYPE_CHECKING:
    from .broker import Broker
    from .log import AppendInfo
    from .partition import Partition
    from .txn_markers import TxnMarker

log = logging.getLogger("brokkr")


class Origin(enum.Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    MARKER = "marker"
    REPLICATION = "replication"


def not_enough_replicas(partition: Partition) -> str | None:
    """Kafka's message when the partition's ISR is below its ``min.insync.replicas`` (None when not)."""
    required = partition.config["min.insync.replicas"]
    if len(partition.isr) >= required:
        return None
    return (
        f"The size of the current ISR {set(partition.isr)} is insufficient to satisfy the min.isr requirement "
        f"of {required} for partition {partition.name}"
    )


def append(
    broker: Broker, partition: Partition, records: ValidatedRecords | TxnMarker, origin: Origin, acks: int = -1
) -> AppendInfo:
    """Append as leader (see the module docstring): ``records`` is a TxnMarker for MARKER.
    A producer's retry of a batch already in the log changes nothing: its original
    offsets are returned, ``duplicate`` set."""
    if origin is Origin.MARKER or (acks == -1 and origin is Origin.CLIENT):
        refusal = not_enough_replicas(partition)
        if refusal is not None:
            raise RecordsError(ErrorCode.NOT_ENOUGH_REPLICAS, refusal)
    if origin is Origin.MARKER:
        marker = records
        info = partition.append_marker(
            marker.producer_id,
            marker.producer_epoch,
            marker.committed,
            marker.coordinator_epoch,
            int(time.time() * 1000),
        )
        broker.hot.notify(  # an observer: its failure leaves the marker standing
            "brokkr_txn_marker_written", partition=partition, marker=marker, offset=info.first_offset, broker=broker
        )
    else:
        info = partition.append(records)
        if info.duplicate:
            return info
    appended(broker, partition, info)
    return info


def appended(broker: Broker, partition: Partition, info: AppendInfo) -> None:
    """After a leader's append: fire the observers and advance the high watermark (alone:
    to the log end). An append the log fsyncs in the background (``info.flushed``:
    ``flush.messages`` reached) is made visible only once that fsync is done, as Kafka's
    in-line flush does; a failed fsync leaves it invisible until a later append moves the
    high watermark past it."""
    if info.flushed is not None:
        flushed = asyncio.wrap_future(info.flushed)
        flushed.add_done_callback(lambda f: f.cancelled() or f.exception() or _made_visible(broker, partition, info))
        return
    _made_visible(broker, partition, info)


def _made_visible(broker: Broker, partition: Partition, info: AppendInfo) -> None:
    # Observers (``broker.hot``) never raise: whatever they do, the high watermark moves.
    hot = broker.hot
    if hot.brokkr_after_log_append is not None:
        hot.brokkr_after_log_append(partition=partition, info=info, broker=broker)
    if info.rolled is not None and hot.brokkr_segment_rolled is not None:
        hot.brokkr_segment_rolled(partition=partition, segment=info.rolled, broker=broker)
    if not broker.advance_high_watermark(partition, partition.high_watermark_candidate()):
        # Kafka's tryCompleteDelayedRequests: followers' fetches parked on this
        # partition wake on new data even while the high watermark waits for them.
        broker.purgatory.check(partition)


def error_of(exc: BaseException, partition: Partition) -> tuple[ErrorCode, str | None]:
    """The error code and message an append that raised ``exc`` is answered with."""
    if isinstance(exc, RecordsError):
        return exc.code, str(exc)
    if isinstance(exc, OSError):  # the disk failed the write (logged once by the partition); no partial batch is kept
        return ErrorCode.KAFKA_STORAGE_ERROR, f"Error writing the log: {exc}"
    log.error("append to %s failed", partition.name, exc_info=exc)
    return ErrorCode.UNKNOWN_SERVER_ERROR, None


def complete(broker: Broker, partition: Partition, required_offset: int) -> bool:
    """Whether an acks=-1 write up to ``required_offset`` is acknowledged: every
    ``brokkr_produce_complete`` answer that is not None agrees (a deleted partition always is)."""
    if partition.deleted:
        return True
    hook = broker.hot.brokkr_produce_complete
    if hook is None:
        return True
    return all(r for r in hook(partition=partition, required_offset=required_offset, broker=broker) if r is not None)


async def wait_acknowledged(
    broker: Broker, required: Mapping[Partition, int], timeout_ms: int, min_insync: bool = False
) -> dict[Partition, tuple[ErrorCode, str | None]]:
    """Wait until each partition holds the offset ``required`` of it as acks=-1 requires
    (:func:`complete`, tried again by the purgatory whenever the partition's high watermark
    moves or its topic is deleted), or ``timeout_ms`` passes; the error and message of each
    that did not make it: its topic deleted meanwhile (UNKNOWN_TOPIC_OR_PARTITION, as
    Kafka's DelayedProduce answers it), its leadership moved (NOT_LEADER_OR_FOLLOWER: the
    write may be truncated), the time up (REQUEST_TIMED_OUT) or, with ``min_insync``, the
    ISR shrunk below min.insync.replicas meanwhile (NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
    pending = {p: offset for p, offset in required.items() if not complete(broker, p, offset)}
    if pending:  # not acknowledged at once (alone, it always is): the purgatory's set-up

        def try_complete() -> bool:
            for partition, offset in list(pending.items()):
                if complete(broker, partition, offset):
                    del pending[partition]
            return not pending

        await broker.purgatory.wait(DelayedOperation(timeout_ms, try_complete), list(pending))
    errors: dict[Partition, tuple[ErrorCode, str | None]] = {}
    for partition in required:
        if partition.deleted:  # its topic was deleted while waiting (Kafka's getPartitionOrError)
            errors[partition] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        elif not partition.is_leader:
            errors[partition] = ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        elif partition in pending:
            errors[partition] = ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the write to be acknowledged"
        elif min_insync and (refusal := not_enough_replicas(partition)) is not None:
            errors[partition] = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, refusal
    return errors


def append_replicated(broker: Broker, partition: Partition, records: bytes, leader_high_watermark: int) -> list:
    """A follower's append (:data:`Origin.REPLICATION`): the leader's batches as they are
    (offsets and epochs kept), one append per run of batches of one leader epoch, so the
    log's epoch cache records where each epoch starts; then the leader's high watermark,
    bounded by the local log end. Returns the fsyncs the log runs in the background for
    them (``flush.messages`` reached), which the fetcher awaits before it fetches again, as
    Kafka's fetcher thread flushes in line."""
    flushes = []
    if records:
        data = bytearray(records)
        runs: list[list] = []
        for h in iter_batches_untrusted(data):
            if h.base_offset < partition.log.log_end_offset:
                continue
            if runs and runs[-1][-1].leader_epoch == h.leader_epoch:
                runs[-1].append(h)
            else:
                runs.append([h])
        for run in runs:
            info = partition.append_replicated(data, run)
            if info.flushed is not None:
                flushes.append(info.flushed)
    broker.advance_high_watermark(partition, min(leader_high_watermark, partition.log.log_end_offset))
    return flushes


@hookimpl(trylast=True)
def brokkr_produce_complete(partition: Partition, required_offset: int) -> bool:
    """The built-in completion policy (Kafka's DelayedProduce): the high watermark has reached
    the write. A partition this node no longer leads completes at once (answered
    NOT_LEADER_OR_FOLLOWER)."""
    return partition.high_watermark >= required_offset or not partition.is_leader
