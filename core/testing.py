"""brokkr's pytest plugin (entry point ``pytest11``): brokers for your tests.

Fixtures:

``brokkr_broker``
    A broker with the embedded defaults, on an ephemeral 127.0.0.1 port, started in a
    background thread for the test and stopped after it. ``brokkr_broker.bootstrap_servers``
    is what clients connect to.

``brokkr_broker_factory``
    ``brokkr_broker_factory(config=None, plugins=())`` starts further brokers with your
    settings and plugins (all stopped after the test).

``brokkr_cluster``
    ``brokkr_cluster(n=3, **settings)`` (a setting's value may be a dict of node id to value,
    for one per broker) starts brokers 1..n that form one cluster on a real
    ZooKeeper (Debian's ``zookeeper`` package, started once per test session in a
    temporary directory; each test gets a chroot of its own) and returns them.
    ``brokkr_zookeeper`` is that test's ``zookeeper.connect``. Skipped where ZooKeeper,
    Java or kazoo is missing.

Mark a test ``@pytest.mark.brokkr_config(key=value, ...)`` to pass settings to
``brokkr_broker`` (dots are written as underscores: ``num_partitions=3``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from .broker import BrokerThread
from .client import RawClient

__all__ = ["RawClient", "brokkr_broker", "brokkr_broker_factory", "brokkr_cluster", "brokkr_zookeeper"]

EPHEMERAL = "PLAINTEXT://127.0.0.1:0"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokkr_config(**settings): settings for the brokkr_broker fixture")


@pytest.fixture
def brokkr_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started: list[BrokerThread] = []

    def start(config: Mapping[str, Any] | None = None, plugins: tuple = (), **kwargs: Any) -> BrokerThread:
        values = {"listeners": EPHEMERAL, "log.dirs": str(tmp_path_factory.mktemp("brokkr-data"))}
        values.update(config or {})
        broker = BrokerThread(values, plugins, **kwargs).start()
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def brokkr_broker(request: pytest.FixtureRequest, brokkr_broker_factory: Any) -> BrokerThread:
    marker = request.node.get_closest_marker("brokkr_config")
    config = {k.replace("_", "."): v for k, v in (marker.kwargs if marker else {}).items()}
    return brokkr_broker_factory(config)


# -- clusters on ZooKeeper ---------------------------------------------------------------

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: Settings of test clusters: sessions and ISR changes in seconds, not tens of seconds.
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "group.initial.rebalance.delay.ms": 0,
}
_chroots = itertools.count()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def zookeeper_server(data: Path, output: Any = subprocess.DEVNULL) -> Iterator[str]:
    """A standalone ZooKeeper (Debian's package) on a free port with its data in ``data``,
    tickTime 500 ms so sessions may be as short as a second; yields its host:port, and
    kills it on exit."""
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = subprocess.Popen(
        ["java", "-Xmx256m", "-Dzookeeper.admin.enableServer=false", "-cp", f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}",
         "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), str(data), "500"],
        stdout=output, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not _answers_srvr(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ZooKeeper did not start")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


def _answers_srvr(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"srvr")
            return b"Zookeeper version" in s.recv(4096)
    except OSError:
        return False


def zookeeper_chroot(hosts: str, name: str) -> str:
    """``zookeeper.connect`` for a cluster of its own: ``hosts`` under the path /name."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        zk.ensure_path(f"/{name}")
    finally:
        zk.stop()
        zk.close()
    return f"{hosts}/{name}"


@pytest.fixture(scope="session")
def brokkr_zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """host:port of a standalone ZooKeeper for the test session."""
    pytest.importorskip("kazoo")
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        pytest.skip("ZooKeeper is not installed (apt-get install zookeeper)")
    with zookeeper_server(tmp_path_factory.mktemp("zookeeper")) as hosts:
        yield hosts


@pytest.fixture
def brokkr_zookeeper(brokkr_zookeeper_server: str) -> str:
    """``zookeeper.connect`` for one test: the session's server, under a chroot of its own."""
    return zookeeper_chroot(brokkr_zookeeper_server, f"brokkr-{os.getpid()}-{next(_chroots)}")


@pytest.fixture
def brokkr_cluster(brokkr_broker_factory: Any, brokkr_zookeeper: str, tmp_path_factory: pytest.TempPathFactory):
    """``brokkr_cluster(n=3, **settings)``: brokers 1..n of one cluster (dots in setting
    names written as underscores; a setting given as a dict of node id to value is set per
    broker: ``broker_rack={1: "a", 2: "b", 3: "c"}``), stopped after the test. It returns
    once every broker knows every other as live, so that a topic created at once may have n
    replicas."""

    def start(n: int = 3, plugins: tuple = (), **settings: Any) -> list[BrokerThread]:
        root = tmp_path_factory.mktemp("brokkr-cluster")
        brokers = []
        for node in range(1, n + 1):
            config = {"node.id": node, "zookeeper.connect": brokkr_zookeeper, "log.dirs": str(root / f"b{node}")}
            config.update(CLUSTER_SETTINGS)
            config.update({k.replace("_", "."): v[node] if isinstance(v, dict) else v for k, v in settings.items()})
            brokers.append(brokkr_broker_factory(config, plugins))
        nodes = set(range(1, n + 1))
        deadline = time.monotonic() + 30
        while not all(set(b.broker.replicas.membership.brokers()) == nodes for b in brokers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"brokers {sorted(nodes)} did not all see each other within 30 s")
            time.sleep(0.02)
        return brokers

    return start
