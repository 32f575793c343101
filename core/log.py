"""The storage contract: what a storage backend is to the rest of the broker.

A storage plugin's ``brokkr_open_storage`` returns one :class:`Storage` per broker (Kafka's
``LogManager``); it keeps the topic catalog and opens one :class:`PartitionLog` per
partition (Kafka's ``UnifiedLog``). The core assigns offsets (patching each batch header)
before it calls :meth:`PartitionLog.append`, so a log stores bytes it is given and answers
reads; it never parses requests. :mod:`brokkr.core.storage_contract` is the test suite
every backend must pass, shipped so third-party backends can run it too.

Beyond that base contract a storage may do more: each such :class:`Capability` is a
typed protocol below (:class:`LeaderEpochs`, :class:`ReadRegions`, :class:`TxnIndex`,
:class:`ProducerSnapshots`, :class:`KeptHighWatermark` for its logs; :class:`Compaction`,
:class:`LogDirs` for the storage itself). A storage declares the ones it has in
``Storage.capabilities`` (a :class:`Capability` flag; the same for every log it opens):

    capabilities = Capability.TXN_INDEX | Capability.PRODUCER_SNAPSHOTS

The broker checks the declaration once, when it opens the storage
(:func:`check_capabilities`, ``Broker.open_storage``), and keeps the answer as a
:class:`StorageCapabilities` (``broker.storage_capabilities``, ``partition.capabilities``)
that every path reads, instead of probing objects for methods: a declared capability is
used, an undeclared one never is, and a setting that needs one the storage lacks is
refused at start (a cluster, ``zookeeper.connect``, needs :class:`LeaderEpochs`). The
contract suite runs each capability's tests for the storages declaring it, and fails one
whose logs lack a capability it declares.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from .errors import BrokkrError, ConfigError, ErrorCode
from .protocol.records import HEADER_SIZE, BatchHeader, Record, decode_records

if TYPE_CHECKING:
    from .config import TopicConfig
    from .file_region import FileRegion
    from .txn_index import AbortedTxn
    from .validation import Codec


#: How long opening logs may hold the event loop in one turn: a topic created or grown
#: (:meth:`~brokkr.core.broker.Broker.create_topic_in_turns`), a cluster broker's new
#: replicas (:meth:`~brokkr.core.replication.ReplicaManager.apply`). Other requests are
#: served between turns.
OPEN_TURN_S = 0.002


class OffsetOutOfRange(BrokkrError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


@attrs.frozen
class SegmentInfo:
    """One segment: its offset range [base_offset, next_offset), size and largest timestamp.

    ``path`` names the segment's file for backends that have one (sinks read it)."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int = -1
    path: str | None = None


@attrs.define  # not frozen: a frozen class's __init__ costs three times as much, once a partition
class AppendInfo:
    """What one append stored (one per partition batch); not changed after.

    ``duplicate`` marks a producer's retry of a batch already in the log
    (:mod:`brokkr.core.producer_state`): nothing was stored, and the offsets and max
    timestamp are those of the original batch.

    ``flushed`` is set by a log that fsyncs this append off the event loop because the
    topic asks it to (``flush.messages`` reached): a ``concurrent.futures.Future`` done
    once the records are on disk (failed if the fsync failed). The broker moves the high
    watermark and answers the produce only then, as Kafka flushes before it answers."""

    first_offset: int
    last_offset: int
    record_count: int
    max_timestamp: int
    size: int
    rolled: SegmentInfo | None = None
    duplicate: bool = False
    flushed: Future | None = None


@attrs.frozen
class TimestampOffset:
    offset: int
    timestamp: int


