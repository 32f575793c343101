"""What every coordinator shares (Kafka's CoordinatorRuntime): a keyed state partitioned
like its compacted internal topic, owned partition by partition by their leaders, loaded
by replaying the partition's records and changed by writing records.

A key (a group id, a transactional id) belongs to partition
``abs(javaHashCode(key)) % num_partitions`` and is coordinated by that partition's leader.
Ownership changes only through two calls, driven by leadership events:
:meth:`PartitionedCoordinator.became_leader` (load the partition; its keys answer
COORDINATOR_LOAD_IN_PROGRESS until loaded) and :meth:`PartitionedCoordinator.resigned`
(drop them; NOT_COORDINATOR). Alone, a broker leads every partition it opens, and is
told so the same way.

A change is written as records through :func:`brokkr.core.append.append` (origin
COORDINATOR: as Kafka's CoordinatorPartitionWriter, appended like acks=1, so without the
min.insync.replicas check, then awaited until the ISR has it), and only then applied to
memory by ``replay``, the same function that applies the records read back when a
partition loads (Kafka's CoordinatorShard). Subclasses
declare their topic (``internal``, an :class:`~brokkr.core.internal_topics.InternalTopic`,
which their plugin also declares with ``brokkr_internal_topics``) and how long a write
waits (``write_timeout``), and implement ``decode``, ``replay``, ``loaded`` and ``unloaded``.

The group coordinator (:mod:`brokkr.plugins.groups`) and the transaction coordinator
(:mod:`brokkr.plugins.transactions`) are both built on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from brokkr.core.append import Origin, append, error_of, wait_acknowledged
from brokkr.core.errors import BrokkrError, ConfigError, ErrorCode
from brokkr.core.internal_topics import InternalTopic
from brokkr.core.log import OffsetOutOfRange, batch_records
from brokkr.core.protocol.control import read_end_txn_marker
from brokkr.core.protocol.records import (
    TRANSACTIONAL_FLAG,
    BatchHeader,
    encode_batch,
    encode_record,
    iter_batches_untrusted,
)
from brokkr.core.validation import ValidatedRecords

log = logging.getLogger("brokkr.coordinator")

#: Bytes read per step when loading a partition, between which the loop runs other work.
LOAD_CHUNK_BYTES = 1 << 20
#: Keys whose hash a coordinator remembers (every request of a key looks its partition up;
#: Java's String.hashCode in Python is the cost): forgotten all at once when full.
HASHES_KEPT = 10_000


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The internal topic partition of ``key`` (GroupMetadataManager/TransactionStateManager.partitionFor)."""
    return kafka_abs(java_string_hash(key)) % num_partitions


#: What a failed write to a coordinator's topic answers (Kafka's mapping of append errors,
#: the same in its group and transaction coordinators).
WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)
#: The most tombstones one coordinator write carries, and the most bytes of their keys (a
#: group id may be 32 KiB long): well within max.message.bytes.
TOMBSTONES_PER_BATCH = 500
TOMBSTONE_BATCH_BYTES = 256 * 1024


