"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka 2.15+), implicit
and explicit acknowledgement: records shared by several consumers, each delivered once under
accept; released records redelivered with their delivery count raised; rejected ones
never; a consumer killed mid-batch has its records redelivered once its lock runs out;
aborted transactions hidden from a read_committed share group; acknowledged state kept
across a broker restart and a SIGKILL."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType  # noqa: E402
from serve import Served  # noqa: E402

FAST = {
    "share.coordinator.state.topic.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.record.lock.duration.ms": 1000,
}
QUIET = {"log_level": 3}


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(FAST)


def set_group(address: str, group: str, **settings: str) -> None:
    """The group's own share settings (IncrementalAlterConfigs on a GROUP resource)."""
    entries = [
        ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()
    ]
    admin = AdminClient({"bootstrap.servers": address})
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]
    ).values():
        future.result(10)


def produce(address: str, topic: str, values: list[bytes], **config) -> None:
    producer = Producer({"bootstrap.servers": address, **QUIET, **{k.replace("_", "."): v for k, v in config.items()}})
    for v in values:
        producer.produce(topic, value=v)
    assert producer.flush(10) == 0


def share_consumer(address: str, group: str, explicit: bool = False, **config) -> ShareConsumer:
    c = ShareConsumer(
        {
            "bootstrap.servers": address,
            "group.id": group,
            "share.acknowledgement.mode": "explicit" if explicit else "implicit",
            **QUIET,
            **{k.replace("_", "."): v for k, v in config.items()},
        }
    )
    c.subscribe(["t"])
    return c


def poll_until(consumers, want: int, timeout: float, on_message=None) -> list:
    """Poll the consumers in turn until ``want`` messages came (or ``timeout``): (consumer index, message)."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2) or []:
                assert m.error() is None, m.error()
                got.append((i, m))
                if on_message is not None:
                    on_message(c, m)
    return got


def test_several_consumers_receive_every_record_once(broker):
    address = broker.bootstrap_servers
    broker.call(broker.broker.create_topic, "t")
    set_group(address, "g", share_auto_offset_reset="earliest")
    # at most 10 records a fetch (MaxRecords; batch_optimized acquires whole batches, so batches of
    # one record), so that one consumer cannot take them all
    consumers = [share_consumer(address, "g", max_poll_records=10) for _ in range(3)]
    try:
        produce(address, "t", [b"v%d" % i for i in range(200)], batch_num_messages=1)
        got = poll_until(consumers, 200, 20)
        # implicit acknowledgement: each poll accepts the records of the one before
        got += poll_until(consumers, 1, 1.5)
    finally:
        for c in consumers:
            c.close()
    offsets = sorted(m.offset() for _, m in got)
    assert offsets == list(range(200)), "every record once, none twice"
    assert all(m.delivery_count() == 1 for _, m in got)
    assert len({i for i, _ in got}) >= 2, "the consumers share the partition"
    summary = broker.call(broker.broker.share_state.read_summary, "g", [(broker.broker.topics["t"].topic_id, 0)])
    assert list(summary.values())[0][:2] == (0, 200), "all accepted: the share partition starts past them"


def test_explicit_release_redelivers_with_a_raised_count_and_reject_never(broker):
    address = broker.bootstrap_servers
    broker.call(broker.broker.create_topic, "t")
    set_group(address, "g", share_auto_offset_reset="earliest")
    produce(address, "t", [b"a", b"b", b"c"])
    c = share_consumer(address, "g", explicit=True)
    try:
        first = [m for _, m in poll_until([c], 3, 15)]
        assert [(m.offset(), m.delivery_count()) for m in first] == [(0, 1), (1, 1), (2, 1)]
        c.acknowledge(first[0], AcknowledgeType.ACCEPT)
        c.acknowledge(first[1], AcknowledgeType.RELEASE)
        c.acknowledge(first[2], AcknowledgeType.REJECT)
        c.commit_sync(10)
        again = [m for _, m in poll_until([c], 1, 10)]
        assert [(m.offset(), m.value(), m.delivery_count()) for m in again] == [(1, b"b", 2)]
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        c.commit_sync(10)
        assert poll_until([c], 1, 2) == [], "the rejected record is never delivered again"
    finally:
        c.close()


KILLED_CONSUMER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": "g", "share.acknowledgement.mode": "explicit",
                   "log_level": 3})
c.subscribe(["t"])
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    msgs = [m for m in c.poll(0.5) or [] if m.error() is None]
    if msgs:
        print(" ".join(str(m.offset()) for m in msgs), flush=True)
        time.sleep(60)  # mid-batch: never acknowledged
"""