@attrs.frozen
class StoredTopic:
    """A topic as the catalog keeps it: ``configs`` are its overrides, as strings."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = attrs.field(factory=dict)


def batch_records(buf: bytes | memoryview, header: BatchHeader, codecs: dict[int, Codec]) -> list[Record]:
    """The records of one stored batch (decompressed): for backends answering timestamp
    lookups, never for the produce or fetch path."""
    payload = memoryview(buf)[header.position + HEADER_SIZE : header.end]
    if header.codec:
        payload = codecs[header.codec].decompress(payload)
    return decode_records(header, payload)


@runtime_checkable
class PartitionLog(Protocol):
    """One partition's log. All offsets are absolute."""

    @property
    def log_start_offset(self) -> int:
        """The first offset still held."""

    @property
    def log_end_offset(self) -> int:
        """One past the last offset appended."""

    def append(
        self,
        records: bytearray | memoryview,
        first_offset: int,
        last_offset: int,
        max_timestamp: int,
        record_count: int,
    ) -> AppendInfo:
        """Store ``records`` (whole batches, offsets already assigned, first at
        ``log_end_offset``): a bytearray, or a memoryview of the request buffer they
        arrived in (no copy was made). The buffer is reused once the request is answered:
        a log that keeps records in memory keeps a copy (``bytes(records)``). Return what was stored, with
        ``rolled`` set if the append closed a segment."""

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        """Whole batches from the one containing ``offset``, stopping before
        ``max_offset`` (the high watermark) and within ``max_bytes``; with ``min_one``
        the first batch is returned even when larger than ``max_bytes`` (KIP-74).
        A read may stop at a segment's end. Raise :class:`OffsetOutOfRange` outside
        [log_start_offset, log_end_offset]."""

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start with a timestamp >= ``timestamp``,
        or None."""

    def max_timestamp(self) -> TimestampOffset | None:
        """The record with the largest timestamp (the earliest such), or None if empty."""

    def segments(self) -> list[SegmentInfo]:
        """The segments, oldest first; the last one is the active segment."""

    def delete_before(self, offset: int) -> None:
        """Advance the log start offset to ``offset`` (DeleteRecords, retention), dropping
        every segment that lies wholly below it. Never moves backwards; the caller keeps
        ``offset`` at or below the high watermark. At the log end offset every record goes,
        the active segment's too: the log starts a new, empty segment there (Kafka's roll
        in ``deleteSegments``), which retention relies on to empty a partition whose only
        segment is too old."""

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset``, which must fall on a batch
        boundary; the log end offset becomes ``offset``. What a capability keeps past it
        goes too (producer snapshots, leader epochs, aborted transactions)."""

    def close(self) -> None:
        """Flush and release resources; data stays."""

    def delete(self) -> None:
        """Remove the partition's data, producer snapshots included (its topic was deleted)."""


@runtime_checkable
class Storage(Protocol):
    """A broker's storage: the topic catalog plus one log per partition."""

    #: Whether logs and the catalog survive a restart.
    durable: bool
    #: What it (and every log it opens) can do beyond this contract; a storage without
    #: the attribute declares nothing (``Capability(0)``).
    capabilities: Capability

    def load_topics(self) -> list[StoredTopic]:
        """The topics kept from earlier runs, once their logs are recovered."""

    def save_topics(self, topics: list[StoredTopic]) -> None:
        """Persist the catalog; called before a new topic's logs are opened (a listed topic
        whose logs are missing gets them from :meth:`open_log` at the next start), after a
        deletion, and after every change of a topic's settings or partition count."""

    def open_log(self, topic: StoredTopic, partition: int, config: TopicConfig) -> PartitionLog:
        """Open (creating if needed) the log of one partition."""

    def read_state(self, name: str) -> str | None:
        """A small broker-level metadata document written by :meth:`write_state` (e.g.
        ``producer-ids``, the next block of producer ids), or None if there is none."""

    def write_state(self, name: str, text: str) -> None:
        """Keep the document ``name`` (lowercase letters and dashes) durably, if the
        storage is durable, and atomically: after a crash :meth:`read_state` returns the
        old text or the new one, never a mix."""

    def checkpoint(self) -> Future | None:
        """Persist what makes the next start fast (recovery points, log start offsets).
        Called every ``log.flush.offset.checkpoint.interval.ms`` on the event loop: a
        storage that writes the files off the loop returns a future of that work, which
        the broker awaits before its next maintenance task."""

    def close(self) -> None:
        """Called once after every log is closed: the final checkpoint; the next start is
        a clean one."""


# -- capabilities ------------------------------------------------------------------------


class Capability(enum.Flag):
    """What a storage can do beyond :class:`Storage` and :class:`PartitionLog`, declared in
    ``Storage.capabilities``; each names the protocol the storage's logs (or, for
    COMPACTION and LOG_DIRS, the storage itself) then satisfy."""

    LEADER_EPOCHS = enum.auto()  #: :class:`LeaderEpochs`: needed on a cluster
    READ_REGIONS = enum.auto()  #: :class:`ReadRegions`: fetches leave with sendfile
    TXN_INDEX = enum.auto()  #: :class:`TxnIndex`: else the broker keeps the list in memory
    PRODUCER_SNAPSHOTS = enum.auto()  #: :class:`ProducerSnapshots`: else a start replays the whole log
    KEPT_HIGH_WATERMARK = enum.auto()  #: :class:`KeptHighWatermark`: else a cluster replica starts at the log start
    COMPACTION = enum.auto()  #: :class:`Compaction`: else compacted topics are never cleaned
    LOG_DIRS = enum.auto()  #: :class:`LogDirs`: DescribeLogDirs reports them, AlterReplicaLogDirs moves logs


