"""Replication on a cluster (Kafka's ReplicaManager, Partition and ReplicaFetcherThread).

Theory of operation. The cluster membership (``core/cluster.py``) holds each topic's
replica assignment and each partition's state (leader, leader epoch, ISR). Whenever it
changes, :meth:`ReplicaManager.apply` makes this broker match it: it opens a local log for
every partition it is a replica of, becomes leader of those the state names it leader of,
and follows the others. The controller (``core/controller.py``), on whichever broker the
membership elected, writes those states.

- A **follower** truncates its log to its high watermark (what it holds beyond may never
  have been acknowledged), then fetches from the leader with its replica id, long-polled
  (``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``), and appends the leader's
  batches as they are, offsets and leader epochs included
  (:func:`brokkr.core.append.append_replicated`, origin REPLICATION). Its high
  watermark is the leader's, bounded by its own log end.
- A **leader** learns each follower's log end from its fetch offset. The high watermark is
  the smallest log end over the ISR; acks=-1 produce requests wait in the purgatory until
  it passes them. A follower caught up to the log end is in sync: one not caught up for
  ``replica.lag.time.max.ms`` leaves the ISR, one that reaches the high watermark joins
  it, each change written to the membership with the version read (the leader's own ISR
  updates, as Kafka's ZooKeeper-mode leaders make them).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

import attrs

from .append import append_replicated
from .broker_client import BrokerClient
from .cluster import BrokerInfo, ClusterMembership, PartitionState, TopicAssignment
from .controller import Controller, place_replicas
from .errors import BrokkrError, ConfigError, ErrorCode
from .log import OPEN_TURN_S, OffsetOutOfRange
from .protocol.frames import request_spec

if TYPE_CHECKING:
    from .broker import Broker
    from .partition import Partition

log = logging.getLogger("brokkr.replication")

FETCH = 1
FETCH_VERSION = 12


class ReplicaManager:
    def __init__(self, broker: Broker, membership: ClusterMembership):
        self.broker = broker
        self.membership = membership
        self.node_id = broker.node_id
        self.controller = Controller(self)
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        config = broker.config
        self.lag_time_s: float = config["replica.lag.time.max.ms"] / 1000
        self.num_fetchers: int = config["num.replica.fetchers"]
        #: replica.selector.class (KIP-392): set, consumers may be sent to a closer replica.
        self.selector: str | None = config["replica.selector.class"]
        self._dirty = asyncio.Event()
        # Sessions lost so far, and how many had been when the membership last reported a
        # change: an apply of what an earlier session read ends (see apply).
        self._sessions_lost = self._changed_in = 0
        self._task: asyncio.Task | None = None
        self._isr_task: asyncio.Task | None = None

    # -- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        listener = self.broker.listeners[0]
        endpoints = tuple((lst.name, lst.host, lst.port) for lst in self.broker.listeners)
        services = tuple(sorted(self.broker.services.items()))
        me = BrokerInfo(
            self.node_id, listener.host, listener.port, self.broker.config["broker.rack"], endpoints, services
        )
        await self.membership.join(me, self)
        self.broker.cluster_id = self.membership.cluster_id
        self._task = asyncio.create_task(self._apply_loop(), name="brokkr-replication")
        self._isr_task = asyncio.create_task(self._check_isr_loop(), name="brokkr-isr")
        self._dirty.set()

    async def stop(self) -> None:
        if self.broker.config["controlled.shutdown.enable"]:
            await self._controlled_shutdown()
        for task in (self._task, self._isr_task):
            if task is not None:
                task.cancel()
        for fetcher in self.fetchers.values():
            fetcher.stop()
        await self.membership.leave()

    async def _controlled_shutdown(self) -> None:
        """Kafka's controlled shutdown: leave the live brokers first, so the controller moves
        every leadership this broker holds to an in-sync replica, and wait until it has
        (at most the membership's ``session_timeout_s``, what an uncontrolled stop would
        take)."""

        def movable() -> list[str]:
            return [
                p.name
                for t in self.broker.topics.values()
                for p in t.local_partitions()
                if p.is_leader and any(r != self.node_id and r in self.membership.brokers() for r in p.isr)
            ]

        if not movable():
            return
        try:
            await self.membership.deregister()
        except Exception as exc:
            log.warning("controlled shutdown: leaving the live brokers failed (%s)", exc)
            return
        deadline = time.monotonic() + self.membership.session_timeout_s
        while (left := movable()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if left:
            log.warning("controlled shutdown: still leading %s", left)
        else:
            log.info("controlled shutdown: leadership moved to other brokers")

    # -- ClusterListener --------------------------------------------------------------

    def cluster_changed(self) -> None:
        self._changed_in = self._sessions_lost
        self._dirty.set()

    def session_lost(self) -> None:
        """Out of the cluster, this broker may no longer be a leader (the controller has
        elected others meanwhile): it steps down at once, so no write is acknowledged by it,
        and stops fetching. Once the membership has registered it again, the next apply
        makes it a follower of the new leaders (truncating what diverged) and it rejoins
        the ISR, as a Kafka broker does after its ZooKeeper session expired."""
        self._sessions_lost += 1
        for topic in self.broker.topics.values():
            for partition in topic.local_partitions():
                if partition.is_leader:
                    partition.leader_id = -1
                    self.broker.hot.notify("brokkr_became_follower", partition=partition, broker=self.broker)
                    self.broker.purgatory.check(partition)  # acks=-1 waits end: NOT_LEADER_OR_FOLLOWER
        self._update_fetchers({})

    # -- applying the cluster's state -----------------------------------------------------

    async def _apply_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            sessions_lost = self._changed_in
            try:
                if self.membership.controller_id == self.node_id:
                    await self.controller.reconcile()
                    await self.controller.rebalance_leaders(time.monotonic())
                await self.apply(sessions_lost)
            except Exception:
                log.exception("applying the cluster state failed; retrying")
                await asyncio.sleep(1)
                self._dirty.set()

    async def apply(self, sessions_lost: int) -> None:
        """Make the local replicas match the membership's topics and partition states, as
        read in the session that ``sessions_lost`` names (the count of sessions lost when
        the membership reported them).

        Replicas new to this broker (a topic created or grown, a reassignment, every replica
        at start) are opened a turn at a time (``OPEN_TURN_S``), as a single broker opens a
        topic's logs: other requests are served between turns, and a replica not yet open
        is not served here, as before it was assigned. Should the session be lost before or
        during the apply, it ends there: its states are stale, and the next apply, once the
        broker has registered again, starts from the new ones."""
        if self._sessions_lost != sessions_lost:
            return
        broker, m = self.broker, self.membership
        turn_ends = time.perf_counter() + OPEN_TURN_S
        following: dict[Partition, int] = {}
        for name, assignment in m.topics().items():
            topic = broker.topics.get(name)
            if topic is None or topic.topic_id != assignment.topic_id:
                if topic is not None:
                    broker.delete_topic(name)
                topic = broker.open_cluster_topic(assignment)
            if len(topic.partitions) < len(assignment.replicas):  # CreatePartitions
                topic.partitions.extend([None] * (len(assignment.replicas) - len(topic.partitions)))
            if topic.config.override_strings() != assignment.configs:  # AlterConfigs
                topic.config.replace(broker.config.topic_config(assignment.configs).overrides)
            for index, replicas in sorted(assignment.replicas.items()):
                if self.node_id not in replicas:
                    if index < len(topic.partitions) and topic.partitions[index] is not None:
                        self._drop_replica(topic, index)  # reassigned away from this broker
                    continue
                partition = topic.partitions[index]
                opened = partition is None
                if opened:
                    partition = broker.open_cluster_partition(topic, index)
                partition.replicas = replicas
                state = m.partition_state(name, index)
                if state is not None:
                    self._apply_state(partition, state)
                    if not partition.is_leader and partition.leader_id >= 0:
                        following[partition] = partition.leader_id
                if opened and time.perf_counter() > turn_ends:
                    await asyncio.sleep(0)
                    if self._sessions_lost != sessions_lost:
                        return
                    turn_ends = time.perf_counter() + OPEN_TURN_S
        for name in [n for n in broker.topics if n not in m.topics()]:
            broker.delete_topic(name)
        self._update_fetchers(following)

    def _drop_replica(self, topic, index: int) -> None:
        partition = topic.partitions[index]
        if partition.is_leader:
            self.broker.hot.notify("brokkr_became_follower", partition=partition, broker=self.broker)
        partition.leader_id = -1
        self.broker.purgatory.check(partition)
        topic.partitions[index] = None
        partition.log.delete()
        log.info("%s: replica removed from this broker", partition.name)

    async def reassign(self, name: str, index: int, target: tuple[int, ...] | None) -> None:
        """AlterPartitionReassignments for one partition (raises BrokkrError): start moving it
        to ``target`` (its new replicas join, catch up and enter the ISR; the controller then
        drops the leaving ones), or with None cancel the reassignment under way."""
        current = self.membership.topics().get(name)
        if current is None or index not in current.replicas:
            raise BrokkrError(f"Topic partition {name}-{index} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        original = current.original(index)
        adding, removing = dict(current.adding), dict(current.removing)
        if target is None:
            if index not in adding and index not in removing:
                raise BrokkrError(
                    f"No reassignment in progress for {name}-{index}.", ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
                )
            replicas = original
            adding.pop(index, None)
            removing.pop(index, None)
        else:
            live = set(self.membership.brokers())
            if not target or len(set(target)) != len(target) or not set(target) <= live:
                raise BrokkrError(
                    f"The replica assignment {list(target)} is empty, repeats a broker or names brokers that are not "
                    f"live ({sorted(live)})",
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            replicas = tuple(target) + tuple(r for r in original if r not in target)
            adding[index] = tuple(r for r in target if r not in original)
            removing[index] = tuple(r for r in original if r not in target)
            for moves in (adding, removing):
                if not moves[index]:
                    del moves[index]
        await self.membership.update_topic(
            attrs.evolve(current, replicas={**current.replicas, index: replicas}, adding=adding, removing=removing)
        )

    def _apply_state(self, partition: Partition, state: PartitionState) -> None:
        if state.leader_epoch < partition.leader_epoch and partition.state_version:
            return  # older than what this replica already follows
        was_leader, old_epoch = partition.is_leader, partition.leader_epoch
        partition.isr, partition.state_version = state.isr, state.version
        if state.leader == self.node_id:
            if not was_leader or state.leader_epoch != old_epoch:
                partition.leader_epoch = state.leader_epoch
                partition.leader_id = self.node_id
                if partition.capabilities.leader_epochs:  # it starts at the log end (LeaderEpochFileCache.assign)
                    partition.log.assign_epoch(state.leader_epoch)
                now = time.monotonic()
                partition.follower_end, partition.follower_start = {}, {}
                partition.follower_caught_up = {r: now for r in state.isr if r != self.node_id}
                log.info("%s: leader at epoch %d, ISR %s", partition.name, state.leader_epoch, list(state.isr))
                self.broker.hot.notify("brokkr_became_leader", partition=partition, broker=self.broker)
            self.broker.advance_high_watermark(partition, partition.high_watermark_candidate())
            return
        if was_leader or state.leader != partition.leader_id or state.leader_epoch != old_epoch:
            # What diverges from the new leader goes by its leader epochs (diverging_epoch):
            # a cluster's storage keeps them (Broker.open_storage refuses one without).
            partition.leader_id, partition.leader_epoch = state.leader, state.leader_epoch
            log.info("%s: follower of %d at epoch %d", partition.name, state.leader, state.leader_epoch)
            if was_leader:
                self.broker.hot.notify("brokkr_became_follower", partition=partition, broker=self.broker)
            self.broker.purgatory.check(partition)  # acks=-1 waits end: this node no longer leads

    def truncate(self, partition: Partition, offset: int) -> None:
        """Remove what lies at or past ``offset`` (and the leader epochs starting there)."""
        end = partition.log.log_end_offset
        partition.log.truncate_to(offset)
        if end > offset:
            log.info("%s: truncated from %d to %d", partition.name, end, offset)
            partition.rebuild_producer_state()
            partition.lower_high_watermark(offset)

    def _update_fetchers(self, following: dict[Partition, int]) -> None:
        wanted: dict[tuple[int, int], set[Partition]] = {}
        for partition, leader in following.items():
            key = (leader, hash((partition.topic.name, partition.index)) % self.num_fetchers)
            wanted.setdefault(key, set()).add(partition)
        for key in list(self.fetchers):
            if key not in wanted:
                self.fetchers.pop(key).stop()
        for key, partitions in wanted.items():
            fetcher = self.fetchers.get(key)
            if fetcher is None:
                fetcher = self.fetchers[key] = ReplicaFetcher(self, *key)
            fetcher.partitions = partitions

    # -- as follower ------------------------------------------------------------------

    # -- as leader --------------------------------------------------------------------

    def follower_fetched(self, partition: Partition, replica: int, fetch_offset: int, log_start: int = -1) -> None:
        """A follower fetched from ``fetch_offset``: it holds everything before it (from
        ``log_start``, its log start offset; -1: not said)."""
        partition.follower_end[replica] = fetch_offset
        partition.follower_start[replica] = log_start
        if fetch_offset >= partition.log.log_end_offset:
            partition.follower_caught_up[replica] = time.monotonic()
        if replica not in partition.isr and replica in partition.replicas and fetch_offset >= partition.high_watermark:
            self._change_isr(partition, partition.isr + (replica,), f"replica {replica} caught up")
        self.broker.advance_high_watermark(partition, partition.high_watermark_candidate())

    def preferred_read_replica(self, partition: Partition, client_rack: str, fetch_offset: int) -> int | None:
        """KIP-392 as this leader runs Kafka's RackAwareReplicaSelector for a consumer in
        ``client_rack`` fetching ``fetch_offset``: None (this leader serves it) unless a
        selector is set, the consumer names a rack and this broker is not in it; then the
        most caught-up in-sync follower in that rack that holds the offset (the largest log
        end, then the most recently caught up, then the largest id), or None if none does.
        Kafka's leader never names itself, and never a replica out of the ISR (it may lag)."""
        if self.selector is None or not client_rack or self.broker.config["broker.rack"] == client_rack:
            return None
        live = self.membership.brokers()
        now = time.monotonic()
        candidates = []
        for replica in partition.isr:
            info = live.get(replica)
            if replica == self.node_id or info is None or info.rack != client_rack:
                continue
            end = partition.follower_end.get(replica, -1)
            if end < fetch_offset or partition.follower_start.get(replica, -1) > fetch_offset:
                continue
            caught_up_ago = now - partition.follower_caught_up.get(replica, float("-inf"))
            candidates.append((end, -caught_up_ago, replica))
        return max(candidates)[2] if candidates else None

    async def _check_isr_loop(self) -> None:
        while True:
            await asyncio.sleep(max(self.lag_time_s / 2, 0.05))
            if self.membership.controller_id == self.node_id:
                self._dirty.set()  # the controller's periodic work (leader rebalance) runs on apply
            now = time.monotonic()
            for topic in list(self.broker.topics.values()):
                for partition in topic.partitions:
                    if partition is None or not partition.is_leader:
                        continue
                    lagging = [
                        r
                        for r in partition.isr
                        if r != self.node_id and now - partition.follower_caught_up.get(r, now) > self.lag_time_s
                    ]
                    if lagging:
                        isr = tuple(r for r in partition.isr if r not in lagging)
                        self._change_isr(partition, isr, f"replicas {lagging} out of sync")

    def _change_isr(self, partition: Partition, isr: tuple[int, ...], why: str) -> None:
        asyncio.ensure_future(self._write_isr(partition, isr, why))

    async def _write_isr(self, partition: Partition, isr: tuple[int, ...], why: str) -> None:
        state = PartitionState(
            self.node_id, partition.leader_epoch, isr, self.membership.controller_epoch, partition.state_version
        )
        written = await self.membership.write_partition_state(partition.topic.name, partition.index, state)
        if written is None or not partition.is_leader or partition.leader_epoch != state.leader_epoch:
            return  # the state moved on meanwhile; the next apply brings the current one
        log.info("%s: ISR %s -> %s (%s)", partition.name, list(partition.isr), list(isr), why)
        partition.isr, partition.state_version = isr, written.version
        if isr and len(isr) > 0:
            self.broker.advance_high_watermark(partition, partition.high_watermark_candidate())
        self.broker.purgatory.check(partition)

    # -- topics -----------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        configs: dict[str, str] | None = None,
        assignment: dict[int, tuple[int, ...]] | None = None,
    ) -> TopicAssignment:
        """Create a topic on the cluster (raises BrokkrError); its replicas open once the
        controller has written its partitions' states."""
        config = self.broker.config
        self.broker.check_new_topic_name(name)
        try:
            overrides = config.topic_config(configs or {}).override_strings()
        except ConfigError as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        if assignment is None:
            n = config["num.partitions"] if partitions is None else partitions
            rf = config["default.replication.factor"] if replication_factor is None else replication_factor
            assignment = self.assign_replicas(n, rf)
        created = TopicAssignment(name, uuid.uuid4(), assignment, overrides)
        await self.membership.create_topic(created)
        log.info("created topic %s (%s): replicas %s", name, created.topic_id, assignment)
        return created

    async def add_partitions(self, name: str, count: int, assignment: dict[int, tuple[int, ...]] | None) -> None:
        """CreatePartitions on the cluster (the count already checked): new partitions get
        the replicas given, or as many as the first partition has, placed as Kafka places them."""
        current = self.membership.topics()[name]
        if assignment is None:
            placed = self.assign_replicas(count, len(current.replicas[0]))
            assignment = {p: placed[p] for p in range(len(current.replicas), count)}
        await self.membership.update_topic(attrs.evolve(current, replicas={**current.replicas, **assignment}))
        log.info("topic %s now has %d partitions", name, count)

    async def alter_topic_config(self, name: str, overrides: dict[str, str], validate_only: bool) -> None:
        """AlterConfigs of a topic on the cluster: every broker applies the stored settings."""
        current = self.membership.topics().get(name)
        if current is None:
            raise BrokkrError(f"Topic {name} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            strings = self.broker.config.topic_config(overrides).override_strings()
        except ConfigError as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        if not validate_only:
            await self.membership.update_topic(attrs.evolve(current, configs=strings))

    def assign_replicas(self, partitions: int, replication_factor: int) -> dict[int, tuple[int, ...]]:
        """Replicas for a new topic's partitions, placed as Kafka places them (rack aware
        when brokers set ``broker.rack``), from a random start."""
        import random

        racks = {node: b.rack for node, b in self.membership.brokers().items()}
        n = len(racks)
        if replication_factor > n:
            raise BrokkrError(
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor of "
                f"{replication_factor} cannot be reached because only {n} broker(s) are registered.",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
        return place_replicas(racks, range(partitions), replication_factor, random.randrange(n), random.randrange(n))


@attrs.define(eq=False)
class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader (Kafka's
    ReplicaFetcherThread), ``num.replica.fetchers`` of them per leader."""

    manager: ReplicaManager
    leader: int
    fetcher_id: int
    partitions: set = attrs.field(factory=set)
    _task: asyncio.Task | None = None
    _client: BrokerClient | None = None
    _errors: dict = attrs.field(factory=dict)  # the last error each partition's fetch answered

    def __attrs_post_init__(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._client is not None:
            self._client.close()

    async def _run(self) -> None:
        config = self.manager.broker.config
        backoff = config["replica.fetch.backoff.ms"] / 1000
        failing = False
        while True:
            try:
                await self._fetch_once(config)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not failing:  # said once per spell of failures
                    log.warning(
                        "fetching from broker %d failed: %r",
                        self.leader,
                        exc,
                        exc_info=not isinstance(exc, (OSError, EOFError)),
                    )
                failing = True
                if self._client is not None:
                    self._client.close()
                    self._client = None
                await asyncio.sleep(backoff)

    async def _fetch_once(self, config) -> None:
        info = self.manager.membership.brokers().get(self.leader)
        if info is None or not self.partitions:
            await asyncio.sleep(config["replica.fetch.backoff.ms"] / 1000)
            return
        if self._client is None:
            host, port = info.endpoint(self.manager.broker.listeners[0].name)
            self._client = BrokerClient(host, port, f"broker-{self.manager.node_id}-fetcher-{self.fetcher_id}")
        spec = request_spec(FETCH)
        topic_cls, part_cls = spec.struct("FetchTopic"), spec.struct("FetchPartition")
        by_topic: dict[str, list] = {}
        wanted = {}
        for p in self.partitions:
            wanted[(p.topic.name, p.index)] = p
            by_topic.setdefault(p.topic.name, []).append(
                part_cls(
                    partition=p.index,
                    current_leader_epoch=p.leader_epoch,
                    fetch_offset=p.log.log_end_offset,
                    last_fetched_epoch=last_epoch(p),
                    log_start_offset=p.log.log_start_offset,
                    partition_max_bytes=config["replica.fetch.max.bytes"],
                )
            )
        body = spec.cls(
            replica_id=self.manager.node_id,
            max_wait_ms=config["replica.fetch.wait.max.ms"],
            min_bytes=config["replica.fetch.min.bytes"],
            max_bytes=config["replica.fetch.response.max.bytes"],
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[topic_cls(topic=name, partitions=parts) for name, parts in by_topic.items()],
        )
        timeout = config["replica.fetch.wait.max.ms"] / 1000 + config["replica.socket.timeout.ms"] / 1000
        response = await self._client.request(FETCH, FETCH_VERSION, body, timeout)
        if response.error_code:
            raise BrokkrError(f"fetch answered {ErrorCode(response.error_code).name}", response.error_code)
        flushes: list = []
        for t in response.responses:
            for pd in t.partitions:
                partition = wanted.get((t.topic, pd.partition_index))
                if partition is None or partition not in self.partitions or partition.is_leader:
                    continue
                diverging = pd.diverging_epoch
                if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
                    self._diverged(partition, diverging.epoch, diverging.end_offset)
                elif pd.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self._out_of_range(partition, pd)
                elif pd.error_code:
                    if self._errors.get(partition) != pd.error_code:  # said once per spell
                        log.info(
                            "%s: fetch from %d answered %s", partition.name, self.leader, ErrorCode(pd.error_code).name
                        )
                    self._errors[partition] = pd.error_code
                    continue
                else:
                    self._errors.pop(partition, None)
                    try:
                        flushes += append_replicated(
                            self.manager.broker, partition, pd.records or b"", pd.high_watermark
                        )
                    except OffsetOutOfRange:
                        self._out_of_range(partition, pd)
        for flushed in flushes:
            await asyncio.wrap_future(flushed)

    def _diverged(self, partition: Partition, epoch: int, end_offset: int) -> None:
        """The leader's log parts from ours after ``epoch`` at ``end_offset`` (KIP-320's
        diverging epoch): keep what both logs hold, the smaller of the two ends of that epoch."""
        if epoch < 0:
            target = partition.high_watermark
        else:
            _, own_end = epoch_end_offset(partition, epoch)
            target = min(end_offset, own_end) if own_end >= 0 else end_offset
        self.manager.truncate(partition, max(target, partition.log.log_start_offset))

    def _out_of_range(self, partition: Partition, pd) -> None:
        """The leader has not our fetch offset: ahead of its log end, truncate to its high
        watermark and fetch again."""
        if pd.log_start_offset > partition.log.log_end_offset:
            log.error(
                "%s: the leader's log starts at %d, past this replica's end %d; it cannot catch up",
                partition.name,
                pd.log_start_offset,
                partition.log.log_end_offset,
            )
            return
        self.manager.truncate(partition, max(pd.high_watermark, partition.log.log_start_offset))


def leader_epochs(partition: Partition) -> list[tuple[int, int]] | None:
    """The log's (epoch, start offset) entries, or None for a log that keeps no epochs
    (a storage without ``Capability.LEADER_EPOCHS``: a lone broker's)."""
    return partition.log.leader_epochs() if partition.capabilities.leader_epochs else None


def last_epoch(partition: Partition) -> int:
    """The epoch of the log's last batch, as a follower names it in its fetch (-1: unknown)."""
    epochs = leader_epochs(partition)
    return epochs[-1][0] if epochs else -1


def epoch_end_offset(partition: Partition, epoch: int) -> tuple[int, int]:
    """Kafka's LeaderEpochFileCache.endOffsetFor: the largest epoch at or below ``epoch``
    and the offset where it ends (the next epoch's start, or the log end); an epoch older
    than all ends where the first starts; (-1, -1) for a log without epochs."""
    epochs = leader_epochs(partition) or []
    if not epochs:
        return -1, -1
    if epoch < epochs[0][0]:  # older than any epoch kept: it ended where the log's first epoch starts
        return epoch, epochs[0][1]
    for (e, _), (next_epoch, next_start) in zip(epochs, epochs[1:]):
        if next_epoch > epoch:
            return e, next_start
    return epochs[-1][0], partition.log.log_end_offset


def diverging_epoch(partition: Partition, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
    """As the leader, whether a follower's log parts from ours: it last fetched in
    ``last_fetched_epoch`` and is at ``fetch_offset``. Returns (epoch, end offset) to
    truncate by when that epoch ended earlier here, or is unknown; else None."""
    epochs = leader_epochs(partition)
    if last_fetched_epoch < 0 or not epochs:
        return None
    if last_fetched_epoch > epochs[-1][0]:  # an epoch this leader never had: keep what our latest holds
        return epochs[-1][0], partition.log.log_end_offset
    epoch, end = epoch_end_offset(partition, last_fetched_epoch)
    if epoch != last_fetched_epoch or end < fetch_offset:
        return epoch, end
    return None