def test_a_consumer_killed_mid_batch_has_its_records_redelivered(broker):
    address = broker.bootstrap_servers
    broker.call(broker.broker.create_topic, "t")
    set_group(address, "g", share_auto_offset_reset="earliest")
    produce(address, "t", [b"v%d" % i for i in range(5)])
    child = subprocess.Popen([sys.executable, "-c", KILLED_CONSUMER, address], stdout=subprocess.PIPE, text=True)
    try:
        held = [int(o) for o in child.stdout.readline().split()]
    finally:
        child.kill()
        child.wait(10)
    assert held == [0, 1, 2, 3, 4]
    c = share_consumer(address, "g", explicit=True)
    try:
        got = [m for _, m in poll_until([c], 5, 15, on_message=lambda c, m: c.acknowledge(m))]
        c.commit_sync(10)
    finally:
        c.close()
    assert [(m.offset(), m.delivery_count()) for m in got] == [(i, 2) for i in range(5)]


def test_aborted_transactions_are_hidden_from_a_read_committed_share_group(broker):
    address = broker.bootstrap_servers
    broker.call(broker.broker.create_topic, "t")
    set_group(address, "committed", share_auto_offset_reset="earliest", share_isolation_level="read_committed")
    set_group(address, "everything", share_auto_offset_reset="earliest")
    producer = Producer({"bootstrap.servers": address, "transactional.id": "tx", **QUIET})
    producer.init_transactions(10)
    for values, commit in (([b"c1", b"c2"], True), ([b"x1", b"x2"], False), ([b"c3"], True)):
        producer.begin_transaction()
        for v in values:
            producer.produce("t", value=v)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    committed = share_consumer(address, "committed")
    everything = share_consumer(address, "everything")
    try:
        seen = [m.value() for _, m in poll_until([committed], 3, 15)]
        seen += [m.value() for _, m in poll_until([committed], 1, 1.5)]
        all_values = [m.value() for _, m in poll_until([everything], 5, 15)]
    finally:
        committed.close()
        everything.close()
    assert seen == [b"c1", b"c2", b"c3"]
    assert all_values == [b"c1", b"c2", b"x1", b"x2", b"c3"]  # read_uncommitted delivers aborted records too


@pytest.mark.parametrize("stop", ["restart", "sigkill"])
def test_acknowledged_state_survives_a_restart_and_a_sigkill(tmp_path, stop):
    args = ["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}"]
    for name, value in FAST.items():
        args += ["--override", f"{name}={value}"]
    served = Served(*args, cwd=tmp_path)
    try:
        set_group(served.address, "g", share_auto_offset_reset="earliest")
        produce(served.address, "t", [b"v%d" % i for i in range(10)])
        c = share_consumer(served.address, "g", explicit=True)
        got = [m for _, m in poll_until([c], 10, 20)]
        assert [m.offset() for m in got] == list(range(10))
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 5 else AcknowledgeType.RELEASE)
        c.commit_sync(10)
        if stop == "sigkill":
            served.kill()  # at once, the consumer still open
        c.close()
    finally:
        if stop == "restart":
            served.proc.terminate()
        served.proc.wait(timeout=20)
    restarted = Served(*args, cwd=tmp_path)
    try:
        c = share_consumer(restarted.address, "g")
        again = [m for _, m in poll_until([c], 5, 20)]
        again += [m for _, m in poll_until([c], 1, 1.5)]
        c.close()
    finally:
        restarted.kill()
    assert sorted((m.offset(), m.delivery_count()) for m in again) == [(i, 2) for i in range(5, 10)]


def test_by_duration_starts_that_far_back(broker):
    address = broker.bootstrap_servers
    broker.call(broker.broker.create_topic, "t")
    set_group(address, "g", share_auto_offset_reset="by_duration:PT1H")
    now = int(time.time() * 1000)
    producer = Producer({"bootstrap.servers": address, **QUIET})
    for value, age_ms in ((b"old-1", 3 * 3600_000), (b"old-2", 2 * 3600_000), (b"new-1", 60_000), (b"new-2", 0)):
        producer.produce("t", value=value, timestamp=now - age_ms)
    assert producer.flush(10) == 0
    c = share_consumer(address, "g")
    try:
        got = [m.value() for _, m in poll_until([c], 2, 15)]
        got += [m.value() for _, m in poll_until([c], 1, 1.5)]
    finally:
        c.close()
    assert got == [b"new-1", b"new-2"]
