"""The broker: configuration, plugins, topics and the server, in one object to embed.

Inside an asyncio program::

    async with Broker({"listeners": "PLAINTEXT://127.0.0.1:0"}) as broker:
        print(broker.bootstrap_servers)        # e.g. "127.0.0.1:40123"
        ...                                    # stopped and closed on exit

From synchronous code (tests, notebooks, other frameworks), in a thread of its own::

    with BrokerThread({"listeners": "PLAINTEXT://127.0.0.1:0"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .apis import Api, collect_apis
from .authorization import AclOperation, Action, AuthorizationResult, ResourceType, allows_everything
from .cluster import TopicAssignment
from .compression import collect_codecs
from .config import BROKER_CONFIGS, BrokerConfig, NotDynamic, format_value
from .context import RequestContext
from .delayed import Purgatory
from .errors import BrokkrError, ConfigError, ErrorCode
from .group_configs import GroupConfigs
from .internal_topics import InternalTopic, collect_internal_topics
from .listeners import configured_listeners
from .log import (
    OPEN_TURN_S,
    Capability,
    OffsetOutOfRange,
    Storage,
    StorageCapabilities,
    StoredTopic,
    check_capabilities,
)
from .offload import OffloadPool
from .partition import CLUSTER_METADATA_TOPIC, Partition, Topic, validate_topic_name
from .plugins import BUILT_IN, create_plugin_manager, describe_plugins, refuse_blocking_essentials
from .producer_ids import ProducerIdManager
from .record_checks import RefusalLog
from .replication import ReplicaManager
from .retention import retention_offset
from .server import Listener, Server
from .shared_documents import SharedDocuments
from .sinks import retention_limit

log = logging.getLogger("brokkr")
#: The storage document of the broker settings changed at run time.
DYNAMIC_CONFIGS = "dynamic-broker-configs"


def _plugin_setting(raw: Mapping[str, Any], name: str) -> list[str]:
    """A setting of which plugins load (``brokkr.plugins``, ``brokkr.plugins.disabled``), read
    before the plugins are: the other settings are read once the plugins have declared theirs."""
    definition = next(d for d in BROKER_CONFIGS if d.name == name)
    return definition.parse(raw.get(name, definition.default))


class Broker:
    """One Kafka broker. Construct, then ``await start()`` (or use ``async with``)."""

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        plugins: Iterable[object] = (),
        entry_points: bool = True,
    ):
        raw = {k: v for k, v in (config or {}).items()}
        disabled, named = (_plugin_setting(raw, name) for name in ("brokkr.plugins.disabled", "brokkr.plugins"))
        self.pm = create_plugin_manager(plugins, disabled, entry_points, named)
        self.hook = self.pm.hook
        #: The per-request hooks, resolved once (:class:`brokkr.core.plugins.HotHooks`).
        self.hot = self.pm.hot
        #: What observers raised, counted per hook and plugin (logged, never answered).
        self.observer_failures = self.hot.failures
        #: The batches Produce refused, logged a bounded number of times per partition.
        self.refusals = RefusalLog()
        defs = [d for result in self.hook.brokkr_config_definitions() for d in result]
        self.config = BrokerConfig(raw, defs)
        self.node_id: int = self.config["node.id"]
        if self.config["broker.id"] is not None:
            if "node.id" in self.config.explicit and self.node_id != self.config["broker.id"]:
                raise ConfigError(f"broker.id {self.config['broker.id']} and node.id {self.node_id} differ")
            self.node_id = self.config["broker.id"]
        self.cluster_id = str(uuid.uuid4()).replace("-", "")[:22]
        self.listeners: list[Listener] = configured_listeners(self.config)  # bad listener settings fail here
        refuse_blocking_essentials(disabled, self)  # the storage, membership, authorizer... these settings use
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        #: Topics whose logs are being opened: in the catalog already, not yet in ``topics``.
        self.creating_topics: dict[str, StoredTopic] = {}
        self.growing_topics: dict[str, asyncio.Event] = {}  # topics add_partitions is growing: set when done
        self.growing_to: dict[str, int] = {}  # their counts, as the catalog lists them (:meth:`_listed_first`)
        self.purgatory = Purgatory()
        self.codecs: dict[int, Any] = {}
        self.offload: OffloadPool | None = None  # record walks off the event loop (core/offload.py)
        self.apis: dict[int, Api] = collect_apis(self.hook, self)  # what this broker serves (brokkr_apis)
        self.internal_topics: dict[str, InternalTopic] = collect_internal_topics(self.hook, self)
        self.storage: Storage | None = None
        self.storage_capabilities: StorageCapabilities | None = None  # what it declared (open_storage)
        self.replicas: ReplicaManager | None = None  # on a cluster (core/replication.py)
        self.producer_ids: ProducerIdManager | None = None
        self.scram_store: Any = None  # the SCRAM credentials, read when first needed (core/scram.py)
        self.group_configs = GroupConfigs(self)  # groups' own settings (core/group_configs.py)
        self.shared_documents = SharedDocuments(self)  # ACLs, SCRAM, quotas: cluster-wide (core/shared_documents.py)
        #: URLs of other services this broker serves (name -> URL), set by plugins at
        #: brokkr_broker_starting and published in its cluster registration (BrokerInfo.services).
        self.services: dict[str, str] = {}
        self._server: Server | None = None
        self._stopped: asyncio.Event | None = None
        self._maintenance: asyncio.Task | None = None
        self.clean_shutdown = True  # False once a stop could not write everything it should have

    # -- lifecycle --------------------------------------------------------------------

    def open_storage(self) -> Storage:
        """Collect the codecs and open the storage (``start`` does this first); check what
        it declares it can do (``storage_capabilities``, see :mod:`brokkr.core.log`) once,
        refusing a configuration that needs a capability it lacks."""
        self.codecs = collect_codecs(self.hook, self)
        name = self.config["brokkr.storage"]
        storage = self.hook.brokkr_open_storage(broker=self)
        if storage is None:
            raise ConfigError(f"no storage plugin answers brokkr.storage={name!r}")
        try:
            capabilities = check_capabilities(storage, name)
            if self.config.get("zookeeper.connect"):
                capabilities.require(
                    Capability.LEADER_EPOCHS,
                    "a cluster (zookeeper.connect)",
                    "without leader epochs a follower would truncate its log to the high watermark at every "
                    "leader change; use a storage that keeps them (brokkr.storage=segment)",
                )
        except BaseException:
            storage.close()
            raise
        self.storage_capabilities = capabilities
        return storage

    async def start(self) -> None:
        self.storage = self.open_storage()
        self.offload = OffloadPool(self.codecs)
        try:
            self._load_dynamic_config()
            membership = self.hook.brokkr_cluster_membership(broker=self)
            if membership is None:  # alone: the storage's catalog is the list of topics
                for stored in self.storage.load_topics():
                    self._check_stored_name(stored.name)
                    self._open_topic(stored)
            self.producer_ids = ProducerIdManager(self.storage, self._first_unused_producer_id())
            self.hook.brokkr_broker_starting(broker=self)
            self._stopped = asyncio.Event()
            self._server = Server(self)
            self.listeners = self._server.bind(self.listeners)  # the ports taken, none listening yet
        except BaseException:  # e.g. a TLS setting that does not load: leave the logs closed cleanly
            self._close_storage()
            raise
        for topic in self.topics.values():  # alone (on a cluster, none is open yet): led from the start
            self._lead(topic.partitions)
        self._maintenance = asyncio.create_task(self._maintain(), name="brokkr-log-maintenance")
        if membership is not None:  # on a cluster, topics (and producer id blocks) come from the membership
            self.replicas = ReplicaManager(self, membership)
            self.producer_ids.reserve = membership.reserve_producer_ids
            try:
                await self.replicas.start()  # joins the cluster (e.g. ClusterUnreachable), registering the ports
            except BaseException:
                await self.stop()
                raise
        self._server.listen()  # clients get in only now, on a cluster once it is joined (as Kafka's brokers)
        self._log_start()
        log.info("brokkr node %s listening on %s (%s)", self.node_id, self.bootstrap_servers, self._data_location())
        try:
            self.hook.brokkr_broker_started(broker=self)
        except BaseException:  # a plugin that cannot run (a missing extra, a taken port): stop cleanly
            await self.stop()
            raise

    def _log_start(self) -> None:
        """One line per loaded plugin (name, version, where from): at INFO those that are not
        built in (entry points, ``brokkr.plugins``, passed to Broker), the built-in ones at
        DEBUG (``brokkr plugins`` lists them); then the settings given (sensitive ones
        masked), as Kafka logs its config at start."""
        for name, plugin, origin, where in describe_plugins(self.pm):
            if plugin is not None:  # else blocked (brokkr.plugins.disabled)
                log.log(
                    logging.DEBUG if origin == BUILT_IN else logging.INFO, "plugin %s (%s) from %s", name, origin, where
                )
        for name in sorted(self.config.explicit):
            log.info("setting %s=%s", name, self.config.shown(name, self.config.explicit[name]))

    def _data_location(self) -> str:
        """Where the logs are kept, for the start line: the log dirs of a durable storage."""
        storage = self.config["brokkr.storage"]
        if self.storage is not None and not self.storage.durable:
            return f"data in memory only: brokkr.storage={storage}"
        dirs = ", ".join(os.path.abspath(d) for d in self.config["log.dirs"])
        return f"data in {dirs}" if storage == "segment" else f"data in {dirs}, brokkr.storage={storage}"

    async def stop(self) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        assert self._stopped is not None and self._maintenance is not None
        try:  # whatever fails on the way (a full disk, a plugin), the broker ends stopped
            await server.stop_accepting()
            self.hot.notify("brokkr_broker_stopping", broker=self)  # an observer: its failure stops nothing
            if self.replicas is not None:
                await self.replicas.stop()
            self._maintenance.cancel()
            self.purgatory.expire_all()
            await server.close_connections()
            if self.offload is not None:
                self.offload.close()
            self.clean_shutdown = self._close_storage()
        finally:
            self._stopped.set()
        log.info("brokkr node %s stopped%s", self.node_id, "" if self.clean_shutdown else " (not cleanly)")

    def _close_storage(self) -> bool:
        """Close every log, then the storage; False when something could not be written
        (a full or failed disk): the storage is then left marked unclean, so the next start
        recovers the logs from what is on disk, and the broker still stops."""
        clean = True
        for topic in self.topics.values():
            for p in topic.local_partitions():
                try:
                    p.close()
                except OSError as exc:
                    log.error("closing %s failed: %s", p.name, exc)
                    clean = False
        assert self.storage is not None
        try:
            self.storage.close()
        except OSError as exc:
            log.error("closing the storage failed: %s; the next start recovers the logs", exc)
            clean = False
        return clean

    async def wait_stopped(self) -> None:
        assert self._stopped is not None
        await self._stopped.wait()

    async def __aenter__(self) -> Broker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{listener.host}:{listener.port}" for listener in self.listeners)

    @property
    def serving(self) -> bool:
        """Whether the broker is started and not yet stopping."""
        return self._server is not None

    def open_connections(self) -> dict[str, int]:
        """The open client connections per listener name (none before the start)."""
        quotas = self._server.quotas if self._server is not None else None
        return {lst.name: quotas.per_listener[lst.name] if quotas else 0 for lst in self.listeners}

    # -- topics -----------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        num_partitions: int | None = None,
        configs: Mapping[str, Any] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """Create a topic and open a log for each partition (raises BrokkrError), holding
        the event loop until it is done: see :meth:`create_topic_in_turns` for requests."""
        stored = self._new_topic(name, num_partitions, configs, topic_id)
        topic = self._topic_of(stored)
        with self._listed_first(stored), self._deleted_on_failure(stored, topic.partitions):
            for _ in self._open_partitions(stored, topic, topic.partitions):
                pass
        return self._created(topic)

    async def create_topic_in_turns(
        self, name: str, num_partitions: int | None = None, configs: Mapping[str, Any] | None = None
    ) -> Topic:
        """:meth:`create_topic` for a request's handler: the partitions' logs are opened a
        few at a time, other work running between them, so that each turn holds the event
        loop at most about ``OPEN_TURN_S`` (a partition's directory and files take 0.3 ms
        on tmpfs, 0.6 ms and more on ext4: a thousand at once held every connection for
        a second). The topic is known (to Metadata, Produce, DeleteTopics) once all are
        open; meanwhile its name is taken (:meth:`check_new_topic_name`) and
        :attr:`creating_topics` holds it. It is in the catalog before its first log is
        created (:meth:`_listed_first`). Should the creation fail or be cancelled (the
        broker stopping), the logs opened so far are deleted."""
        stored = self._new_topic(name, num_partitions, configs, None)
        topic = self._topic_of(stored)
        with self._listed_first(stored):
            await self._open_in_turns(stored, topic, topic.partitions)
        return self._created(topic)

    @contextlib.contextmanager
    def _listed_first(self, stored: StoredTopic, growth: bool = False) -> Iterator[None]:
        """Record a new topic (in :attr:`creating_topics`) or, with ``growth``, a topic's
        new partition count (in :attr:`growing_to`) in the catalog, then open the new logs
        in the ``with`` block, as Kafka's controller records new partitions in the metadata
        before the brokers create them: a topic exists with its settings and partitions or
        not at all, across restarts too. A crash or a full disk after the catalog is
        written leaves a listed topic, whose missing logs the next start creates (never
        unlisted directories, which the next start would adopt as a foreign topic, with a
        foreign topic's settings, or, beyond a listed topic's count, leave unopened).
        Should the block fail, the catalog is as it was again; if even that cannot be
        written, the next start completes the creation or growth. A disk error raises
        BrokkrError (KAFKA_STORAGE_ERROR)."""
        name = stored.name
        listing: dict[str, Any] = self.growing_to if growth else self.creating_topics
        listing[name] = stored.partitions if growth else stored
        what = f"partitions of topic {name}" if growth else f"topic {name}"
        try:
            self._save_catalog()
        except OSError as exc:
            del listing[name]
            raise BrokkrError(f"Error recording {what}: {exc}", ErrorCode.KAFKA_STORAGE_ERROR) from None
        try:
            yield
        except BaseException as exc:
            del listing[name]
            try:
                self._save_catalog()
            except OSError as err:
                log.warning("the new %s stay in the catalog (%s): the next start creates their logs", what, err)
            if isinstance(exc, OSError):
                raise BrokkrError(f"Error creating {what}: {exc}", ErrorCode.KAFKA_STORAGE_ERROR) from None
            raise
        del listing[name]

    def _new_topic(
        self, name: str, num_partitions: int | None, configs: Mapping[str, Any] | None, topic_id: uuid.UUID | None
    ) -> StoredTopic:
        self.check_new_topic_name(name)
        try:
            overrides = self.config.topic_config(configs).override_strings()
        except ConfigError as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        n = self.config["num.partitions"] if num_partitions is None else num_partitions
        if n < 1:
            raise BrokkrError("Number of partitions must be larger than 0.", ErrorCode.INVALID_PARTITIONS)
        return StoredTopic(name, topic_id or uuid.uuid4(), n, overrides)

    def _created(self, topic: Topic) -> Topic:
        """Make a created topic known (it is in the catalog already: :meth:`_listed_first`)."""
        self._register(topic)
        log.info("created topic %s (%s) with %d partition(s)", topic.name, topic.topic_id, len(topic.partitions))
        self._lead(topic.partitions)
        return topic

    def _lead(self, partitions: Iterable[Partition]) -> None:
        """Alone, this broker leads every partition it opens: ``brokkr_became_leader`` for
        each, as a cluster's replica manager calls it when the controller says so, so that
        plugins (the coordinators) take partitions over one way in both modes."""
        became_leader = self.hot.brokkr_became_leader
        if became_leader is not None:
            for partition in partitions:
                became_leader(partition=partition, broker=self)

    def alter_topic_config(self, name: str, overrides: Mapping[str, Any], validate_only: bool = False) -> None:
        """Make ``overrides`` (Kafka's strings) the topic's own settings, at once and for good
        (the catalog is saved). Raises BrokkrError: UNKNOWN_TOPIC_OR_PARTITION, INVALID_CONFIG."""
        topic = self.topics.get(name)
        if topic is None:
            raise BrokkrError(f"Topic {name} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            typed = self.config.topic_config(overrides).overrides
        except ConfigError as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        if validate_only:
            return
        topic.config.replace(typed)
        self._save_catalog()
        log.info("altered the settings of topic %s: %s", name, topic.config.override_strings())

    def alter_broker_config(self, scope: str, settings: Mapping[str, str], validate_only: bool = False) -> None:
        """Make ``settings`` the dynamic broker settings of ``scope`` ("" cluster-wide, "node"
        this broker's), at once for every topic that has no value of its own, and for good
        (the storage document ``dynamic-broker-configs``). Raises BrokkrError: INVALID_REQUEST
        for a setting that is not dynamic, INVALID_CONFIG for a bad value."""
        try:
            self.config.set_dynamic(scope, settings, validate_only)
        except NotDynamic as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_REQUEST) from None
        except ConfigError as exc:
            raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
        if validate_only:
            return
        for topic in self.topics.values():
            topic.config.replace(topic.config.overrides)  # the broker defaults behind it moved
        assert self.storage is not None
        stored = {s: {k: format_value(v) for k, v in values.items()} for s, values in self.config.dynamic.items()}
        self.storage.write_state(DYNAMIC_CONFIGS, json.dumps(stored))
        log.info("dynamic broker settings (%s): %s", scope or "cluster default", stored[scope])

    def _load_dynamic_config(self) -> None:
        assert self.storage is not None
        text = self.storage.read_state(DYNAMIC_CONFIGS)
        if not text:
            return
        try:
            for scope, values in json.loads(text).items():
                self.config.set_dynamic(scope, values)
        except (ValueError, AttributeError, ConfigError) as exc:
            raise ConfigError(f"the stored dynamic broker settings ({DYNAMIC_CONFIGS}) cannot be used: {exc}") from None

    def check_partition_count(self, name: str, count: int) -> Topic:
        """CreatePartitions' checks of growing topic ``name`` to ``count`` partitions
        (raises BrokkrError, as Kafka words them); the topic, when it may grow."""
        topic = self.topics.get(name)
        if topic is None:
            raise BrokkrError(f"The topic '{name}' does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        current = len(topic.partitions)
        if count < current:
            raise BrokkrError(
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
                ErrorCode.INVALID_PARTITIONS,
            )
        if count == current:
            raise BrokkrError(f"Topic already has {current} partitions.", ErrorCode.INVALID_PARTITIONS)
        return topic

    async def add_partitions(self, name: str, count: int) -> None:
        """Grow topic ``name`` to ``count`` partitions (raises BrokkrError, see
        :meth:`check_partition_count`). The new logs are opened a turn at a time, as
        :meth:`create_topic_in_turns` opens a topic's, and join the topic together once
        all are open: until then Metadata, Produce and Fetch see the old count. Growths
        and deletions of one topic happen one after the other, as Kafka's controller
        orders them: this waits for an earlier growth (and then checks the count against
        its outcome), and DeleteTopics waits for this one (:meth:`growth_done`). The
        catalog lists the new count before the first new log is created
        (:meth:`_listed_first`): a crash meanwhile leaves the topic grown, its missing logs
        created at the next start. A growth that fails or is cancelled deletes the logs it
        opened and lists the old count again."""
        await self.growth_done(name)
        topic = self.check_partition_count(name, count)
        stored = StoredTopic(name, topic.topic_id, count, topic.config.override_strings())
        opened: list[Partition] = []
        self.growing_topics[name] = done = asyncio.Event()
        try:
            with self._listed_first(stored, growth=True):
                await self._open_in_turns(stored, topic, opened, first=len(topic.partitions))
                topic.partitions.extend(opened)
                self._lead(opened)
        finally:
            del self.growing_topics[name]
            done.set()
        log.info("topic %s now has %d partitions", name, count)

    async def growth_done(self, name: str) -> None:
        """Return once no :meth:`add_partitions` is growing topic ``name``."""
        while (growing := self.growing_topics.get(name)) is not None:
            await growing.wait()

    async def _open_in_turns(self, stored: StoredTopic, topic: Topic, into: list, first: int = 0) -> None:
        """Open the stored topic's partitions from ``first`` on into ``into``, letting the
        loop run other work between turns; on failure or cancellation, delete them again."""
        with self._deleted_on_failure(stored, into):
            for _ in self._open_partitions(stored, topic, into, first):
                await asyncio.sleep(0)

    @contextlib.contextmanager
    def _deleted_on_failure(self, stored: StoredTopic, opened: list[Partition]) -> Iterator[None]:
        """Should the ``with`` block fail, delete the logs it opened into ``opened``."""
        try:
            yield
        except BaseException:
            for partition in opened:
                try:
                    partition.log.delete()
                except OSError as exc:  # the opening's own failure is the one to raise
                    log.warning("could not delete %s-%d after a failure: %s", stored.name, partition.index, exc)
            raise

    def _open_topic(self, stored: StoredTopic) -> Topic:
        topic = self._topic_of(stored)
        for _ in self._open_partitions(stored, topic, topic.partitions):
            pass
        self._register(topic)
        return topic

    def _topic_of(self, stored: StoredTopic) -> Topic:
        return Topic(stored.name, stored.topic_id, self.config.topic_config(stored.configs))

    def _open_partitions(self, stored: StoredTopic, topic: Topic, into: list, first: int = 0) -> Iterator[None]:
        """Open the stored topic's partitions from ``first`` on into ``into``, yielding
        whenever one turn (``OPEN_TURN_S``) is used up."""
        assert self.storage is not None, "the broker is not started"
        turn_ends = time.perf_counter() + OPEN_TURN_S
        for index in range(first, stored.partitions):
            plog = self.storage.open_log(stored, index, topic.config)
            into.append(Partition(topic, index, plog, self.node_id, capabilities=self.storage_capabilities))
            if time.perf_counter() > turn_ends and index + 1 < stored.partitions:
                yield
                turn_ends = time.perf_counter() + OPEN_TURN_S

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic

    def open_cluster_topic(self, assignment: TopicAssignment) -> Topic:
        """A topic of the cluster, with no local replica yet (see :meth:`open_cluster_partition`)."""
        topic = Topic(assignment.name, assignment.topic_id, self.config.topic_config(assignment.configs))
        topic.partitions = [None] * len(assignment.replicas)
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic
        self._save_catalog()
        return topic

    def open_cluster_partition(self, topic: Topic, index: int) -> Partition:
        """Open this broker's replica of a cluster topic's partition; it leads nothing
        until the cluster's state says so."""
        assert self.storage is not None
        stored = StoredTopic(topic.name, topic.topic_id, len(topic.partitions), topic.config.override_strings())
        plog = self.storage.open_log(stored, index, topic.config)
        capabilities = self.storage_capabilities
        kept = plog.high_watermark if capabilities.kept_high_watermark else None  # replication-offset-checkpoint
        partition = Partition(topic, index, plog, self.node_id, capabilities=capabilities)
        # Committed is what that checkpoint says, or nothing, until the leader says more
        # (or, as leader, the ISR's fetches do).
        start, end = plog.log_start_offset, plog.log_end_offset
        partition.leader_id = -1
        partition.lower_high_watermark(start if kept is None else max(start, min(kept, end)))
        topic.partitions[index] = partition
        return partition

    def _first_unused_producer_id(self) -> int:
        """One past the largest producer id any partition holds state for: a floor for new
        ids, so that ids written before the producer id block was (e.g. by the Kafka broker
        whose partition directories were adopted) are never handed out again."""
        held = (pid for t in self.topics.values() for p in t.local_partitions() for pid in p.producers.producers)
        return max(held, default=-1) + 1

    def _save_catalog(self) -> None:
        """Write the catalog: the topics (those growing with their new count), and those
        being created (:meth:`_listed_first`)."""
        assert self.storage is not None
        topics = [
            StoredTopic(t.name, t.topic_id, self.growing_to.get(t.name, len(t.partitions)), t.config.override_strings())
            for t in self.topics.values()
        ]
        self.storage.save_topics([*topics, *self.creating_topics.values()])

    @staticmethod
    def _check_stored_name(name: str) -> None:
        """Refuse to start on a stored topic whose name Kafka would refuse (one created by
        an older brokkr, or written below the API): its entries would make every
        checkpoint of its log directory unwritable, so recovery points and log start
        offsets would silently stop being kept. Kafka, likewise, takes a log directory
        offline when a directory in it is not named ``<topic>-<partition>``."""
        try:
            validate_topic_name(name)
        except BrokkrError as exc:
            raise BrokkrError(
                f"the storage lists topic {name!r}, a name Kafka refuses ({exc}); "
                "remove it from the storage's catalog (brokkr-topics.json in segment storage) to start",
                exc.code,
            ) from None

    def check_new_topic_name(self, name: str) -> None:
        """Raise BrokkrError unless ``name`` is legal and free (Kafka also refuses names that
        differ from an existing one only by '.' versus '_', since metric names collide)."""
        validate_topic_name(name)
        if name == CLUSTER_METADATA_TOPIC:  # as Kafka's ControllerApis refuses it
            raise BrokkrError(f"Creation of internal topic {name} is prohibited.", ErrorCode.INVALID_REQUEST)
        if name in self.topics or name in self.creating_topics:
            raise BrokkrError(f"Topic '{name}' already exists.", ErrorCode.TOPIC_ALREADY_EXISTS)
        collides = [t for t in (*self.topics, *self.creating_topics) if t.replace(".", "_") == name.replace(".", "_")]
        if collides:
            raise BrokkrError(
                f"Topic '{name}' collides with existing topic: {collides[0]}", ErrorCode.INVALID_TOPIC_EXCEPTION
            )

    def delete_topic(self, name: str) -> None:
        """Forget the topic and delete its logs. A fetch or an acks=-1 produce waiting on
        one of its partitions is answered at once, that partition with UNKNOWN_TOPIC_ID (or
        UNKNOWN_TOPIC_OR_PARTITION), as Kafka completes a DelayedFetch or DelayedProduce
        whose partition went."""
        topic = self.topics.pop(name)
        del self.topics_by_id[topic.topic_id]
        for p in topic.local_partitions():
            p.delete()
            self.purgatory.check(p)
        self._save_catalog()
        log.info("deleted topic %s", name)
        self.hot.notify("brokkr_topic_deleted", topic=topic, broker=self)

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    # -- the pipeline's shared steps ----------------------------------------------------

    def authorize(self, ctx: RequestContext, actions: list[Action]) -> list[bool]:
        """One ``brokkr_authorize`` call for all of a request's actions, its plugins'
        answers composed: DENIED from any wins, else ALLOWED from any, else denied."""
        if not actions:
            return []
        authorize = self.hot.brokkr_authorize
        if allows_everything(self, authorize):
            return [True] * len(actions)
        answers = authorize(context=ctx, actions=actions, broker=self) if authorize is not None else []
        if len(answers) == 1 and len(answers[0]) == len(actions):  # the common case: one authorizer
            return [r is AuthorizationResult.ALLOWED for r in answers[0]]
        decided: list[AuthorizationResult | None] = [None] * len(actions)
        for answer in answers:
            if len(answer) != len(actions):
                raise RuntimeError("brokkr_authorize must return one result (or None) per action")
            for i, result in enumerate(answer):
                if result is AuthorizationResult.DENIED or (result is not None and decided[i] is None):
                    decided[i] = result
        return [d is AuthorizationResult.ALLOWED for d in decided]

    def authorize_topics(self, ctx: RequestContext, operation: AclOperation, names) -> dict[str, bool]:
        """Whether ``operation`` is allowed on each topic named (one hook call for all)."""
        if allows_everything(self, self.hot.brokkr_authorize):
            return dict.fromkeys(names, True)
        unique = sorted(set(names))
        actions = [Action(operation, ResourceType.TOPIC, name) for name in unique]
        return dict(zip(unique, self.authorize(ctx, actions)))

    def throttle_ms(self, ctx: RequestContext, usage: Mapping[str, float]) -> int:
        """One ``brokkr_quota_throttle_ms`` call for all of a request's usage: the largest
        throttle time its plugins answer (0 without quota plugins)."""
        quota = self.hot.brokkr_quota_throttle_ms
        if quota is None:
            return 0
        answers = quota(context=ctx, usage=usage, broker=self)
        return max((int(r) for r in answers if r), default=0) if answers else 0

    def advance_high_watermark(self, partition: Partition, new: int) -> bool:
        """Move the high watermark up to ``new``; whether it moved."""
        old = partition.high_watermark
        if new <= old:
            return False
        partition.high_watermark = new
        partition.tell_log()  # for the log's replication-offset-checkpoint and its cleaner
        if self.hot.brokkr_high_watermark_advanced is not None:
            self.hot.brokkr_high_watermark_advanced(partition=partition, old=old, new=new, broker=self)
        self.purgatory.check(partition)
        return True

    def delete_records(self, partition: Partition, offset: int) -> int:
        """DeleteRecords: advance the log start offset to ``offset`` (-1: the high
        watermark); return the new low watermark. Offsets past the high watermark raise
        OffsetOutOfRange, as in Kafka."""
        if offset == -1:
            offset = partition.high_watermark
        if not 0 <= offset <= partition.high_watermark:
            raise OffsetOutOfRange(
                f"Cannot increment the log start offset to {offset} of partition {partition.name} "
                f"since it is larger than the high watermark {partition.high_watermark}"
            )
        partition.log.delete_before(offset)
        return partition.log.log_start_offset

    def apply_retention(self, now_ms: int | None = None) -> None:
        """Drop the segments that retention.ms, retention.bytes or the log start offset
        make deletable, in every partition (see :mod:`brokkr.core.retention`), keeping every
        segment a sink has not mirrored yet (``brokkr_sink_mirrored_offset``)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for topic in list(self.topics.values()):
            for p in topic.local_partitions():
                segments = p.log.segments()
                offset = retention_offset(segments, p.config, now_ms, p.high_watermark, p.log.log_start_offset)
                if offset is not None:  # never past what a sink has not mirrored yet
                    held = self.hook.brokkr_sink_mirrored_offset(partition=p, broker=self)
                    offset = retention_limit(offset, held, segments)
                if offset is not None:
                    log.info("retention: %s starts at offset %d", p.name, offset)
                    if offset == p.log.log_end_offset:  # every segment goes: Kafka's roll snapshots the producers
                        p.take_producer_snapshot()
                    p.log.delete_before(offset)

    async def _maintain(self) -> None:
        """Kafka's scheduler, for the log: retention, checkpoints and log cleaning at their intervals."""
        assert self.storage is not None
        intervals = {
            self.apply_retention: self.config["log.retention.check.interval.ms"] / 1000,
            self.storage.checkpoint: self.config["log.flush.offset.checkpoint.interval.ms"] / 1000,
        }
        if self.storage_capabilities.compaction:  # a storage that compacts (Capability.COMPACTION)
            intervals[self.storage.clean_logs] = max(self.config["log.cleaner.backoff.ms"], 1) / 1000
        loop = asyncio.get_running_loop()
        due = {task: loop.time() + every for task, every in intervals.items()}
        failing: set = set()
        while True:
            await asyncio.sleep(max(min(due.values()) - loop.time(), 0))
            for task, when in due.items():
                if when <= loop.time():
                    due[task] = loop.time() + intervals[task]
                    try:
                        done = task()
                        if isinstance(done, concurrent.futures.Future):  # disk work on the storage's thread
                            await asyncio.wrap_future(done)
                    except OSError as exc:  # a full or failing disk: said once, until the task succeeds again
                        if task not in failing:
                            log.error("log maintenance (%s) failed: %s", task.__name__, exc)
                        failing.add(task)
                    except Exception:
                        log.exception("log maintenance (%s) failed", task.__name__)
                    else:
                        if task in failing:
                            failing.discard(task)
                            log.warning("log maintenance (%s) succeeds again", task.__name__)

    # -- running ------------------------------------------------------------------------

    async def serve_forever(self) -> None:
        """Start, then run until SIGTERM or SIGINT (or :meth:`stop`), then shut down."""
        import signal

        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
            except (NotImplementedError, RuntimeError):  # not the main thread
                pass
        await self.wait_stopped()


class BrokerThread:
    """A broker running on an event loop in a background thread.

    ``start()`` returns once the broker listens; ``stop()`` shuts it down and joins.
    Also a context manager. ``loop_factory`` makes the event loop (asyncio's by default;
    ``uvloop.new_event_loop``, as ``brokkr serve`` uses where uvloop is installed).
    """

    def __init__(
        self,
        config: Mapping[str, Any] | None = None,
        plugins: Iterable[object] = (),
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
        **kwargs: Any,
    ):
        self._args = (config, tuple(plugins), kwargs)
        self._loop_factory = loop_factory
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    def start(self) -> BrokerThread:
        self._thread = threading.Thread(target=self._run, name="brokkr-broker", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            config, plugins, kwargs = self._args
            try:
                self.broker = Broker(config, plugins, **kwargs)
                self._loop = asyncio.get_running_loop()
                await self.broker.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            await self.broker.wait_stopped()

        with asyncio.Runner(loop_factory=self._loop_factory) as runner:
            runner.run(main())

    def call(self, fn, *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's loop and return its result (awaiting coroutines)."""
        assert self._loop is not None

        async def run() -> Any:
            result = fn(*args)
            if asyncio.iscoroutine(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=60)

    def stop(self) -> None:
        if self._loop is not None and self.broker is not None and self._thread and self._thread.is_alive():
            self.call(self.broker.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def bootstrap_servers(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap_servers

    def __getattr__(self, name: str) -> Any:
        broker = self.__dict__.get("broker")
        if broker is None:
            raise AttributeError(name)
        return getattr(broker, name)

    def __enter__(self) -> BrokerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
