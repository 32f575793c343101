"""Share groups on a running coordinator: it runs :class:`~.share_protocol.ShareProtocol`'s
operations against the coordinator's groups, writes their records through
:meth:`GroupCoordinator.write` (which replays them), fires the members' session timers, and
has the share state of subscribed partitions initialized through the broker's persister
(``broker.share_state``, the share coordinator's client) before they are assigned.

Operations on one group are serialized by the group's lock, the one consumer groups use
(:meth:`.consumer_coordinator.ConsumerCoordinator.lock`), so that a share group and a group
of another type of the same id never interleave either.
"""

from __future__ import annotations

import asyncio
import logging
import types
import uuid
from typing import TYPE_CHECKING, Any

import attrs
from brokkr.core.apis.common import partition_leader
from brokkr.core.broker_client import BrokerClients
from brokkr.core.errors import ConfigError, CorruptRequest, ErrorCode
from brokkr.core.protocol.frames import request_spec

from ..coordinator_partitions import write_error
from .consumer_coordinator import RETRY_MS, BrokerTopics, now_ms, run_timers
from .consumer_group import GroupApiError
from .consumer_protocol import HeartbeatResult
from .consumer_timers import Expiry
from .share_group import ShareGroup, TopicPartitions
from .share_protocol import ShareProtocol, ShareSettings, ToInitialize, share_group, validate
from .share_records import group_epoch, state_metadata

if TYPE_CHECKING:
    from .coordinator import GroupCoordinator

log = logging.getLogger("brokkr.groups")
#: Kafka's PartitionFactory.UNINITIALIZED_START_OFFSET: the share partition starts where
#: the group's share.auto.offset.reset says.
UNINITIALIZED_START_OFFSET = -1
#: How long a heartbeat waits for the share state it asked for (then it answers without
#: those partitions; after a failed initialization a group's are tried again
#: group.share.initialize.retry.interval.ms later).
INITIALIZE_WAIT_S = 1.0
#: (error, message, per partition or topic: its error).
ShareOffsetsResult = tuple[ErrorCode, str | None, dict]
#: ListOffsets, the version sent to the partitions' leaders and its "latest offset" timestamp.
LIST_OFFSETS, LIST_OFFSETS_VERSION, LATEST = 2, 7, -1


def check_settings(config) -> None:
    """The group.share.* settings hold together (the ``require`` calls of Kafka's
    GroupCoordinatorConfig and ShareGroupConfig, at start); ConfigError otherwise."""
    value = config.__getitem__
    for kind in ("record.lock.duration.ms", "delivery.count.limit", "partition.max.record.locks"):
        low, mid, high = (f"group.share.{w}{kind}" for w in ("min.", "", "max."))
        for larger, smaller in ((mid, low), (high, mid)):
            if value(larger) < value(smaller):
                raise ConfigError(f"{larger} must be greater than or equal to {smaller}")
    for kind in ("heartbeat.interval.ms", "session.timeout.ms"):
        low, mid, high = (f"group.share.{w}{kind}" for w in ("min.", "", "max."))
        for larger, smaller in ((high, low), (mid, low)):
            if value(larger) < value(smaller):
                raise ConfigError(f"{larger} must be greater than or equal to {smaller}")
        if value(mid) > value(high):
            raise ConfigError(f"{mid} must be less than or equal to {high}")
    if value("group.share.heartbeat.interval.ms") >= value("group.share.session.timeout.ms"):
        raise ConfigError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")


class _Refused(Exception):
    def __init__(self, error: GroupApiError):
        self.error = error


