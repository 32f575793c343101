"""Cluster membership on ZooKeeper (kazoo), in Kafka's own znode layout, so the tools
that read a Kafka cluster's ZooKeeper read a brokkr cluster's too:

- ``/brokers/ids/<id>`` (ephemeral): a broker's endpoints and rack;
- ``/controller`` (ephemeral) ``{"version":1,"brokerid":N,...}`` and ``/controller_epoch``;
- ``/brokers/topics/<topic>``: ``{"version":3,"topic_id":...,"partitions":{"0":[1,2]}}``;
- ``/brokers/topics/<topic>/partitions/<p>/state``:
  ``{"controller_epoch":E,"leader":L,"version":1,"leader_epoch":N,"isr":[...]}``,
  written only with the znode version read (conditional writes);
- ``/config/topics/<topic>``: the topic's settings; ``/cluster/id``.
- ``/config/groups/<group>``: a group's own settings (brokkr's; ``{"version": 1, "config": {...}}``
  as a topic's).
- ``/brokkr/documents/<name>``: a document every broker shares (brokkr's: ``acls``,
  ``scram-credentials``, ``client-quotas``, :mod:`brokkr.core.shared_documents`), the znode's
  data its UTF-8 text, at most :data:`MAX_DOCUMENT_BYTES`. Written with a plain set: each
  store applies its change to the document it last read, and a broker's writes run in
  order on its one worker thread; two brokers changing one document at the same instant
  (within a notification's delay) can lose one change, as a conditional write would only
  turn into an error the client does not retry.

kazoo's calls block and its watches fire on its own threads: every call here runs in one
worker thread (so they are ordered), and a fired watch schedules a refresh of the cache
on that thread, after which the broker's listener is called on its event loop.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import concurrent.futures
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from typing import Any

from brokkr.core.cluster import BrokerInfo, ClusterListener, ClusterUnreachable, PartitionState, TopicAssignment
from brokkr.core.config import ConfigDef, ConfigType, at_least
from brokkr.core.errors import BrokkrError, ConfigError, ErrorCode
from brokkr.core.plugins import hookimpl

log = logging.getLogger("brokkr.cluster")

DOCUMENTS = "/brokkr/documents"
#: The largest shared document: ZooKeeper refuses a request over ``jute.maxbuffer`` (by
#: default 0xfffff bytes, path and headers included) and drops the connection.
MAX_DOCUMENT_BYTES = 1_000_000

#: The ZooKeeper client's settings; ``zookeeper.connect`` itself is core's (core/config.py).
CONFIGS = [
    ConfigDef(
        "zookeeper.session.timeout.ms",
        ConfigType.INT,
        18000,
        "The ZooKeeper session timeout: a broker silent this long leaves the cluster.",
        validator=at_least(1),
    ),
    ConfigDef(
        "zookeeper.connection.timeout.ms",
        ConfigType.INT,
        None,
        "How long the broker waits for its first connection to ZooKeeper before it gives up and stops "
        "(default: zookeeper.session.timeout.ms, as in Kafka).",
        validator=at_least(1),
    ),
    ConfigDef(
        "zookeeper.max.in.flight.requests",
        ConfigType.INT,
        10,
        "How many writes of partition states the controller sends ZooKeeper before it waits for "
        "their answers (a topic's creation, a broker's failure).",
        validator=at_least(1),
    ),
]


@hookimpl
def brokkr_config_definitions():
    return CONFIGS


@hookimpl
def brokkr_cluster_membership(broker):
    connect = broker.config["zookeeper.connect"]
    if connect is None:
        return None
    try:
        import kazoo  # noqa: F401
    except ImportError:
        raise ConfigError("zookeeper.connect needs kazoo: pip install 'brokkr[cluster]'") from None
    try:
        return ZooKeeperMembership(connect, broker.config)
    except ValueError as exc:  # kazoo's reading of the hosts: a bad port, an empty host
        raise ConfigError(f"invalid value {connect!r} for configuration zookeeper.connect: {exc}") from None


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


class _FirstConnectionLog(logging.LoggerAdapter):
    """kazoo's log (``kazoo.client``), except that until the first connection is made its
    report of each attempt goes to DEBUG and the first failure is kept: an unreachable
    ZooKeeper is then told once, by the error that names ``zookeeper.connect``, rather than
    by a warning per retry for ``zookeeper.connection.timeout.ms``."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.connecting = True
        self.first_failure: str | None = None

    def log(self, level, msg, *args, **kwargs) -> None:
        if self.connecting and logging.INFO <= level < logging.ERROR:
            if level >= logging.WARNING and self.first_failure is None:
                self.first_failure = str(msg) % args if args else str(msg)
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)


