"""Producer state: what each idempotent producer last appended to one partition, and the
transactions open in it.

Kafka's ``ProducerStateManager``, ``ProducerStateEntry`` and ``ProducerAppendInfo``. Per partition,
each producer id maps to its epoch and the metadata of its last five batches (first and
last sequence, first and last offset, max timestamp). Before a batch is given offsets,
:meth:`ProducerStateManager.check_and_find_duplicate` decides, from the batch header
alone, as Kafka 4 does:

- no producer id (-1): not tracked;
- the same producer, epoch and sequence range as a remembered batch: a retry, answered
  with the original offsets and never written again (``UnifiedLog``'s duplicate check);
- an epoch below the producer's: INVALID_PRODUCER_EPOCH;
- a new epoch must start at sequence 0, otherwise OUT_OF_ORDER_SEQUENCE_NUMBER, as is
  any sequence that does not follow the last one (wrapping from Int32.MAX to 0);
- a producer the partition knows nothing of (new, or forgotten after its records were
  deleted) may start at any sequence: since KIP-360 (Kafka 2.5) the broker no longer
  answers UNKNOWN_PRODUCER_ID on the produce path.

After the append, :meth:`ProducerStateManager.update` remembers the batch.

Transactions: a producer's first transactional batch opens its transaction in the
partition (``current_txn_first_offset``; ``ongoing`` keeps the open ones in offset order);
a COMMIT or ABORT marker (:mod:`brokkr.core.protocol.control`) closes it
(:meth:`ProducerStateManager.complete_txn`, after :meth:`check_marker` refused a fenced
producer epoch or coordinator epoch) and yields a :class:`CompletedTxn`. A completed
transaction stays "unstable" until the high watermark passes its marker (Kafka's
unreplicated transactions), so the last stable offset is the smallest of the high
watermark and the first offsets of the open and unreplicated transactions
(:meth:`ProducerStateManager.first_unstable_offset`).

The state
survives restarts as Kafka's ``.snapshot`` format (:func:`encode_snapshot`), kept by the
partition's log (``ProducerSnapshots.write_producer_snapshot``, a storage capability of
:mod:`brokkr.core.log`): the core writes one after an
append that rolled a segment and when the broker stops, and
:func:`rebuild_producer_state` loads the latest one and replays the batch headers
appended after it. As in Kafka, a snapshot keeps only each producer's last batch, so
after a restart a retry of that batch is still recognised but retries of older ones are
not.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

import crc32c

from .errors import CorruptRequest, ErrorCode
from .protocol.control import EndTxnMarker, read_end_txn_marker
from .protocol.records import NO_PRODUCER_ID, NO_TIMESTAMP, BatchHeader, iter_batches_untrusted
from .txn_index import AbortedTxn, AbortedTxnList
from .validation import RecordsError

if TYPE_CHECKING:
    from .log import PartitionLog, ProducerSnapshots, TxnIndex

logger = logging.getLogger("brokkr.producer_state")

#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: retries of this many batches are recognised.
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_OFFSET = -1
INT32_MAX = 2**31 - 1
SNAPSHOT_VERSION = 1
REPLAY_CHUNK = 1 << 20  # bytes of log read at a time when replaying batch headers

# Kafka's snapshot (version 1): int16 version, uint32 CRC-32C of everything after it, then
# an int32 count of entries: ProducerId int64, Epoch int16, LastSequence int32, LastOffset
# int64, OffsetDelta int32, Timestamp int64, CoordinatorEpoch int32, CurrentTxnFirstOffset int64.
_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC = struct.Struct(">I")
_CRC_AT = 2
_CRC_FROM = 6  # the CRC covers the entry count and the entries


class CorruptSnapshot(ValueError):
    """A producer state snapshot that does not decode (Kafka's CorruptSnapshotException)."""


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap from Int32.MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``, the inverse of :func:`increment_sequence`."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def last_sequence(header: BatchHeader) -> int:
    """The sequence of a batch's last record (Kafka's ``RecordBatch.lastSequence``)."""
    return increment_sequence(header.base_sequence, header.last_offset_delta)


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One remembered batch (Kafka's ``BatchMetadata``)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction a marker ended in this partition (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerStateEntry:
    """One producer's state in one partition (Kafka's ``ProducerStateEntry``): its epoch,
    its last batches (oldest first), the coordinator epoch of its last marker and the
    first offset of its open transaction here (-1: none)."""

    __slots__ = ("producer_epoch", "batches", "last_timestamp", "coordinator_epoch", "current_txn_first_offset")

    def __init__(
        self,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        last_timestamp: int = NO_TIMESTAMP,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ):
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def add_batch(self, producer_epoch: int, batch: BatchMetadata) -> None:
        """Remember ``batch``; a new epoch forgets the batches of the old one."""
        if producer_epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = producer_epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The remembered batch with this epoch and exactly this sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        return next((b for b in self.batches if b.last_seq == last_seq and b.first_seq == first_seq), None)


class ProducerStateManager:
    """The producers of one partition (Kafka's ``ProducerStateManager``).

    ``snapshot_offset`` is the log end offset of the newest snapshot known to hold this
    state, so that a stop right after a start or a roll does not write it again."""

    def __init__(self, partition: str):
        self.partition = partition  # "topic-N", in error messages as Kafka names a TopicPartition
        self.producers: dict[int, ProducerStateEntry] = {}
        self.snapshot_offset: int | None = None
        #: Open transactions: producer id -> first offset, in offset order (a transaction
        #: opens at the log end, so insertion order is offset order).
        self.ongoing: dict[int, int] = {}
        #: Completed transactions whose marker the high watermark has not passed yet.
        self.unreplicated: list[CompletedTxn] = []

    def load_entries(self, producers: dict[int, ProducerStateEntry]) -> None:
        """Take the producers of a snapshot, their open transactions with them."""
        self.producers = producers
        opened = sorted(
            (e.current_txn_first_offset, pid) for pid, e in producers.items() if e.current_txn_first_offset >= 0
        )
        self.ongoing = {pid: first for first, pid in opened}

    def check_and_find_duplicate(self, header: BatchHeader, first_offset: int) -> BatchMetadata | None:
        """Check one batch about to be appended at ``first_offset`` against its producer's
        state: the remembered batch it repeats, or None if it may be appended. Raises
        :class:`RecordsError` (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER) with
        Kafka's messages. Reads the header only."""
        producer_id = header.producer_id
        entry = self.producers.get(producer_id) if producer_id != NO_PRODUCER_ID else None
        if entry is None:
            return None
        epoch, first_seq = header.producer_epoch, header.base_sequence
        duplicate = entry.find_duplicate(epoch, first_seq, last_sequence(header))
        if duplicate is not None:
            return duplicate
        current = entry.producer_epoch
        if epoch < current:
            raise RecordsError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} at offset {first_offset} in {self.partition} is {epoch}, "
                f"which is smaller than the last seen epoch {current}",
            )
        if epoch != current:
            if first_seq != 0 and current != NO_PRODUCER_EPOCH:
                raise RecordsError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of {self._where(producer_id, first_offset)}: "
                    f"{epoch} (request epoch), {first_seq} (seq. number), {current} (current producer epoch)",
                )
        elif current != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise RecordsError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for {self._where(producer_id, first_offset)}: "
                f"{first_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)",
            )
        if entry.current_txn_first_offset >= 0 and not header.is_transactional:
            raise RecordsError(
                ErrorCode.INVALID_TXN_STATE,
                f"Expected transactional write from producer {producer_id} at offset {first_offset} "
                f"in partition {self.partition}",
            )
        return None

    def _where(self, producer_id: int, first_offset: int) -> str:
        return f"producer {producer_id} at offset {first_offset} in partition {self.partition}"

    def update(self, header: BatchHeader, first_offset: int) -> None:
        """Remember a batch appended at ``first_offset`` (batches without a producer id are not tracked)."""
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry()
        delta = header.last_offset_delta
        batch = BatchMetadata(last_sequence(header), first_offset + delta, delta, header.max_timestamp)
        entry.add_batch(header.producer_epoch, batch)
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[producer_id] = first_offset

    # -- transactions -------------------------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's ``ProducerAppendInfo.appendEndTxnMarker`` checks, before a marker is
        written as leader: a producer epoch below the producer's is INVALID_PRODUCER_EPOCH,
        a coordinator epoch below the last marker's is TRANSACTION_COORDINATOR_FENCED."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise RecordsError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} in {self.partition} is {producer_epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise RecordsError(
                ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                f"Invalid coordinator epoch for producer {producer_id} in {self.partition}: "
                f"{coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)",
            )

    def complete_txn(self, header: BatchHeader, marker: EndTxnMarker, offset: int) -> CompletedTxn:
        """Apply a marker batch stored at ``offset``: the producer's open transaction here
        (if any; a marker for none completes an empty one at the marker) ends."""
        producer_id = header.producer_id
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(header.producer_epoch)
        if header.producer_epoch != entry.producer_epoch:  # Kafka's maybeUpdateProducerEpoch
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        first = entry.current_txn_first_offset if entry.current_txn_first_offset >= 0 else offset
        entry.current_txn_first_offset = NO_OFFSET
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = header.max_timestamp
        self.ongoing.pop(producer_id, None)
        completed = CompletedTxn(producer_id, first, offset, not marker.committed)
        self.unreplicated.append(completed)
        return completed

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """Kafka's ``lastStableOffset(completedTxn)``, for the ``.txnindex`` entry: the first
        offset of the next open transaction, else one past the marker."""
        return next(iter(self.ongoing.values()), completed.last_offset + 1)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest open or unreplicated transaction (None: none);
        forgets the completed ones whose marker is below ``high_watermark``."""
        if not self.ongoing and not self.unreplicated:  # no transactions: most partitions
            return None
        if self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]
        first = next(iter(self.ongoing.values()), None)
        for txn in self.unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def take_snapshot(self, log: ProducerSnapshots) -> None:
        """Kafka's ``takeSnapshot``: hand ``log`` a snapshot at its end offset, unless it has one there."""
        end = log.log_end_offset
        if end != self.snapshot_offset:
            log.write_producer_snapshot(end, encode_snapshot(self.producers))
            self.snapshot_offset = end
            logger.debug("producer snapshot of %s at %d: %d producer ids", self.partition, end, len(self.producers))