class ShareGroups:
    """The share groups of one :class:`GroupCoordinator` (``coordinator.share``)."""

    def __init__(self, coordinator: GroupCoordinator):
        self.coordinator = coordinator
        self.broker = coordinator.broker
        check_settings(self.broker.config)
        self.protocol = ShareProtocol(self.settings_of)
        self.topics = BrokerTopics(coordinator.broker)
        #: Soft state: each group's running initialization (when a failed one may be retried is
        #: on the group, ShareGroup.initialize_retry_ms, and goes with it).
        self._initializing: dict[str, asyncio.Task] = {}
        #: Clients to the partitions' leaders, for their end offsets (lag).
        self._clients: BrokerClients | None = None

    @property
    def persister(self) -> Any:
        """The share state's client (S1's ``broker.share_state``), None without one."""
        return getattr(self.broker, "share_state", None)

    def settings_of(self, group_id: str) -> ShareSettings:
        configs = self.broker.group_configs
        return ShareSettings(
            session_timeout_ms=configs.typed(group_id, "share.session.timeout.ms"),
            heartbeat_interval_ms=configs.typed(group_id, "share.heartbeat.interval.ms"),
            max_size=self.broker.config["group.share.max.size"],
        )

    def start(self) -> None:
        self.coordinator.spawn(self._run_timers(), "share group timers")

    def lock(self, group_id: str) -> asyncio.Lock:
        return self.coordinator.consumer.lock(group_id)

    # -- ShareGroupHeartbeat ----------------------------------------------------------

    async def heartbeat(self, ctx, request) -> tuple[ErrorCode, str | None, HeartbeatResult | None]:
        """Run one heartbeat: (error, message, result); the result only without error.
        Subscribed partitions without share state are initialized by a task of their own;
        the answer waits for it up to :data:`INITIALIZE_WAIT_S` and, once they are, carries
        their assignment (Kafka assigns them at the member's next heartbeat)."""
        try:  # Kafka validates the request before it looks for the group's coordinator
            validate(request)
        except GroupApiError as exc:
            return exc.code, exc.message, None
        group_id = request.group_id
        client = {"client_id": ctx.client_id or "", "client_host": f"/{ctx.client_host}"}
        try:
            error, result, pending = await self._beat(group_id, request, client)
        except _Refused as refused:
            return refused.error.code, refused.error.message, None
        if error or not pending:
            return error, None, result
        task = self._initializing.get(group_id)
        group = self.coordinator.groups.get(group_id)
        retry_ms = group.initialize_retry_ms if isinstance(group, ShareGroup) else 0
        if task is None and now_ms() >= retry_ms:
            task = self._initializing[group_id] = self.coordinator.spawn(
                self._initialize(group_id, pending), f"initializing the share state of group {group_id}"
            )
            task.add_done_callback(lambda _t, g=group_id: self._initializing.pop(g, None))
        if task is None:
            return ErrorCode.NONE, None, result
        done, _ = await asyncio.wait({task}, timeout=INITIALIZE_WAIT_S)
        if not done or task.cancelled() or task.exception() is not None or not task.result():
            return ErrorCode.NONE, None, result
        again = types.SimpleNamespace(
            group_id=group_id, member_id=result.member_id, member_epoch=result.member_epoch, rack_id=None,
            subscribed_topic_names=None,
        )  # fmt: skip
        try:
            error, second, _ = await self._beat(group_id, again, client)
        except _Refused:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        if error:  # the first answer stands: the member learns the rest at its next heartbeat
            return ErrorCode.NONE, None, result
        assignment = second.assignment if second.assignment is not None else result.assignment
        return ErrorCode.NONE, None, attrs.evolve(second, assignment=assignment)

    async def _beat(self, group_id: str, request, client: dict) -> tuple[ErrorCode, Any, ToInitialize]:
        """One heartbeat operation under the group's lock, its records written."""
        async with self.lock(group_id):
            error = self.coordinator.check_coordinator(group_id)
            if error:
                return error, None, {}
            self.protocol.initializes = self.persister is not None
            try:
                records, result, pending = self.protocol.heartbeat(
                    self.coordinator.groups, request, now_ms=now_ms(), topics=self.topics, **client
                )
            except GroupApiError as exc:
                raise _Refused(exc) from None
            if records:
                error = await self.coordinator.write(group_id, records)
                if error:
                    return write_error(error), None, {}
            if request.member_epoch == -1:  # it left: what it holds here is released now
                self._member_left(group_id, request.member_id)
            return ErrorCode.NONE, result, pending

    async def _initialize(self, group_id: str, pending: ToInitialize) -> bool:
        """Initialize the share state of ``pending`` partitions (a new topic's from
        share.auto.offset.reset, a grown topic's new partitions from offset 0, as Kafka
        does) and record those that succeeded; after a failure the group's partitions are
        tried again after group.share.initialize.retry.interval.ms. Whether any succeeded."""
        group = self.coordinator.groups.get(group_id)
        if not isinstance(group, ShareGroup) or self.persister is None:
            return False
        epoch = group.group_epoch
        calls, keys = [], []
        for topic_id, (topic, new) in pending.items():
            start = UNINITIALIZED_START_OFFSET if new else 0
            for p in sorted(topic.partitions):
                calls.append(self.persister.initialize(group_id, topic_id, p, start, epoch))
                keys.append((topic_id, p))
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        done: dict[Any, set[int]] = {}
        for (topic_id, p), outcome in zip(keys, outcomes, strict=True):
            if isinstance(outcome, BaseException) or outcome:
                log.warning(
                    "share group %s: initializing the state of %s-%d failed: %s", group_id, topic_id, p, outcome
                )
                group.initialize_retry_ms = now_ms() + self.broker.config["group.share.initialize.retry.interval.ms"]
                continue
            done.setdefault(topic_id, set()).add(p)
        if not done:
            return False
        if len(keys) == sum(len(ps) for ps in done.values()):
            group.initialize_retry_ms = 0
        initialized = {t: TopicPartitions(pending[t][0].name, frozenset(ps)) for t, ps in done.items()}
        async with self.lock(group_id):
            group = self.coordinator.groups.get(group_id)
            if not isinstance(group, ShareGroup) or self.coordinator.check_coordinator(group_id):
                return False
            return not await self.coordinator.write(group_id, [self.protocol.initialized(group, initialized)])

    # -- the share-group offset admin APIs ----------------------------------------------

    def initialized_partitions(self, group_id: str) -> dict[uuid.UUID, TopicPartitions]:
        """The partitions whose share state the group initialized (DescribeShareGroupOffsets
        of all topics); none for an unknown group or one of another type, as Kafka."""
        group = self.coordinator.groups.get(group_id)
        return dict(group.initialized) if isinstance(group, ShareGroup) else {}

    async def alter_offsets(self, group_id: str, offsets: dict[tuple[uuid.UUID, int], int]) -> ShareOffsetsResult:
        """AlterShareGroupOffsets (Kafka's alterShareGroupOffsets): an empty share group (made
        if absent) moves to a new epoch and the partitions' state starts over at the offsets
        given, initialized at that epoch. Per partition: the persister's error."""
        async with self.lock(group_id):
            error = self.coordinator.check_coordinator(group_id)
            if error:
                return error, None, {}
            try:
                group = share_group(self.coordinator.groups, group_id, create=True)
            except GroupApiError as exc:
                return exc.code, exc.message, {}
            if not group.is_empty:
                return ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", {}
            epoch = group.group_epoch + 1
            error = await self.coordinator.write(group_id, [group_epoch(group_id, epoch, group.metadata_hash)])
            if error:
                return write_error(error), None, {}
            if self.persister is None:
                return ErrorCode.NONE, None, {tp: ErrorCode.COORDINATOR_NOT_AVAILABLE for tp in offsets}
            keys = sorted(offsets, key=lambda tp: (str(tp[0]), tp[1]))
            outcomes = await asyncio.gather(
                *(self.persister.initialize(group_id, t, p, offsets[(t, p)], epoch) for t, p in keys),
                return_exceptions=True,
            )
            errors = {
                tp: ErrorCode.UNKNOWN_SERVER_ERROR if isinstance(o, BaseException) else ErrorCode(o)
                for tp, o in zip(keys, outcomes, strict=True)
            }
            done: dict[uuid.UUID, set[int]] = {}
            for (t, p), e in errors.items():
                if not e:
                    done.setdefault(t, set()).add(p)
            group = self.coordinator.groups.get(group_id)
            if done and isinstance(group, ShareGroup):
                named = {t: TopicPartitions(self.broker.topics_by_id[t].name, frozenset(ps)) for t, ps in done.items()}
                error = await self.coordinator.write(group_id, [self.protocol.initialized(group, named)])
                if error:
                    errors.update({(t, p): write_error(error) for t, ps in done.items() for p in ps})
            return ErrorCode.NONE, None, errors

    async def delete_offsets(self, group_id: str, topic_ids: list[uuid.UUID]) -> ShareOffsetsResult:
        """DeleteShareGroupOffsets (Kafka's initiateDeleteShareGroupOffsets): an empty share
        group forgets the state of whole topics. Per topic id: the error (a topic without
        state: UNKNOWN_TOPIC_OR_PARTITION)."""
        async with self.lock(group_id):
            error = self.coordinator.check_coordinator(group_id)
            if error:
                return error, None, {}
            group = self.coordinator.groups.get(group_id)
            if not isinstance(group, ShareGroup):
                why = "not found" if group is None else "is not a share group"
                return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} {why}.", {}
            if not group.is_empty:
                return ErrorCode.NON_EMPTY_GROUP, "The group is not empty.", {}
            errors: dict = {t: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for t in topic_ids if t not in group.initialized}
            wanted = [t for t in topic_ids if t in group.initialized]
            if not wanted:
                return ErrorCode.NONE, None, errors
            partitions = [(t, p) for t in wanted for p in sorted(group.initialized[t].partitions)]
            results = await self.persister.delete(group_id, partitions) if self.persister is not None else {}
            for t in wanted:
                failed = [
                    ErrorCode(results.get((t, p), ErrorCode.COORDINATOR_NOT_AVAILABLE))
                    for p in group.initialized[t].partitions
                ]
                errors[t] = next((e for e in failed if e), ErrorCode.NONE)
            gone = [t for t in wanted if not errors[t]]
            if gone:
                initialized = {t: tp for t, tp in group.initialized.items() if t not in gone}
                record = state_metadata(group_id, group.initializing, initialized, group.deleting)
                error = await self.coordinator.write(group_id, [record])
                errors.update({t: write_error(error) for t in gone if error})
            return ErrorCode.NONE, None, errors

    async def end_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], tuple[ErrorCode, int]]:
        """(error, end offset) of each partition, as its leader answers ListOffsets for the
        latest offset, read_uncommitted: its high watermark (Kafka's
        NetworkPartitionMetadataClient.listLatestOffsets, which lag is computed from). Led
        here, it is read at once; else one request per leader, all at once; without a
        leader, LEADER_NOT_AVAILABLE."""
        out: dict[tuple[str, int], tuple[ErrorCode, int]] = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for name, index in partitions:
            local = self.broker.partition(name, index)
            if local is not None and local.is_leader:
                out[(name, index)] = (ErrorCode.NONE, local.high_watermark)
                continue
            leader = partition_leader(self.broker, name, index)
            if leader is None or leader < 0:
                out[(name, index)] = (ErrorCode.LEADER_NOT_AVAILABLE, -1)
            else:
                by_leader.setdefault(leader, []).append((name, index))
        answers = await asyncio.gather(*(self._list_latest(node, tps) for node, tps in by_leader.items()))
        for answer in answers:
            out.update(answer)
        return out

    async def _list_latest(self, node: int, partitions: list[tuple[str, int]]) -> dict:
        """ListOffsets (latest, read_uncommitted) of ``partitions`` to broker ``node``, their leader."""
        if self._clients is None:
            self._clients = BrokerClients(self.broker, "share-group-lag")
        client = self._clients.get(node)
        if client is None:
            return dict.fromkeys(partitions, (ErrorCode.LEADER_NOT_AVAILABLE, -1))
        spec = request_spec(LIST_OFFSETS)
        wanted: dict[str, list] = {}
        for name, index in partitions:
            wanted.setdefault(name, []).append(
                spec.struct("ListOffsetsPartition")(partition_index=index, current_leader_epoch=-1, timestamp=LATEST)
            )
        topics = [spec.struct("ListOffsetsTopic")(name=name, partitions=ps) for name, ps in wanted.items()]
        body = spec.cls(replica_id=-1, isolation_level=0, topics=topics)
        timeout_s = self.broker.config["replica.socket.timeout.ms"] / 1000
        try:
            response = await client.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, body, timeout_s)
        except TimeoutError:
            return dict.fromkeys(partitions, (ErrorCode.REQUEST_TIMED_OUT, -1))
        except (OSError, CorruptRequest):
            return dict.fromkeys(partitions, (ErrorCode.NETWORK_EXCEPTION, -1))
        out = dict.fromkeys(partitions, (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1))  # left out of the answer
        for t in response.topics:
            for p in t.partitions:
                if (t.name, p.partition_index) in out:
                    out[(t.name, p.partition_index)] = (ErrorCode(p.error_code), p.offset)
        return out

    def close(self) -> None:
        if self._clients is not None:
            self._clients.close()

    # -- deletion -----------------------------------------------------------------------

    async def delete_state(self, group: ShareGroup) -> ErrorCode:
        """Delete the share state of every partition of the group (before its records)."""
        if self.persister is None or not group.initialized:
            return ErrorCode.NONE
        partitions = [(t, p) for t, tp in group.initialized.items() for p in sorted(tp.partitions)]
        results = await self.persister.delete(group.group_id, partitions)
        errors = [ErrorCode(code) for code in results.values() if code]
        return errors[0] if errors else ErrorCode.NONE

    async def topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """Kafka's maybeCleanupShareGroupState: each share group loaded here forgets the
        deleted topics' share-state metadata (their state is the share coordinator's to
        delete), one record per group that held any."""
        holding = [
            g.group_id
            for g in list(self.coordinator.groups.values())
            if isinstance(g, ShareGroup) and g.names_any(topic_ids)
        ]
        for group_id in holding:
            async with self.lock(group_id):
                group = self.coordinator.groups.get(group_id)
                if not isinstance(group, ShareGroup) or self.coordinator.check_coordinator(group_id):
                    continue
                record = self.protocol.without_topics(group, topic_ids)
                error = await self.coordinator.write(group_id, [record]) if record is not None else None
                if error:
                    log.warning("share group %s: forgetting deleted topics failed: %s", group_id, error.name)

    # -- timers and loading -----------------------------------------------------------

    async def _run_timers(self) -> None:
        await run_timers(self.protocol.timers, self._expire, "share group")

    async def _expire(self, expiry: Expiry) -> None:
        async with self.lock(expiry.group_id):
            if self.coordinator.check_coordinator(expiry.group_id):
                return
            records = self.protocol.expire(self.coordinator.groups, expiry, self.topics)
            if records and await self.coordinator.write(expiry.group_id, records):
                timers = self.protocol.timers  # retried, as Kafka's CoordinatorTimer
                timers.schedule(expiry.kind, expiry.group_id, expiry.member_id, now_ms() + RETRY_MS)
            elif records:
                self._member_left(expiry.group_id, expiry.member_id)

    def _member_left(self, group_id: str, member_id: str) -> None:
        """A removed member's share sessions on this broker close and the records it holds
        in the share partitions led here are released at once (plugins/share); those led by
        other brokers go with its connections to them, or when their locks run out."""
        from ..share import share_manager_of

        manager = share_manager_of(self.broker)
        if manager is not None:
            manager.member_left(group_id, member_id)

    def loaded(self, group: ShareGroup) -> None:
        self.protocol.loaded(group, now_ms())

    def unloaded(self, group_id: str) -> None:
        self.protocol.unloaded(group_id)
