"""A real ZooKeeper (Debian's ``zookeeper`` package, run with the machine's Java) for the
cluster tests, one server per test session, a chroot per test; and brokers that join it."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
_chroots = itertools.count()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory):
    """host:port of a standalone ZooKeeper (tickTime 500 ms, so sessions may be short)."""
    pytest.importorskip("kazoo")
    if not ZOOKEEPER_JAR.exists() or shutil.which("java") is None:
        pytest.skip("ZooKeeper is not installed (apt-get install zookeeper)")
    data = tmp_path_factory.mktemp("zookeeper")
    port = _free_port()
    classpath = f"/etc/zookeeper/conf:{ZOOKEEPER_JAR}"
    proc = subprocess.Popen(
        ["java", "-Dzookeeper.admin.enableServer=false", "-cp", classpath,
         "org.apache.zookeeper.server.ZooKeeperServerMain", str(port), str(data), "500"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                    s.sendall(b"srvr")
                    if b"Zookeeper version" in s.recv(4096):
                        break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, "ZooKeeper did not start"
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def zookeeper(zookeeper_server) -> str:
    """zookeeper.connect for one test: the session's server, under a chroot of its own."""
    from kazoo.client import KazooClient

    chroot = f"/brokkr-{os.getpid()}-{next(_chroots)}"
    zk = KazooClient(hosts=zookeeper_server)
    zk.start(timeout=10)
    try:
        zk.ensure_path(chroot)
    finally:
        zk.stop()
        zk.close()
    return zookeeper_server + chroot


#: Settings for test clusters: quick session expiry and ISR changes.
CLUSTER = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "group.initial.rebalance.delay.ms": 0,
}


@pytest.fixture
def cluster(brokkr_broker_factory, zookeeper, tmp_path):
    """start(n) starts brokers 1..n on one ZooKeeper chroot and returns them."""

    def start(n: int = 3, **extra):
        brokers = []
        for node in range(1, n + 1):
            config = {
                "node.id": node,
                "zookeeper.connect": zookeeper,
                "log.dirs": str(tmp_path / f"b{node}"),
                **CLUSTER,
            }
            config.update({k.replace("_", "."): v for k, v in extra.items()})
            brokers.append(brokkr_broker_factory(config))
        return brokers

    return start