@runtime_checkable
class LeaderEpochs(Protocol):
    """A log keeping Kafka's leader-epoch-checkpoint: where each leader epoch starts. A
    follower truncates by it when the leader changes (KIP-101); without it a follower
    could only truncate to the high watermark at every change, so a cluster refuses a
    storage lacking it. ``truncate_to`` drops the epochs starting at or past its offset,
    ``delete_before`` moves the one in force to the new start."""

    def leader_epochs(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of each leader epoch, oldest first ([] for none)."""

    def assign_epoch(self, epoch: int) -> None:
        """Start ``epoch`` at the log end (the broker became leader), unless it is not
        above the latest (Kafka's ``LeaderEpochFileCache.assign``); kept durably."""


@runtime_checkable
class ReadRegions(Protocol):
    """A log whose batches lie in files: fetches send them with sendfile."""

    def read_region(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> FileRegion | bytes | None:
        """The batches :meth:`PartitionLog.read` chooses (same arguments, same
        OffsetOutOfRange), as where they lie in a file (a
        :class:`brokkr.core.file_region.FileRegion` with a descriptor of its own), or None
        when ``read`` would return b"". It may answer the bytes themselves for a few
        (fewer than ``file_region.MIN_BYTES``)."""


@runtime_checkable
class TxnIndex(Protocol):
    """A log keeping its aborted transactions (Kafka's ``.txnindex``); without one the
    broker keeps them in memory (:class:`brokkr.core.txn_index.AbortedTxnList`, which
    satisfies this protocol too) and replays the whole log at open to rebuild them."""

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        """Keep an aborted transaction (its marker was just appended)."""

    def aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [``fetch_offset``, ``upper_bound``), in
        marker order (Kafka's ``collectAbortedTxns``)."""

    def truncate_aborted_txns(self, offset: int) -> None:
        """Forget those whose marker is at or after ``offset`` (a replay from there adds them again)."""


@runtime_checkable
class ProducerSnapshots(Protocol):
    """A log keeping the producer state at some offsets, so that an open replays only
    what follows the latest (without them it replays the whole log)."""

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        """Keep ``data``, the partition's producer state as of ``offset`` (the log end
        offset when the core writes it; Kafka's ``.snapshot`` bytes, encoded and decoded by
        :mod:`brokkr.core.producer_state`). Written atomically, replacing one at the same
        offset; a log keeps at least the two newest, so that one is left after a
        truncation below the newest; a truncation drops those above its offset."""

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        """The newest producer snapshot at or below the log end offset, as ``(offset,
        data)``, or None."""


@runtime_checkable
class KeptHighWatermark(Protocol):
    """A log told the partition's high watermark and last stable offset after each move:
    it keeps the high watermark across restarts (Kafka's replication-offset-checkpoint),
    where a cluster replica starts from, and compacts nothing at or past the LSO."""

    #: As the broker last set it (None before); after a restart, as last kept.
    high_watermark: int | None
    last_stable_offset: int | None


@runtime_checkable
class Compaction(Protocol):
    """A storage that compacts the logs of ``cleanup.policy=compact`` topics."""

    def clean_logs(self) -> None:
        """Start cleaning the compacted logs that need it, off the event loop (called on
        it every ``log.cleaner.backoff.ms``)."""


@runtime_checkable
class LogDirs(Protocol):
    """A storage keeping partitions in directories: DescribeLogDirs reports each, empty or
    not; a log's segment paths (``<dir>/<topic>-<partition>/...``) say which holds it
    (:func:`log_dir_of`). AlterReplicaLogDirs moves a log to another of them."""

    dirs: Sequence[Path]

    def move_log(self, log: PartitionLog, directory: Path) -> LogMove:
        """Start moving ``log`` into ``directory`` (one of ``dirs``, not its own): a new,
        empty log there that the broker fills (:class:`LogMove`)."""


class LogMove(Protocol):
    """A log moving to another log dir (Kafka's future log and ReplicaAlterLogDirsThread).
    The broker calls :meth:`copy` on the event loop, a bounded step at a time, while the
    partition takes appends as usual; once :meth:`caught_up` says so, :meth:`complete`
    without an await in between, so that no append comes between the check and the swap.
    The log moving keeps the future log in step with its truncations, and deletes it when
    it is deleted or closed (a move a restart interrupts is dropped, the log where it was)."""

    directory: Path  #: where the log is going
    future: PartitionLog  #: the log there, catching up

    def copy(self, max_bytes: int) -> int:
        """Copy the next batches of the log (about ``max_bytes``, at least one) and what
        goes with them (aborted transactions) to the future log; returns the bytes copied."""

    def caught_up(self) -> bool:
        """Whether the future log holds all of the log now, and the move may complete."""

    def flush(self) -> Future:
        """Make what the future log holds durable (in the background), before the swap."""

    def complete(self) -> PartitionLog:
        """Swap: the future log, at its final path, becomes the partition's log (its start
        offset, leader epochs and kept high watermark as the log's); the log is deleted.
        A crash in the middle leaves one of the two, complete, for the next start."""

    def cancel(self) -> None:
        """Give up: delete the future log (the log stays where it is)."""

    @property
    def cancelled(self) -> bool:
        """The move can no longer complete: cancelled, or the log was deleted or closed."""


def log_dir_of(log: PartitionLog) -> Path | None:
    """The log dir holding ``log`` (None for a log without files), by the path of its
    first segment: ``<dir>/<topic>-<partition>/<file>``."""
    segments = log.segments()
    if not segments or segments[0].path is None:
        return None
    return Path(segments[0].path).parent.parent


#: The protocol each capability stands for.
PROTOCOLS: dict[Capability, type] = {
    Capability.LEADER_EPOCHS: LeaderEpochs,
    Capability.READ_REGIONS: ReadRegions,
    Capability.TXN_INDEX: TxnIndex,
    Capability.PRODUCER_SNAPSHOTS: ProducerSnapshots,
    Capability.KEPT_HIGH_WATERMARK: KeptHighWatermark,
    Capability.COMPACTION: Compaction,
    Capability.LOG_DIRS: LogDirs,
}
#: Those the storage object itself implements; the others, every log it opens.
OF_THE_STORAGE = Capability.COMPACTION | Capability.LOG_DIRS


@attrs.frozen
class StorageCapabilities:
    """A storage's declared capabilities, checked once (:func:`check_capabilities`) and
    read as plain booleans wherever the broker would otherwise ask an object what it has."""

    storage: str  #: how messages name it: its ``brokkr.storage`` and class
    declared: Capability
    leader_epochs: bool = False
    read_regions: bool = False
    txn_index: bool = False
    producer_snapshots: bool = False
    kept_high_watermark: bool = False
    compaction: bool = False
    log_dirs: bool = False

    def require(self, needed: Capability, by: str, because: str) -> None:
        """Refuse (ConfigError) a setting ``by`` that needs ``needed`` when the storage lacks it."""
        missing = needed & ~self.declared
        if missing:
            raise ConfigError(
                f"{by} needs the storage capability {_names(missing)} (brokkr.core.log), which "
                f"{self.storage} does not declare: {because}"
            )


def check_capabilities(storage: Storage, name: str) -> StorageCapabilities:
    """What ``storage`` (selected by ``brokkr.storage=name``) declares, checked: the one
    place that looks at a storage object for what it has. A declared storage-level
    capability it does not implement is refused (ConfigError); its logs' are checked by
    the contract suite (:func:`unimplemented`), never on the broker's paths."""
    who = f"brokkr.storage={name} ({type(storage).__qualname__})"
    declared = getattr(storage, "capabilities", Capability(0))
    if not isinstance(declared, Capability):
        raise ConfigError(f"{who} declares capabilities {declared!r}, not a brokkr.core.log.Capability")
    missing = unimplemented(storage, declared & OF_THE_STORAGE)
    if missing:
        raise ConfigError(f"{who} declares {_names(missing)} but does not implement {_protocols(missing)}")
    flags = {c.name.lower(): c in declared for c in Capability}
    return StorageCapabilities(who, declared, **flags)


def unimplemented(obj: object, declared: Capability) -> Capability:
    """The capabilities of ``declared`` whose protocol ``obj`` (a storage or one of its
    logs) does not satisfy: members missing by name (their signatures are not checked)."""
    missing = Capability(0)
    for capability in declared:
        if not isinstance(obj, PROTOCOLS[capability]):
            missing |= capability
    return missing


def _names(capabilities: Capability) -> str:
    return ", ".join(c.name for c in capabilities)


def _protocols(capabilities: Capability) -> str:
    return ", ".join(f"brokkr.core.log.{PROTOCOLS[c].__name__}" for c in capabilities)
