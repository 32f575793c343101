"""The group coordinator of one broker: which ``__consumer_offsets`` partitions it
coordinates, the groups and offsets loaded from them, and how changes are written.

A group belongs to partition ``abs(javaHashCode(group_id)) % offsets.topic.num.partitions``
and is coordinated by that partition's leader. Ownership changes only through two calls,
the seam that replication will drive: :meth:`GroupCoordinator.became_leader` (load the
partition's groups; requests for them answer COORDINATOR_LOAD_IN_PROGRESS until loaded)
and :meth:`GroupCoordinator.resigned` (drop them; requests answer NOT_COORDINATOR). On one
broker, the broker leads every partition from start-up.

Durable state is a log of coordinator records (Kafka's CoordinatorShard): a change is
written as records through the broker's normal append path, awaited like acks=-1, and
only then applied to memory by :meth:`GroupCoordinator.replay`, the same function that
applies the records read back when a partition loads. A classic group's membership lives
in memory; its GroupMetadata record is what a restart recovers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from brokkr.core.errors import BrokkrError, ErrorCode
from brokkr.core.log import OffsetOutOfRange, batch_records
from brokkr.core.protocol.records import BatchHeader, build_batch, iter_batches_untrusted
from brokkr.core.validation import RecordsError, ValidatedRecords

from .classic import ClassicGroup, ClassicMember, ClassicState
from .classic_protocol import ClassicProtocol
from .consumer_coordinator import ConsumerCoordinator
from .consumer_group import ConsumerGroup
from .consumer_records import TYPES as CONSUMER_RECORD_TYPES
from .consumer_records import group_tombstones
from .consumer_records import replay as replay_consumer_record
from .offsets import OffsetAndMetadata, Offsets
from .records import CoordinatorRecord, decode_record, encode_key, encode_value, record_spec

log = logging.getLogger("brokkr.groups")

OFFSETS_TOPIC = "__consumer_offsets"
#: GroupMetadataValue version written (Kafka 2.3+ writes 3).
GROUP_METADATA_VERSION = 3
#: Bytes read per step when loading a partition, between which the loop runs other work.
LOAD_CHUNK_BYTES = 1 << 20


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


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group_id`` (GroupMetadataManager.partitionFor)."""
    return kafka_abs(java_string_hash(group_id)) % num_partitions