def tombstone_batches(tombstones: list[tuple[bytes, None]]):
    """``tombstones`` (a deleted topic's offsets or share states) in order, in lists of at
    most :data:`TOMBSTONES_PER_BATCH` and (but for a single larger one)
    :data:`TOMBSTONE_BATCH_BYTES` of keys: one coordinator write each."""
    batch: list[tuple[bytes, None]] = []
    size = 0
    for tombstone in tombstones:
        if batch and (len(batch) == TOMBSTONES_PER_BATCH or size + len(tombstone[0]) > TOMBSTONE_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(tombstone)
        size += len(tombstone[0])
    if batch:
        yield batch


def write_error(error: ErrorCode, too_large: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> ErrorCode:
    """The error a client gets for a failed write: ``too_large`` for records over the
    size limit (offset commits answer INVALID_COMMIT_OFFSET_SIZE), NONE for success."""
    if not error:
        return ErrorCode.NONE
    return too_large if error in TOO_LARGE else WRITE_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR)


class PartitionedCoordinator:
    """Partition ownership, loading and writing for one coordinator of one broker."""

    #: Its internal topic: name, owner, and the settings it is created from.
    internal: InternalTopic
    #: The setting of how long a write waits to be acknowledged, in ms.
    write_timeout: str
    #: The setting of the bytes read per step when a partition loads (None: LOAD_CHUNK_BYTES).
    load_buffer: str | None = None
    #: Whether batches with the transactional flag are replayed while loading.
    replays_transactional = False
    #: The setting of the codec its batches are written with, a Kafka compression id
    #: (``offsets.topic.compression.codec``, ``share.coordinator.state.topic.compression.codec``;
    #: None: uncompressed).
    compression: str | None = None

    def __init__(self, broker):
        self.broker = broker
        self.num_partitions: int = self.internal.partitions(broker.config)
        #: partition -> (loaded?, leader epoch) for the partitions this node leads.
        self.owned: dict[int, tuple[bool, int]] = {}
        self._loads: dict[int, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self._creating: asyncio.Task | None = None  # the topic's creation (create_topic)
        self._hashes: dict[str, int] = {}  # key -> kafka_abs(java_string_hash(key)), at most HASHES_KEPT
        codec_id = broker.config[self.compression] if self.compression else 0
        #: What its batches are compressed with (None: they are not); a codec no plugin provides refuses the start.
        self.codec = broker.codecs.get(codec_id) if codec_id else None
        if codec_id and self.codec is None:
            raise ConfigError(
                f"{self.compression}={codec_id}: no codec plugin provides Kafka's compression id {codec_id}"
            )

    # -- to implement -------------------------------------------------------------

    def decode(self, key: bytes | memoryview | None, value: bytes | memoryview | None) -> Any:
        raise NotImplementedError

    def replay(self, record: Any) -> None:
        raise NotImplementedError

    def replay_transactional(self, producer_id: int, record: Any) -> None:
        """A record of a transactional batch read while loading (with ``replays_transactional``)."""

    def replay_marker(self, index: int, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended on partition ``index`` (a COMMIT/ABORT marker read while loading)."""

    def loaded(self, index: int) -> None:
        """Partition ``index`` has loaded (start its keys' timers)."""

    def unloaded(self, index: int) -> None:
        """Partition ``index`` is no longer led here: drop its keys."""

    # -- lifecycle ------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self.internal.name

    def start(self) -> None:
        """Start the coordinator's own tasks (none here). Partitions are taken over as this
        broker becomes their leader (``brokkr_became_leader``: alone, every partition at
        start and at its creation); a topic that does not exist yet is created on the
        first lookup, as in Kafka."""

    def create_topic(self) -> None:
        """Create the internal topic with its own settings (:meth:`InternalTopic.configs`):
        what Kafka's first FindCoordinator does, answering COORDINATOR_NOT_AVAILABLE
        meanwhile (and Metadata's auto-creation, through ``InternalTopic.start_creation``).
        It is created in the background, once at a time: alone, the broker opens its logs a
        few at a time (``Broker.create_topic_in_turns``); on a cluster, with the configured
        replication factor. Either way each partition is taken over as its leader is told
        (``brokkr_became_leader``)."""
        if self._creating is not None:
            return
        replicas = self.broker.replicas
        configs = self.internal.configs(self.broker.config, replicated=replicas is not None)
        if replicas is None:
            work = self.broker.create_topic_in_turns(self.topic, self.num_partitions, configs)
        else:
            rf = self.broker.config[self.internal.replication_factor]
            work = replicas.create_topic(self.topic, self.num_partitions, rf, configs)
        self._creating = self.spawn(self._create(work), "create topic")

    async def _create(self, work) -> None:
        try:
            await work
        except BrokkrError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", self.topic, exc)
        finally:
            self._creating = None

    def stop(self) -> None:
        for index in list(self.owned):
            self.resigned(index)
        for task in list(self._tasks):
            task.cancel()

    def spawn(self, coro, name: str) -> asyncio.Task:
        """Run ``coro`` in the background, kept until it ends (its failure is logged)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"brokkr-{self.topic} {name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # -- ownership seam ---------------------------------------------------------------

    def became_leader(self, index: int, epoch: int) -> None:
        """This node leads partition ``index`` at ``epoch``: load it; until loaded, its keys'
        requests answer COORDINATOR_LOAD_IN_PROGRESS."""
        current = self.owned.get(index)
        if current is not None and current[1] >= epoch:
            return
        topic = self.broker.topics.get(self.topic)
        if topic is not None:  # the topic's own partition count decides once it exists
            self.num_partitions = len(topic.partitions)
        self.owned[index] = (False, epoch)
        self._loads[index] = asyncio.get_running_loop().create_task(
            self._load(index, epoch), name=f"brokkr-load-{self.topic}-{index}"
        )

    def resigned(self, index: int, epoch: int | None = None) -> None:
        """This node no longer leads partition ``index``: drop its state."""
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        self.owned.pop(index, None)
        self.unloaded(index)

    async def _load(self, index: int, epoch: int) -> None:
        partition = self.broker.partition(self.topic, index)
        try:
            count = await self._replay_partition(partition)
            # A new leader's high watermark may still lag writes acknowledged under the old
            # one (its followers learn the high watermark a fetch later): the log is read to
            # its end, and served once that end is committed (Kafka's loader reads to the log
            # end offset too).
            end = partition.log.log_end_offset
            while partition.high_watermark < end and self.owned.get(index) == (False, epoch):
                await wait_acknowledged(self.broker, {partition: end}, 1000)
        except Exception:  # served with what loaded rather than refused for ever
            log.exception("loading %s-%d failed; its keys are served with what was read", self.topic, index)
            count = -1
        finally:
            self._loads.pop(index, None)
        if self.owned.get(index) == (False, epoch):
            self.owned[index] = (True, epoch)
            log.debug("loaded %s-%d at epoch %d (%d records)", self.topic, index, epoch, count)
            self.loaded(index)

    async def _replay_partition(self, partition) -> int:
        offset, end, count = partition.log.log_start_offset, partition.log.log_end_offset, 0
        chunk = self.broker.config[self.load_buffer] if self.load_buffer else LOAD_CHUNK_BYTES
        while offset < end:
            try:
                data = partition.log.read(offset, chunk, end, True)
            except OffsetOutOfRange:  # retention or cleaning moved the start meanwhile
                offset = partition.log.log_start_offset
                continue
            if not data:
                break
            for header in iter_batches_untrusted(data):
                if header.last_offset < offset:
                    continue
                offset = header.last_offset + 1
                if header.is_transactional and not self.replays_transactional:
                    continue
                if header.is_control:
                    marker = read_end_txn_marker(data, header)
                    if marker is not None:
                        self.replay_marker(partition.index, header.producer_id, marker.committed)
                    continue
                for record in batch_records(data, header, self.broker.codecs):
                    try:
                        decoded = self.decode(record.key, record.value)
                        if header.is_transactional:
                            self.replay_transactional(header.producer_id, decoded)
                        else:
                            self.replay(decoded)
                    except Exception as exc:
                        log.warning("%s: skipping a record that does not load: %s", partition.name, exc)
                    count += 1
            await asyncio.sleep(0)  # let other requests in between chunks
        return count

    async def wait_loaded(self) -> None:
        """Return once the topic being created now is (see :meth:`create_topic`) and every
        partition being loaded now has loaded (or was dropped)."""
        if self._creating is not None:
            await asyncio.gather(self._creating, return_exceptions=True)
        await asyncio.gather(*self._loads.values(), return_exceptions=True)

    # -- lookups ----------------------------------------------------------------------

    def partition_for(self, key: str) -> int:
        """The key's partition (:func:`partition_for`, its hash remembered)."""
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= HASHES_KEPT:
                self._hashes.clear()
            hashed = self._hashes[key] = kafka_abs(java_string_hash(key))
        return hashed % self.num_partitions

    def check_coordinator(self, key: str) -> ErrorCode:
        """NONE when this node coordinates ``key`` and has loaded it; otherwise the error
        Kafka answers (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        return self._check_partition(self.partition_for(key))

    def _check_partition(self, index: int) -> ErrorCode:
        owned = self.owned.get(index)
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if not owned[0]:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    # -- writing ----------------------------------------------------------------------

    async def write(
        self,
        key: str,
        records: list[tuple[bytes, bytes | None]],
        replay: bool = True,
        producer: tuple[int, int] | None = None,
    ) -> ErrorCode:
        """Append ``records`` (encoded key and value) to the key's partition as one batch,
        wait until they are acknowledged as acks=-1 waits, then, with ``replay``, apply
        them to memory. Returns the append's error, if any.

        With ``producer`` (producer id, epoch) the batch is transactional, part of that
        producer's transaction (TxnOffsetCommit): its sequence continues the producer's
        batches in the partition, and it counts once the transaction's marker is written."""
        index = self.partition_for(key)
        error = self._check_partition(index)
        if error:
            return error
        partition = self.broker.partition(self.topic, index)
        if partition is None:
            return ErrorCode.NOT_COORDINATOR
        now = int(time.time() * 1000)
        txn: dict[str, Any] = {}
        if producer is not None:
            producer_id, epoch = producer
            entry = partition.producers.producers.get(producer_id)
            same_epoch = entry is not None and entry.producer_epoch == epoch and entry.last_seq >= 0
            txn = {
                "attributes": TRANSACTIONAL_FLAG,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "base_sequence": (entry.last_seq + 1) & 0x7FFFFFFF if same_epoch else 0,
            }
        payload = b"".join([encode_record(i, 0, k, v) for i, (k, v) in enumerate(records)])
        if self.codec is not None:
            payload = self.codec.compress(payload)
            txn["attributes"] = txn.get("attributes", 0) | self.codec.id
        batch = encode_batch(payload, record_count=len(records), base_timestamp=now, max_timestamp=now, **txn)
        if len(batch) > partition.config["max.message.bytes"]:
            return ErrorCode.MESSAGE_TOO_LARGE
        validated = ValidatedRecords(batch, [BatchHeader.unpack(batch)], len(records), now)
        try:
            info = append(self.broker, partition, validated, Origin.COORDINATOR)
        except Exception as exc:
            return error_of(exc, partition)[0]
        timeout = self.broker.config[self.write_timeout]
        errors = await wait_acknowledged(self.broker, {partition: info.last_offset + 1}, timeout)
        if partition in errors:
            return errors[partition][0]
        if replay:
            for k, v in records:
                self.replay(self.decode(k, v))
        return ErrorCode.NONE