def encode_snapshot(producers: dict[int, ProducerStateEntry]) -> bytes:
    """Kafka's ``.snapshot`` bytes (version 1): each producer with its last batch only."""
    body = bytearray(_SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, 0, len(producers)))
    for producer_id, entry in producers.items():
        last = entry.batches[-1] if entry.batches else BatchMetadata(NO_SEQUENCE, -1, 0, entry.last_timestamp)
        body += _SNAPSHOT_ENTRY.pack(
            producer_id,
            entry.producer_epoch,
            last.last_seq,
            last.last_offset,
            last.offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
        )
    _CRC.pack_into(body, _CRC_AT, crc32c.crc32c(memoryview(body)[_CRC_FROM:]))
    return bytes(body)


def decode_snapshot(data: bytes) -> dict[int, ProducerStateEntry]:
    """The producers of a ``.snapshot`` (Kafka's ``readSnapshot``); raises :class:`CorruptSnapshot`."""
    if len(data) < _SNAPSHOT_HEAD.size:
        raise CorruptSnapshot(f"Snapshot failed schema validation: {len(data)} bytes is too short")
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(f"Snapshot contained an unknown file version {version}")
    computed = crc32c.crc32c(memoryview(data)[_CRC_FROM:])
    if crc != computed:
        raise CorruptSnapshot(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. Computed crc: {computed}"
        )
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        raise CorruptSnapshot(f"Snapshot failed schema validation: {count} entries in {len(data)} bytes")
    producers = {}
    for fields in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEAD.size :]):
        producer_id, epoch, last_seq, last_offset, offset_delta, timestamp, coordinator_epoch, txn_first = fields
        entry = ProducerStateEntry(epoch, timestamp, coordinator_epoch, txn_first)
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        producers[producer_id] = entry
    return producers