class ZooKeeperMembership:
    def __init__(self, connect: str, config):
        from kazoo.client import KazooClient

        self.connect = connect
        self.session_timeout_s: float = config["zookeeper.session.timeout.ms"] / 1000
        self.connect_timeout_ms: int = (
            config["zookeeper.connection.timeout.ms"] or config["zookeeper.session.timeout.ms"]
        )
        self._kazoo_log = _FirstConnectionLog()
        self.zk = KazooClient(hosts=connect, timeout=self.session_timeout_s, logger=self._kazoo_log)
        self.max_in_flight: int = config["zookeeper.max.in.flight.requests"]
        self.controller_id: int | None = None
        self.controller_epoch = 0
        self.cluster_id = ""
        self._brokers: dict[int, BrokerInfo] = {}
        self._topics: dict[str, TopicAssignment] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        self._documents: dict[str, str] = {}
        self._me: BrokerInfo | None = None
        self._listener: ClusterListener | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="brokkr-zookeeper")
        self._refresh_pending = False
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._closing = False
        self._expired = False  # the session expired; register again once connected

    # -- the interface ------------------------------------------------------------

    async def join(self, me: BrokerInfo, listener: ClusterListener) -> None:
        self._me, self._listener, self._loop = me, listener, asyncio.get_running_loop()
        await self._call(self._join)

    async def deregister(self) -> None:
        assert self._me is not None
        await self._call(self.zk.delete, f"/brokers/ids/{self._me.node_id}")

    async def leave(self) -> None:
        self._closing = True
        await self._call(self._leave)
        self._worker.shutdown(wait=False)

    def brokers(self) -> dict[int, BrokerInfo]:
        return self._brokers

    def topics(self) -> dict[str, TopicAssignment]:
        return self._topics

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    async def create_topic(self, assignment: TopicAssignment) -> None:
        await self._call(self._create_topic, assignment)

    async def update_topic(self, assignment: TopicAssignment) -> None:
        await self._call(self._update_topic, assignment)

    async def delete_topic(self, name: str) -> None:
        await self._call(self._delete_topic, name)

    async def write_partition_state(self, topic: str, partition: int, state: PartitionState) -> PartitionState | None:
        return (await self._call(self._write_states, [(topic, partition, state)]))[0]

    async def write_partition_states(
        self, writes: Sequence[tuple[str, int, PartitionState]]
    ) -> list[PartitionState | None]:
        return await self._call(self._write_states, list(writes))

    async def reserve_producer_ids(self, count: int, floor: int) -> int:
        return await self._call(self._reserve_producer_ids, count, floor)

    def group_configs(self) -> dict[str, dict[str, str]]:
        return self._group_configs

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self._call(self._set_group_configs, group_id, dict(configs))

    def documents(self) -> dict[str, str]:
        return self._documents

    async def set_document(self, name: str, text: str) -> None:
        data = text.encode()
        if len(data) > MAX_DOCUMENT_BYTES:
            raise BrokkrError(
                f"the cluster's {name} document would be {len(data)} bytes, more than the {MAX_DOCUMENT_BYTES} "
                "bytes ZooKeeper keeps in one znode (jute.maxbuffer); nothing was changed",
                ErrorCode.POLICY_VIOLATION,
            )
        await self._call(self._set_document, name, text, data)

    # -- on the worker thread -------------------------------------------------------

    async def _call(self, fn, *args) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn, *args)

    def _join(self) -> None:
        from kazoo.exceptions import NodeExistsError

        self.zk.add_listener(self._state_changed)
        self._connect()
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", "/config/groups", DOCUMENTS, "/cluster"):
            self.zk.ensure_path(path)
        try:
            self.zk.create("/cluster/id", json.dumps({"version": "1", "id": _new_cluster_id()}).encode())
        except NodeExistsError:
            pass
        self.cluster_id = json.loads(self.zk.get("/cluster/id")[0])["id"]
        self._register()
        self._refresh("*")

    def _connect(self) -> None:
        """The first connection, within ``zookeeper.connection.timeout.ms`` (else
        ClusterUnreachable, kazoo stopped)."""
        try:
            self.zk.start(timeout=self.connect_timeout_ms / 1000)
        except self.zk.handler.timeout_exception:
            failure = self._kazoo_log.first_failure
            raise ClusterUnreachable(
                f"could not connect to ZooKeeper at zookeeper.connect={self.connect} within "
                f"{self.connect_timeout_ms} ms (zookeeper.connection.timeout.ms)" + (f": {failure}" if failure else "")
            ) from None
        finally:
            self._kazoo_log.connecting = False
        log.info("connected to ZooKeeper at %s", self.connect)

    def _register(self) -> None:
        """Create this broker's ephemeral /brokers/ids/<id> (at join, and again in a new
        session after the old one expired, as Kafka's brokers re-register)."""
        from kazoo.exceptions import NodeExistsError

        me = self._me
        assert me is not None
        registration = {
            "version": 5,
            "host": me.host,
            "port": me.port,
            "endpoints": [f"{name}://{host}:{port}" for name, host, port in me.endpoints],
            "listener_security_protocol_map": {name: name for name, _, _ in me.endpoints},
            "rack": me.rack,
            "jmx_port": -1,
            "features": {},
            "timestamp": str(int(time.time() * 1000)),
        }
        if me.services:  # brokkr's own field (Kafka's readers ignore fields they do not know)
            registration["brokkr_services"] = dict(me.services)
        try:
            self.zk.create(f"/brokers/ids/{me.node_id}", json.dumps(registration).encode(), ephemeral=True)
        except NodeExistsError:
            raise ConfigError(f"broker.id {me.node_id} is registered by another live broker") from None

    def _leave(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception as exc:  # stopping anyway
            log.warning("closing the ZooKeeper session failed: %s", exc)

    def _state_changed(self, state) -> None:  # kazoo's thread
        from kazoo.protocol.states import KazooState

        if self._closing or self._loop is None:
            return
        if state == KazooState.LOST:
            log.error("the ZooKeeper session expired; this broker is out of the cluster until it reconnects")
            self._expired = True
            self.controller_id = None  # its ephemeral /controller went with the session
            self._loop.call_soon_threadsafe(self._listener.session_lost)
        elif state == KazooState.CONNECTED:
            if self._expired:  # a new session: register again, then re-read everything
                self._expired = False
                self._worker.submit(self._rejoin)
            else:
                self._schedule_refresh()

    def _rejoin(self) -> None:
        try:
            self._register()
        except Exception as exc:  # e.g. the connection dropped again: the next CONNECTED retries
            log.warning("registering again after the session expired failed: %s", exc)
            self._expired = True
            return
        log.info("broker %d registered again in a new ZooKeeper session", self._me.node_id)
        self._schedule_refresh()

    def _watch(self, event) -> None:  # kazoo's thread
        self._schedule_refresh(event.path)

    def _schedule_refresh(self, path: str = "*") -> None:
        """Re-read ``path`` (a watched znode; "*": everything) on the worker thread, soon."""
        if self._closing:
            return
        with self._lock:
            self._dirty.add(path)
            if self._refresh_pending:
                return
            self._refresh_pending = True
        try:
            self._worker.submit(self._refresh)
        except RuntimeError:  # the worker is shut down
            pass

    def _refresh(self, *paths: str) -> None:
        """Re-read what changed (the znodes whose watches fired, re-arming them, and
        ``paths``) and publish the new cache; everything ("*") at join and after reconnecting."""
        with self._lock:
            dirty, self._dirty = self._dirty | set(paths), set()
            self._refresh_pending = False
        if self._closing:
            return
        brokers, topics, states = dict(self._brokers), dict(self._topics), dict(self._states)
        try:
            full = "*" in dirty
            if full or "/brokers/ids" in dirty:
                brokers = self._read_brokers()
            if full or "/controller" in dirty:
                self._elect()
            names = None
            if full or "/brokers/topics" in dirty:
                names = set(self.zk.get_children("/brokers/topics", watch=self._watch))
                for gone in set(topics) - names:
                    del topics[gone]
                    states = {k: v for k, v in states.items() if k[0] != gone}
            for name in (names or set()) | {
                p.split("/")[3] for p in dirty if p.count("/") == 3 and p.startswith("/brokers/topics/")
            }:
                if full or name not in topics or f"/brokers/topics/{name}" in dirty:
                    self._read_topic(name, topics, states)
            for p in dirty:
                parts = p.split("/")  # /brokers/topics/<t>/partitions/<p>/state
                if len(parts) == 7 and parts[6] == "state" and parts[3] in topics:
                    self._read_state(parts[3], int(parts[5]), states)
            if full or any(p.startswith("/config/groups") for p in dirty):
                self._group_configs = self._read_group_configs()
            if full or any(p.startswith(DOCUMENTS) for p in dirty):
                self._documents = self._read_documents()
        except Exception as exc:
            if not self._closing:
                log.warning("reading the cluster state from ZooKeeper failed (%s); retrying", exc)
                time.sleep(0.2)
                self._schedule_refresh()
            return
        if self._expired:  # read in a session since lost: registering again re-reads everything
            return
        self._brokers, self._topics, self._states = brokers, topics, states
        if self._loop is not None and self._listener is not None and not self._closing:
            self._loop.call_soon_threadsafe(self._listener.cluster_changed)

    def _read_group_configs(self) -> dict[str, dict[str, str]]:
        """Every /config/groups/<group>, watched (the list and each group's settings)."""
        from kazoo.exceptions import NoNodeError

        out = {}
        for name in self.zk.get_children("/config/groups", watch=self._watch):
            try:
                data, _ = self.zk.get(f"/config/groups/{name}", watch=self._watch)
            except NoNodeError:  # removed meanwhile
                continue
            out[urllib.parse.unquote(name)] = json.loads(data).get("config", {})
        return out

    def _set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        from kazoo.exceptions import NoNodeError

        path = f"/config/groups/{_group_znode(group_id)}"
        if configs:
            data = json.dumps({"version": 1, "config": configs}).encode()
            if self.zk.exists(path) is None:
                self.zk.create(path, data, makepath=True)
            else:
                self.zk.set_data(path, data)
            self._group_configs = {**self._group_configs, group_id: configs}
        else:
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass
            self._group_configs = {g: c for g, c in self._group_configs.items() if g != group_id}

    def _read_documents(self) -> dict[str, str]:
        """Every /brokkr/documents/<name>, watched; a text that did not change stays the
        object cached (readers tell a change by identity)."""
        from kazoo.exceptions import NoNodeError

        out = {}
        for name in self.zk.get_children(DOCUMENTS, watch=self._watch):
            try:
                data, _ = self.zk.get(f"{DOCUMENTS}/{name}", watch=self._watch)
            except NoNodeError:  # removed meanwhile
                continue
            text, cached = data.decode(), self._documents.get(name)
            out[name] = cached if cached == text else text
        return out

    def _set_document(self, name: str, text: str, data: bytes) -> None:
        from kazoo.exceptions import NodeExistsError, NoNodeError

        path = f"{DOCUMENTS}/{name}"
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:  # another broker created it meanwhile
                self.zk.set(path, data)
        self._documents = {**self._documents, name: text}

    def _read_brokers(self) -> dict[int, BrokerInfo]:
        from kazoo.exceptions import NoNodeError

        brokers = {}
        for child in self.zk.get_children("/brokers/ids", watch=self._watch):
            try:
                data, _ = self.zk.get(f"/brokers/ids/{child}")
            except NoNodeError:
                continue
            brokers[int(child)] = _broker_info(int(child), json.loads(data))
        return brokers

    def _read_topic(self, name: str, topics: dict, states: dict) -> None:
        """A topic's assignment, settings and every partition's state (into ``topics``, ``states``)."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(f"/brokers/topics/{name}", watch=self._watch)
        except NoNodeError:
            topics.pop(name, None)
            return
        raw = json.loads(data)
        try:
            configs = json.loads(self.zk.get(f"/config/topics/{name}")[0]).get("config", {})
        except NoNodeError:
            configs = {}
        topics[name] = TopicAssignment(
            name,
            parse_kafka_uuid(raw["topic_id"]) if "topic_id" in raw else uuid.uuid4(),
            {int(p): tuple(r) for p, r in raw["partitions"].items()},
            configs,
            {int(p): tuple(r) for p, r in raw.get("adding_replicas", {}).items()},
            {int(p): tuple(r) for p, r in raw.get("removing_replicas", {}).items()},
        )
        for p in topics[name].replicas:
            self._read_state(name, p, states)

    def _read_state(self, name: str, partition: int, states: dict) -> None:
        from kazoo.exceptions import NoNodeError

        path = f"/brokers/topics/{name}/partitions/{partition}/state"
        try:
            data, stat = self.zk.get(path, watch=self._watch)
        except NoNodeError:
            if self.zk.exists(path, watch=self._watch) is None:  # watched until the controller creates it
                states.pop((name, partition), None)
                return
            data, stat = self.zk.get(path, watch=self._watch)
        s = json.loads(data)
        states[(name, partition)] = PartitionState(
            s["leader"], s["leader_epoch"], tuple(s["isr"]), s["controller_epoch"], stat.version
        )

    def _elect(self) -> None:
        """Try to become controller when there is none (Kafka's ephemeral /controller)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError

        assert self._me is not None
        try:
            data, _ = self.zk.get("/controller", watch=self._watch)
            self.controller_id = json.loads(data)["brokerid"]
        except NoNodeError:
            payload = {"version": 1, "brokerid": self._me.node_id, "timestamp": str(int(time.time() * 1000))}
            try:
                self.zk.create("/controller", json.dumps(payload).encode(), ephemeral=True)
                self.controller_id = self._me.node_id
                self.controller_epoch = self._bump_controller_epoch()
                log.info("broker %d is the controller (epoch %d)", self._me.node_id, self.controller_epoch)
            except NodeExistsError:
                data, _ = self.zk.get("/controller", watch=self._watch)
                self.controller_id = json.loads(data)["brokerid"]
            self.zk.exists("/controller", watch=self._watch)
        if self.controller_id != self._me.node_id:
            try:
                self.controller_epoch = int(self.zk.get("/controller_epoch")[0])
            except NoNodeError:
                pass

    def _bump_controller_epoch(self) -> int:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        while True:
            try:
                data, stat = self.zk.get("/controller_epoch")
            except NoNodeError:
                try:
                    self.zk.create("/controller_epoch", b"1")
                    return 1
                except NodeExistsError:
                    continue
            epoch = int(data) + 1
            try:
                self.zk.set("/controller_epoch", str(epoch).encode(), version=stat.version)
                return epoch
            except BadVersionError:
                continue

    def _create_topic(self, assignment: TopicAssignment) -> None:
        from kazoo.exceptions import NodeExistsError

        topic, config = _topic_znodes(assignment)
        tx = self.zk.transaction()
        tx.create(f"/config/topics/{assignment.name}", config)
        tx.create(f"/brokers/topics/{assignment.name}", topic)
        results = tx.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise BrokkrError(f"Topic '{assignment.name}' already exists.", ErrorCode.TOPIC_ALREADY_EXISTS)
        if any(isinstance(r, Exception) for r in results):
            raise BrokkrError(f"Creating topic {assignment.name} failed: {results}", ErrorCode.UNKNOWN_SERVER_ERROR)
        self._refresh("/brokers/topics")

    def _update_topic(self, assignment: TopicAssignment) -> None:
        topic, config = _topic_znodes(assignment)
        tx = self.zk.transaction()
        tx.set_data(f"/config/topics/{assignment.name}", config)
        tx.set_data(f"/brokers/topics/{assignment.name}", topic)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise BrokkrError(f"Updating topic {assignment.name} failed: {results}", ErrorCode.UNKNOWN_SERVER_ERROR)
        self._refresh(f"/brokers/topics/{assignment.name}")

    def _delete_topic(self, name: str) -> None:
        self.zk.delete(f"/brokers/topics/{name}", recursive=True)
        self.zk.delete(f"/config/topics/{name}", recursive=True)
        self._refresh("/brokers/topics")

    def _write_states(self, writes: list[tuple[str, int, PartitionState]]) -> list[PartitionState | None]:
        """Each state created (no state cached) or set at its version, up to
        ``zookeeper.max.in.flight.requests`` writes sent before the first answer is awaited
        (ZooKeeper answers a session's requests in order, and syncs its log once for the
        writes that arrive together). A write another writer got ahead of (or that found
        the state gone, the topic deleted meanwhile) is None, and its state is read again."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        results: list[PartitionState | None] = []
        sent: collections.deque = collections.deque()
        stale = []

        def answer() -> None:
            topic, partition, state, path, created, reply = sent.popleft()
            try:
                stat = reply.get()
            except (BadVersionError, NodeExistsError, NoNodeError):
                stale.append(path)
                results.append(None)
                return
            version = 0 if created else stat.version
            written = PartitionState(state.leader, state.leader_epoch, state.isr, state.controller_epoch, version)
            self._states[(topic, partition)] = written
            results.append(written)

        for topic, partition, state in writes:
            if len(sent) >= self.max_in_flight:
                answer()
            path = f"/brokers/topics/{topic}/partitions/{partition}/state"
            data = json.dumps(
                {
                    "controller_epoch": state.controller_epoch,
                    "leader": state.leader,
                    "version": 1,
                    "leader_epoch": state.leader_epoch,
                    "isr": list(state.isr),
                }
            ).encode()
            created = (topic, partition) not in self._states
            if created:
                reply = self.zk.create_async(path, data, makepath=True)
            else:
                reply = self.zk.set_async(path, data, version=state.version)
            sent.append((topic, partition, state, path, created, reply))
        while sent:
            answer()
        if stale:
            self._refresh(*stale)  # once for all: each refresh copies and publishes the whole cache
        return results

    def _reserve_producer_ids(self, count: int, floor: int) -> int:
        """Kafka's ZkProducerIdManager: read /latest_producer_id_block, write the block
        after it with a conditional set (or create), again until no other broker wrote
        first."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        assert self._me is not None
        path = "/latest_producer_id_block"
        while True:
            try:
                data, stat = self.zk.get(path)
                last = json.loads(data)
                start, version = int(last["block_end"]) + 1, stat.version
            except NoNodeError:
                start, version = 0, None
            start = max(start, floor)
            block = {"version": 1, "broker": self._me.node_id, "block_start": str(start)}
            block["block_end"] = str(start + count - 1)
            try:
                if version is None:
                    self.zk.create(path, json.dumps(block).encode())
                else:
                    self.zk.set(path, json.dumps(block).encode(), version=version)
                return start
            except (BadVersionError, NodeExistsError):
                continue


def _group_znode(group_id: str) -> str:
    """A group id as a znode name: percent-encoded, dots too (no "/", ".", ".." names)."""
    return urllib.parse.quote(group_id, safe="").replace(".", "%2E")


def _topic_znodes(assignment: TopicAssignment) -> tuple[bytes, bytes]:
    """The data of /brokers/topics/<topic> and /config/topics/<topic>, as Kafka writes them."""
    topic = {
        "version": 3,
        "topic_id": kafka_uuid(assignment.topic_id),
        "partitions": {str(p): list(r) for p, r in sorted(assignment.replicas.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted(assignment.adding.items())},
        "removing_replicas": {str(p): list(r) for p, r in sorted(assignment.removing.items())},
    }
    return json.dumps(topic).encode(), json.dumps({"version": 1, "config": assignment.configs}).encode()


def _broker_info(node_id: int, raw: dict) -> BrokerInfo:
    endpoints = []
    for text in raw.get("endpoints", []):
        name, _, address = text.partition("://")
        host, _, port = address.rpartition(":")
        endpoints.append((name, host, int(port)))
    services = raw.get("brokkr_services")
    services = tuple(sorted((str(k), str(v)) for k, v in services.items())) if isinstance(services, dict) else ()
    return BrokerInfo(node_id, raw.get("host", ""), raw.get("port", -1), raw.get("rack"), tuple(endpoints), services)


def _new_cluster_id() -> str:
    return kafka_uuid(uuid.uuid4())
