"""Declared storage capabilities (brokkr.core.log): checked once when the storage opens,
read as the storage declared them everywhere else, never guessed from an object's
attributes; a cluster refuses a storage without leader epochs; a storage that declares
what it lacks is refused (its own capabilities) or fails the contract suite (its logs')."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokkr.core.broker import Broker
from brokkr.core.errors import ConfigError
from brokkr.core.log import PROTOCOLS, Capability
from brokkr.core.plugins import hookimpl
from brokkr.core.storage_contract import Harness, StorageContract
from brokkr.core.testing import free_port
from brokkr.plugins.storage.memory import MemoryLog, MemoryStorage
from confluent_kafka import Consumer, Producer, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
#: An expression naming a storage or one of its logs: ``storage``, ``self.storage``, ``log``, ``partition.log``, ``plog``.
STORAGE_OR_LOG = re.compile(r"(^|[._])(storage|p?log)$")
#: The one capability check, and the module that defines the protocols.
CHECK = ("core/log.py", "check_capabilities")
PROTOCOL_NAMES = {p.__name__ for p in PROTOCOLS.values()} | {"Storage", "PartitionLog"}


class _Probes(ast.NodeVisitor):
    def __init__(self, path: str):
        self.path, self.function, self.found = path, "", []

    def visit_FunctionDef(self, node) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        probed = None
        if name in ("hasattr", "getattr") and node.args and STORAGE_OR_LOG.search(ast.unparse(node.args[0])):
            probed = ast.unparse(node)
        elif name == "isinstance" and len(node.args) == 2 and ast.unparse(node.args[1]) in PROTOCOL_NAMES:
            probed = ast.unparse(node)
        if probed and (self.path, self.function) != CHECK:
            self.found.append(f"{self.path}:{node.lineno} {probed}")
        self.generic_visit(node)


def test_no_storage_or_log_is_probed_outside_the_one_capability_check():
    found = []
    for top in ("core", "plugins", "examples"):
        for path in sorted((ROOT / top).rglob("*.py")):
            probes = _Probes(str(path.relative_to(ROOT)))
            probes.visit(ast.parse(path.read_text(), str(path)))
            found += probes.found
    assert found == [], "read broker.storage_capabilities / partition.capabilities instead"


def test_a_cluster_refuses_a_storage_without_leader_epochs_at_start(tmp_path):
    """Without leader epochs a follower could only truncate to the high watermark at each
    leader change: ``brokkr serve`` stops at once, naming the storage and the capability,
    before it tries ZooKeeper (which does not answer here)."""
    settings = {
        "brokkr.storage": "memory",
        "zookeeper.connect": f"127.0.0.1:{free_port()}",
        "zookeeper.connection.timeout.ms": 1000,
        "listeners": "PLAINTEXT://127.0.0.1:0",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "brokkr.core.cli", "serve", *(f"--override={k}={v}" for k, v in settings.items())],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    [line] = [line for line in proc.stderr.splitlines() if "LEADER_EPOCHS" in line]
    assert "a cluster (zookeeper.connect) needs the storage capability LEADER_EPOCHS" in line
    assert "brokkr.storage=memory (MemoryStorage) does not declare" in line


class _ReadRegionsUndeclared(MemoryLog):
    """A log with a ``read_region`` its storage does not declare: never to be called."""

    def read_region(self, *args):
        raise AssertionError("read_region of a storage that does not declare READ_REGIONS")


class _Lying(MemoryStorage):
    def __init__(self, codecs, capabilities):
        super().__init__(codecs)
        self.capabilities = capabilities
        self.closed = False

    def open_log(self, topic, partition, config):
        return _ReadRegionsUndeclared(config, self.codecs)

    def close(self) -> None:
        self.closed = True


class LyingStorages:
    """``brokkr.storage=lying-<flags>``: memory storages declaring ``<flags>`` (names of
    Capability joined by '+', or ``none``), whose logs also have an undeclared read_region."""

    def __init__(self):
        self.opened: list[_Lying] = []

    @hookimpl
    def brokkr_open_storage(self, broker):
        name = broker.config["brokkr.storage"]
        if not name.startswith("lying-"):
            return None
        flags = name.removeprefix("lying-")
        declared = Capability(0)
        for flag in () if flags in ("none", "not-a-flag") else flags.split("+"):
            declared |= Capability[flag]
        self.opened.append(_Lying(broker.codecs, {"read-regions"} if flags == "not-a-flag" else declared))
        return self.opened[-1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("COMPACTION", r"\(_Lying\) declares COMPACTION but does not implement brokkr.core.log.Compaction"),
        ("LOG_DIRS+TXN_INDEX", r"declares LOG_DIRS but does not implement brokkr.core.log.LogDirs"),
        ("not-a-flag", r"declares capabilities \{'read-regions'\}, not a brokkr.core.log.Capability"),
    ],
)
def test_a_storage_declaring_what_it_does_not_implement_is_refused_and_closed(flags, message):
    plugin = LyingStorages()
    broker = Broker({"brokkr.storage": f"lying-{flags}"}, [plugin], entry_points=False)
    with pytest.raises(ConfigError, match=message):
        broker.open_storage()
    assert plugin.opened[0].closed


class LyingContract(StorageContract):
    storage_name = "lying-LEADER_EPOCHS+TXN_INDEX"
    durable = False

    def __init__(self):
        self.plugins = (LyingStorages(),)


def test_a_storage_whose_logs_lack_a_declared_capability_fails_the_contract(tmp_path):
    harness = Harness(LyingContract(), tmp_path)
    try:
        with pytest.raises(AssertionError, match="its logs lack the declared Capability.LEADER_EPOCHS"):
            harness.contract.test_declared_capabilities_are_implemented(harness)
    finally:
        harness.close()


def test_a_capability_not_declared_is_never_used(brokkr_broker_factory):
    """The logs have a read_region, the storage does not declare READ_REGIONS: real
    clients produce and consume through ``read`` alone."""
    broker = brokkr_broker_factory({"brokkr.storage": "lying-none"}, plugins=(LyingStorages(),))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "message.timeout.ms": 5000})
    for i in range(5):
        producer.produce("t", value=b"v%d" % i)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("t", 0, 0)])
        values, deadline = [], time.monotonic() + 10
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                values.append(msg.value())
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(5)]