class GroupCoordinator:
    """The groups (of either protocol) and committed offsets this broker coordinates.

    Registered as a plugin of its broker (``brokkr.groups.coordinator``); the API
    handlers find it with :func:`brokkr.plugins.groups.coordinator_of`."""

    def __init__(self, broker):
        self.broker = broker
        self.num_partitions: int = broker.config["offsets.topic.num.partitions"]
        #: partition -> (loaded?, leader epoch) for the partitions this node leads.
        self.owned: dict[int, tuple[bool, int]] = {}
        self._loads: dict[int, asyncio.Task] = {}
        self._tasks: set[asyncio.Task] = set()
        self.groups: dict[str, Any] = {}
        self.offsets = Offsets(self)
        self.classic = ClassicProtocol(self)
        self.consumer = ConsumerCoordinator(self)
        self._creating = False

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Alone, take over every partition of ``__consumer_offsets`` if it exists (one
        broker leads them all); else it is created on the first group lookup, as in Kafka.
        On a cluster, partitions are taken over as this broker becomes their leader."""
        topic = self.broker.topics.get(OFFSETS_TOPIC)
        if topic is not None and self.broker.replicas is None:
            self._take_over(topic)
        self.spawn(self.offsets.expire_periodically(), "offsets expiry")
        self.consumer.start()

    def create_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted): what Kafka's first FindCoordinator for a
        group does, answering COORDINATOR_NOT_AVAILABLE meanwhile. Alone, the broker takes it
        over at once; on a cluster, with ``offsets.topic.replication.factor`` replicas, each
        partition's leader does."""
        config = self.broker.config
        configs = {"cleanup.policy": "compact", "segment.bytes": config["offsets.topic.segment.bytes"]}
        if self.broker.replicas is None:
            self._take_over(self.broker.create_topic(OFFSETS_TOPIC, self.num_partitions, configs))
        elif not self._creating:
            self._creating = True
            rf = config["offsets.topic.replication.factor"]
            self.spawn(self._create_on_cluster(rf, {k: str(v) for k, v in configs.items()}), "create offsets topic")

    async def _create_on_cluster(self, replication_factor: int, configs: dict[str, str]) -> None:
        try:
            await self.broker.replicas.create_topic(OFFSETS_TOPIC, self.num_partitions, replication_factor, configs)
        except BrokkrError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
        finally:
            self._creating = False

    def _take_over(self, topic) -> None:
        # The topic's own partition count decides once it exists, as in Kafka.
        self.num_partitions = len(topic.partitions)
        for partition in topic.partitions:
            self.became_leader(partition.index, partition.leader_epoch)

    def stop(self) -> None:
        for index in list(self.owned):
            self.resigned(index)
        for task in list(self._tasks):
            task.cancel()

    def spawn(self, coro, name: str) -> asyncio.Task:
        """Run ``coro`` in the background, kept until it ends (its failure is logged)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"brokkr-groups {name}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("%s failed", task.get_name(), exc_info=task.exception())

    # -- ownership seam ---------------------------------------------------------------

    def became_leader(self, index: int, epoch: int) -> None:
        """This node leads ``__consumer_offsets`` partition ``index`` at ``epoch``: load its
        groups and offsets; until loaded, their requests answer COORDINATOR_LOAD_IN_PROGRESS."""
        current = self.owned.get(index)
        if current is not None and current[1] >= epoch:
            return
        topic = self.broker.topics.get(OFFSETS_TOPIC)
        if topic is not None:  # the topic's own partition count decides once it exists
            self.num_partitions = len(topic.partitions)
        self.owned[index] = (False, epoch)
        self._loads[index] = asyncio.get_running_loop().create_task(
            self._load(index, epoch), name=f"brokkr-groups-load-{index}"
        )

    def resigned(self, index: int, epoch: int | None = None) -> None:
        """This node no longer leads partition ``index``: drop its groups and offsets."""
        task = self._loads.pop(index, None)
        if task is not None:
            task.cancel()
        self.owned.pop(index, None)
        for group_id in [g for g in self.groups if self.partition_for(g) == index]:
            self._unload(group_id, ErrorCode.NOT_COORDINATOR)
        for group_id in [g for g in self.offsets.by_group if self.partition_for(g) == index]:
            del self.offsets.by_group[group_id]

    async def _load(self, index: int, epoch: int) -> None:
        """Replay the partition's records (GroupMetadataManager.loadGroupsAndOffsets)."""
        try:
            count = await self._replay_partition(self.broker.partition(OFFSETS_TOPIC, index))
        except Exception:  # served with what loaded rather than refused for ever
            log.exception("loading %s-%d failed; its groups are served with what was read", OFFSETS_TOPIC, index)
            count = -1
        finally:
            self._loads.pop(index, None)
        for group in self.groups.values():
            if isinstance(group, ClassicGroup) and self.partition_for(group.group_id) == index:
                self.classic.schedule_sessions(group)
            elif isinstance(group, ConsumerGroup) and self.partition_for(group.group_id) == index:
                self.consumer.loaded(group)
        if self.owned.get(index) == (False, epoch):
            self.owned[index] = (True, epoch)
            log.debug("loaded %s-%d at epoch %d (%d records)", OFFSETS_TOPIC, index, epoch, count)

    async def _replay_partition(self, partition) -> int:
        offset, end, count = partition.log.log_start_offset, partition.high_watermark, 0
        while offset < end:
            try:
                data = partition.log.read(offset, LOAD_CHUNK_BYTES, end, True)
            except OffsetOutOfRange:  # retention or cleaning moved the start meanwhile
                offset = partition.log.log_start_offset
                continue
            if not data:
                break
            for header in iter_batches_untrusted(data):
                if header.last_offset < offset:
                    continue
                offset = header.last_offset + 1
                # Control batches and (not yet served) transactional offset commits are skipped.
                if header.is_control or header.is_transactional:
                    continue
                for record in batch_records(data, header, self.broker.codecs):
                    try:
                        self.replay(decode_record(record.key, record.value))
                    except Exception as exc:
                        log.warning("%s: skipping a record that does not load: %s", partition.name, exc)
                    count += 1
            await asyncio.sleep(0)  # let other requests in between chunks
        return count

    async def wait_loaded(self) -> None:
        """Return once every partition being loaded now has loaded (or was dropped)."""
        await asyncio.gather(*self._loads.values(), return_exceptions=True)

    # -- lookups ----------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def check_coordinator(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id`` and has loaded it; otherwise the
        error Kafka answers (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        owned = self.owned.get(self.partition_for(group_id))
        if owned is None:
            return ErrorCode.NOT_COORDINATOR
        if not owned[0]:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode.NONE

    def add_group(self, group):
        self.groups[group.group_id] = group
        return group

    def _unload(self, group_id: str, error: ErrorCode) -> None:
        group = self.groups.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            self.classic.unload(group, error)
        elif isinstance(group, ConsumerGroup):
            self.consumer.unloaded(group_id)

    # -- writing and replaying ----------------------------------------------------

    async def write(self, group_id: str, records: list[tuple[bytes, bytes | None]], replay: bool = True) -> ErrorCode:
        """Append ``records`` (encoded key and value) to the group's partition as one batch,
        wait until they are acknowledged as acks=-1 waits (``offsets.commit.timeout.ms``),
        then, with ``replay``, apply them to memory. Returns the append's error, if any."""
        error = self.check_coordinator(group_id)
        if error:
            return error
        partition = self.broker.partition(OFFSETS_TOPIC, self.partition_for(group_id))
        if partition is None:
            return ErrorCode.NOT_COORDINATOR
        now = int(time.time() * 1000)
        batch = bytearray(build_batch(records, timestamp=now))
        if len(batch) > partition.config["max.message.bytes"]:
            return ErrorCode.MESSAGE_TOO_LARGE
        validated = ValidatedRecords(batch, [BatchHeader.unpack(batch)], len(records), now)
        try:
            info = self.broker.append(partition, validated)
        except RecordsError as exc:
            return exc.code
        except OSError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        timeout = self.broker.config["offsets.commit.timeout.ms"]
        if await self.broker.wait_acknowledged({partition: info.last_offset + 1}, timeout):
            return ErrorCode.REQUEST_TIMED_OUT
        if replay:
            for key, value in records:
                self.replay(decode_record(key, value))
        return ErrorCode.NONE

    def replay(self, record: CoordinatorRecord) -> None:
        """Apply one record to memory: at runtime after it is written, and when loading."""
        if record.type == "OffsetCommit":
            self.offsets.replay(record)
            if record.value is not None and record.key.group not in self.groups:
                # Offsets without a group (simple consumers, AdminClient) belong to an Empty group.
                self.add_group(ClassicGroup(record.key.group, state_timestamp=record.value.commit_timestamp))
        elif record.type == "GroupMetadata":
            group_id = record.key.group
            if record.value is None:
                if isinstance(self.groups.get(group_id), ClassicGroup):
                    self._unload(group_id, ErrorCode.UNKNOWN_MEMBER_ID)
            else:
                self._unload(group_id, ErrorCode.REBALANCE_IN_PROGRESS)
                self.add_group(classic_group_from_record(group_id, record.value))
        elif record.type in CONSUMER_RECORD_TYPES:
            replay_consumer_record(self.groups, record)
        else:
            log.debug("ignoring a %s record", record.type)

    async def store_group(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> ErrorCode:
        """Write the group's GroupMetadata record (with ``assignments``, else the members'
        current ones). Classic membership lives in memory, so the record is not replayed."""
        value_cls = record_spec("GroupMetadataValue").cls
        member_cls = record_spec("GroupMetadataValue").struct("MemberMetadata")
        protocol = group.protocol_name or ""
        members = [
            member_cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(protocol),
                assignment=(assignments or {}).get(m.member_id, m.assignment),
            )
            for m in group.members.values()
        ]
        value = value_cls(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp,
            members=members,
        )
        key = encode_key(2, record_spec("GroupMetadataKey").cls(group=group.group_id))
        return await self.write(
            group.group_id, [(key, encode_value("GroupMetadata", GROUP_METADATA_VERSION, value))], replay=False
        )

    async def delete_group(self, group_id: str) -> ErrorCode:
        """Tombstones for the group's offsets and metadata; the group is then gone."""
        if isinstance(self.groups.get(group_id), ConsumerGroup):
            async with self.consumer.lock(group_id):  # no member joins meanwhile
                group = self.groups.get(group_id)
                if isinstance(group, ConsumerGroup) and not group.is_empty:
                    return ErrorCode.NON_EMPTY_GROUP
                records = self.offsets.tombstones(group_id, None)
                if isinstance(group, ConsumerGroup):
                    records += group_tombstones(group)
                return await self.write(group_id, records)
        records = self.offsets.tombstones(group_id, None)
        records.append((encode_key(2, record_spec("GroupMetadataKey").cls(group=group_id)), None))
        group = self.groups.get(group_id)
        if group is not None:
            group.state = ClassicState.DEAD if isinstance(group, ClassicGroup) else group.state
        error = await self.write(group_id, records)
        if error and group is not None and isinstance(group, ClassicGroup):
            group.state = ClassicState.EMPTY
        return error


def classic_group_from_record(group_id: str, value) -> ClassicGroup:
    """A classic group as its last GroupMetadata record left it: Stable with its members
    and their assignments, or Empty (GroupMetadataManager's loading of a group)."""
    protocol = value.protocol or ""
    group = ClassicGroup(
        group_id,
        state=ClassicState.STABLE if value.members else ClassicState.EMPTY,
        state_timestamp=value.current_state_timestamp,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol,
        leader_id=value.leader,
    )
    for m in value.members:
        rebalance = m.rebalance_timeout if m.rebalance_timeout >= 0 else m.session_timeout
        member = ClassicMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            rebalance,
            m.session_timeout,
            value.protocol_type,
            [(protocol, bytes(m.subscription))],
            bytes(m.assignment),
        )
        group.members[member.member_id] = member
        if member.is_static:
            group.static_members[member.group_instance_id] = member.member_id
    return group


__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "OffsetAndMetadata", "partition_for"]