def rebuild_producer_state(
    partition: str, log: PartitionLog, aborted: TxnIndex | None = None, use_snapshot: bool = True
) -> ProducerStateManager:
    """The producer state of a log being opened (Kafka's ``UnifiedLog.rebuildProducerState``):
    the latest snapshot, then the headers of the batches appended after it, read from the
    log (from its start when there is no usable snapshot). A snapshot below the log start
    offset is not used, as Kafka drops those: records between it and the start are gone,
    so its producers would look out of sequence rather than unknown.

    Markers replayed end their transactions; ``aborted`` (the log's ``.txnindex``, or the
    partition's in-memory list) first forgets every transaction ending at or after the
    replay's start, then gets each aborted one again, so a crash between a marker's
    append and its index entry loses nothing (None: aborted transactions are not kept).
    Without ``use_snapshot`` everything is replayed from the log start (for a log that
    keeps no aborted-transaction index of its own, whose list must be rebuilt whole, or
    no producer snapshots); with it ``log`` is a :class:`~brokkr.core.log.ProducerSnapshots`."""
    state = ProducerStateManager(partition)
    offset = log.log_start_offset
    snapshot = log.latest_producer_snapshot() if use_snapshot else None  # a log with ProducerSnapshots
    if snapshot is not None and snapshot[0] >= offset:
        snapshot_offset, data = snapshot
        try:
            state.load_entries(decode_snapshot(data))
            offset = state.snapshot_offset = snapshot_offset
        except CorruptSnapshot as exc:
            logger.warning("Failed to load the producer snapshot of %s at %d: %s", partition, snapshot_offset, exc)
    if aborted is None:
        aborted = AbortedTxnList()
    aborted.truncate_aborted_txns(offset)
    _replay(state, log, offset, aborted)
    return state


def _replay(state: ProducerStateManager, log: PartitionLog, offset: int, aborted) -> None:
    """Apply the headers of the batches from ``offset`` to the log end; a marker batch's
    one record is read to end its transaction."""
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, REPLAY_CHUNK, end, True)
        try:
            headers = list(iter_batches_untrusted(data))
        except CorruptRequest as exc:
            logger.warning("stopped rebuilding the producer state of %s at %d: %s", state.partition, offset, exc)
            return
        if not headers:
            return
        for h in headers:
            if not h.is_control:
                state.update(h, h.base_offset)
            elif (marker := read_end_txn_marker(data, h)) is not None:
                completed = state.complete_txn(h, marker, h.base_offset)
                if completed.aborted:
                    aborted.append_aborted_txn(aborted_entry(state, completed))
        offset = headers[-1].last_offset + 1


def aborted_entry(state: ProducerStateManager, completed: CompletedTxn) -> AbortedTxn:
    """The ``.txnindex`` entry of an aborted transaction just completed in ``state``."""
    return AbortedTxn(
        completed.producer_id, completed.first_offset, completed.last_offset, state.last_stable_offset_after(completed)
    )
