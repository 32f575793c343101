"""Partitions and topics as the broker holds them: logs, high watermarks, topic ids, configs."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from typing import TYPE_CHECKING

from .config import TopicConfig
from .errors import BrokkrError, ErrorCode
from .log import AppendInfo, LogMove, PartitionLog, StorageCapabilities, TxnIndex
from .producer_state import aborted_entry, rebuild_producer_state
from .protocol.control import EndTxnMarker, encode_marker_batch, read_end_txn_marker
from .protocol.records import BatchHeader, iter_batches_untrusted, patch_batch
from .txn_index import AbortedTxnList

if TYPE_CHECKING:
    from .validation import ValidatedRecords

logger = logging.getLogger("brokkr")

#: How much of a log one turn of the event loop copies while it moves to another log dir.
MOVE_STEP_BYTES = 1 << 20
#: How long a move waits before looking again when it has nothing to copy but cannot swap
#: (the cleaner is at work on the log).
MOVE_IDLE_S = 0.05

MAX_TOPIC_NAME = 249
#: KRaft's metadata log: never a topic clients see or create (a Kafka log directory brokkr
#: adopts may hold its partition directory, which is left as it is).
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")  # fullmatch: "$" would accept a trailing newline


def validate_topic_name(name: str) -> None:
    """Kafka's rules (org.apache.kafka.common.internals.Topic.validate)."""
    if not name:
        raise BrokkrError("Topic name is illegal, it can't be empty", ErrorCode.INVALID_TOPIC_EXCEPTION)
    if name in (".", ".."):
        raise BrokkrError('Topic name cannot be "." or ".."', ErrorCode.INVALID_TOPIC_EXCEPTION)
    if len(name) > MAX_TOPIC_NAME:
        raise BrokkrError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )
    if not _LEGAL.fullmatch(name):
        raise BrokkrError(
            f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'",
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


def _last_leader_epoch(log: PartitionLog, capabilities: StorageCapabilities) -> int:
    """The leader epoch of the log's last batch (0 for an empty log), so that batches
    appended after a restart, or to a partition adopted from a Kafka broker, never go
    back to an older epoch than those already in the log. A log that keeps Kafka's
    leader-epoch-checkpoint (:class:`~brokkr.core.log.LeaderEpochs`) may hold a later
    epoch with no batch yet."""
    epochs = log.leader_epochs() if capabilities.leader_epochs else None
    latest = max(epochs[-1][0], 0) if epochs else 0
    end = log.log_end_offset
    if end <= log.log_start_offset:
        return latest
    batches = list(iter_batches_untrusted(log.read(end - 1, 1, end, True)))
    return max(batches[-1].leader_epoch, latest) if batches else latest


class Partition:
    """One partition led by this broker. With one replica the high watermark is the log end.

    ``producers`` is its producer state (:mod:`brokkr.core.producer_state`), rebuilt from
    the log's latest producer snapshot when the partition is opened. ``aborted`` holds its
    aborted transactions (:mod:`brokkr.core.txn_index`): the log itself when it keeps a
    ``.txnindex`` (``Capability.TXN_INDEX``), else a list in memory. ``capabilities`` are
    its storage's (:class:`~brokkr.core.log.StorageCapabilities`), the same for every log."""

    def __init__(
        self, topic: Topic, index: int, log: PartitionLog, node_id: int = 0, *, capabilities: StorageCapabilities
    ):
        self.topic = topic
        self.index = index
        self.name = f"{topic.name}-{index}"  # "topic-N", as Kafka names a TopicPartition
        self.log = log
        self.capabilities = capabilities
        self.leader_epoch = _last_leader_epoch(log, capabilities)
        self.high_watermark = log.log_end_offset
        self.bytes_appended = 0  # monotonic, lets delayed fetches count new bytes cheaply
        self.storage_error: OSError | None = None  # why appends fail, while they do
        self.deleted = False  # its topic was deleted: its log is gone (a waiting fetch answers at once)
        self.aborted: TxnIndex = log if capabilities.txn_index else AbortedTxnList()
        self.rebuild_producer_state()
        # Replication (core/replication.py). Alone, this node is the leader, the only
        # replica and the ISR, and the high watermark is the log end.
        self.node_id = node_id
        self.leader_id = node_id
        self.replicas: tuple[int, ...] = (node_id,)
        self.isr: tuple[int, ...] = (node_id,)
        self.state_version = 0  # the cluster's version of this partition's state
        #: As the leader: each follower's log end offset (its last fetch offset) and when
        #: it was last caught up with the log end (monotonic seconds).
        self.follower_end: dict[int, int] = {}
        self.follower_caught_up: dict[int, float] = {}
        #: As the leader: each follower's log start offset, as its last fetch said (-1: unknown).
        self.follower_start: dict[int, int] = {}
        #: Whether the log keeps the high watermark (KeptHighWatermark), resolved once: asked at every move.
        self.log_keeps_high_watermark = capabilities.kept_high_watermark
        #: The move of the log to another log dir under way (AlterReplicaLogDirs), and its task.
        self.log_move: LogMove | None = None
        self._move_task: asyncio.Task | None = None
        self.tell_log()

    def tell_log(self) -> None:
        """Give a log that keeps them the high watermark (its replication-offset-checkpoint)
        and the last stable offset (its cleaner compacts no further); after each move. The
        LSO is computed every time, which also forgets the completed transactions the high
        watermark passed, so they never pile up."""
        stable = self.last_stable_offset
        if self.log_keeps_high_watermark:
            self.log.high_watermark = self.high_watermark
            self.log.last_stable_offset = stable

    def lower_high_watermark(self, offset: int) -> None:
        """Move the high watermark back to ``offset`` (a replica opened or truncated); it
        only ever moves forward otherwise (``Broker.advance_high_watermark``)."""
        self.high_watermark = min(self.high_watermark, offset)
        self.tell_log()

    def rebuild_producer_state(self) -> None:
        """Rebuild the producer and transaction state from the log (at open, after a
        truncation). A log that keeps no aborted-transaction index is replayed whole, so
        that the in-memory list holds every aborted transaction again; so is one that keeps
        no producer snapshots."""
        use_snapshot = self.capabilities.txn_index and self.capabilities.producer_snapshots
        self.producers = rebuild_producer_state(self.name, self.log, self.aborted, use_snapshot=use_snapshot)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the high watermark, or below it the first offset of the oldest
        transaction still open (or whose marker is not yet replicated)."""
        first = self.producers.first_unstable_offset(self.high_watermark)
        return self.high_watermark if first is None else min(first, self.high_watermark)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    def high_watermark_candidate(self) -> int:
        """The smallest log end offset over the in-sync replicas (Kafka's high watermark rule)."""
        end = self.log.log_end_offset
        if len(self.isr) == 1 and self.isr[0] == self.node_id:  # alone, or the only one in sync
            return end
        return min((end if r == self.node_id else self.follower_end.get(r, 0) for r in self.isr), default=end)

    @property
    def config(self) -> TopicConfig:
        return self.topic.config

    def append(self, validated: ValidatedRecords) -> AppendInfo:
        """Check each batch against its producer's state, assign offsets by patching each
        batch header in place, append, then remember the producers' batches.

        A producer's retry of a batch already in the log is not appended: the result is
        the original batch's offsets, marked ``duplicate`` (Kafka's ``UnifiedLog.append``).
        Each batch is checked against the state before this append; Produce v3+ carries
        one batch per partition. Raises RecordsError for a fenced epoch or a sequence out
        of order."""
        first = offset = self.log.log_end_offset
        batches = validated.batches
        for h in batches:
            duplicate = self.producers.check_and_find_duplicate(h, offset)
            if duplicate is not None:
                return AppendInfo(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.offset_delta + 1,
                    duplicate.timestamp,
                    0,
                    duplicate=True,
                )
            patch_batch(validated.records, h.position, offset, self.leader_epoch)
            offset += h.last_offset_delta + 1
        info = self._append_stored(
            validated.records, first, offset - 1, validated.max_timestamp, validated.record_count
        )
        for h in batches:  # each at the offset it was given above, without a list of them
            self.producers.update(h, first)
            first += h.last_offset_delta + 1
        if info.rolled is not None:
            self.take_producer_snapshot()
        self.bytes_appended += info.size
        return info

    def append_marker(
        self, producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, timestamp: int
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker as leader (Kafka's append with origin
        COORDINATOR): checked against the producer's state (RecordsError:
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), given the next offset and
        this leader's epoch, appended; the producer's transaction here ends, and an aborted
        one goes to the aborted-transaction index."""
        self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        batch = encode_marker_batch(producer_id, producer_epoch, committed, coordinator_epoch, timestamp)
        offset = self.log.log_end_offset
        patch_batch(batch, 0, offset, self.leader_epoch)
        header = BatchHeader.unpack(batch)
        info = self._append_stored(batch, offset, offset, timestamp, 1)
        self._end_txn(header, EndTxnMarker(committed, coordinator_epoch))
        if info.rolled is not None:
            self.take_producer_snapshot()
        self.bytes_appended += info.size
        return info

    def _append_stored(
        self, records: bytearray | memoryview, first: int, last: int, max_timestamp: int, count: int
    ) -> AppendInfo:
        try:
            info = self.log.append(records, first, last, max_timestamp, count)
        except OSError as exc:  # the log dropped the partial batch; say so once per spell of failures
            if self.storage_error is None:
                logger.error("%s: appends fail (%s); answering KAFKA_STORAGE_ERROR until one succeeds", self.name, exc)
            self.storage_error = exc
            raise
        if self.storage_error is not None:
            logger.warning("%s: appends succeed again", self.name)
            self.storage_error = None
        return info

    def _end_txn(self, header: BatchHeader, marker: EndTxnMarker) -> None:
        completed = self.producers.complete_txn(header, marker, header.base_offset)
        if completed.aborted:
            self.aborted.append_aborted_txn(aborted_entry(self.producers, completed))

    def append_replicated(self, data: bytearray, headers: list[BatchHeader]) -> AppendInfo:
        """Append as a follower batches the leader wrote (``headers``: a run of one leader
        epoch, in ``data``), offsets and epochs kept; update the producer and transaction
        state with them (markers included)."""
        first, last = headers[0], headers[-1]
        max_timestamp = max(h.max_timestamp for h in headers)
        count = sum(h.record_count for h in headers)
        info = self._append_stored(
            data[first.position : last.end], first.base_offset, last.last_offset, max_timestamp, count
        )
        for h in headers:
            if not h.is_control:
                self.producers.update(h, h.base_offset)
            elif (marker := read_end_txn_marker(data, h)) is not None:
                self._end_txn(h, marker)
        self.bytes_appended += info.size
        if info.rolled is not None:
            self.take_producer_snapshot()
        return info

    def take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the log end offset (after a roll, and at close)
        so that a restart replays only what follows. The records are already in the log,
        so a failure to write it is logged, not raised: a later start replays more. A log
        without producer snapshots is replayed whole at every start instead."""
        if not self.capabilities.producer_snapshots:
            return
        try:
            self.producers.take_snapshot(self.log)
        except OSError as exc:
            logger.error("writing the producer snapshot of %s failed: %s", self.name, exc)

    def start_log_move(self, move: LogMove) -> None:
        """Move the log to another log dir (AlterReplicaLogDirs): a task copies it into
        ``move``'s future log a bounded step per turn of the loop, while appends go on to
        the log, then swaps the two in one turn (see :class:`~brokkr.core.log.LogMove`)."""
        self.cancel_log_move()
        self.log_move = move
        self._move_task = asyncio.ensure_future(self._move_log(move))

    def cancel_log_move(self) -> None:
        """Give up the move under way, if any (its future log is deleted)."""
        if self.log_move is not None:
            self.log_move.cancel()
            self._move_task.cancel()
            self.log_move = self._move_task = None

    async def _move_log(self, move: LogMove) -> None:
        try:
            if not await self._catch_up(move):
                return
            await asyncio.wrap_future(move.flush())  # most of it durable before the swap
            if await self._catch_up(move):
                # Caught up, and no await since: no append came between the check and the swap.
                self.log = move.complete()
                if self.capabilities.txn_index:
                    self.aborted = self.log
                self.tell_log()
                self.take_producer_snapshot()
                logger.info("%s: log moved to %s", self.name, move.directory)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("%s: moving the log to %s failed; it stays where it is", self.name, move.directory)
            move.cancel()
        finally:
            if self.log_move is move:
                self.log_move = self._move_task = None

    @staticmethod
    async def _catch_up(move: LogMove) -> bool:
        """Copy until the future log holds all of the log (True), or the move is cancelled."""
        while not move.cancelled:
            copied = move.copy(MOVE_STEP_BYTES)
            if move.caught_up():
                return True
            await asyncio.sleep(0 if copied else MOVE_IDLE_S)
        return False

    def delete(self) -> None:
        """Its topic is deleted: mark it deleted (what still holds it, a waiting fetch,
        reads nothing more from it), then delete the log."""
        self.deleted = True
        self.cancel_log_move()
        self.log.delete()

    def close(self) -> None:
        """Snapshot the producer state, then close the log (the broker is stopping); a move
        to another log dir under way is given up."""
        self.cancel_log_move()
        self.take_producer_snapshot()
        self.log.close()

    def __repr__(self) -> str:
        return f"<Partition {self.name} hw={self.high_watermark}>"


class Topic:
    def __init__(self, name: str, topic_id: uuid.UUID, config: TopicConfig):
        self.name = name
        self.topic_id = topic_id
        self.config = config
        #: By index; on a cluster, None for a partition this broker holds no replica of.
        self.partitions: list[Partition | None] = []

    def local_partitions(self) -> list[Partition]:
        """The partitions this broker holds a replica of (all of them, alone)."""
        return [p for p in self.partitions if p is not None]
