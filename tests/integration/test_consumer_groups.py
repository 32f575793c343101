"""Consumer groups with real clients and their default settings: ``subscribe()`` in
confluent-kafka (eager and cooperative-sticky), kafka-python, aiokafka and ``kcat -G``;
partitions split across members and move when one joins, leaves or dies; manual commits
lose nothing and repeat nothing across rebalances; committed offsets survive a restart
and a SIGKILL of the broker; static members rejoin without a rebalance; ``close()``
returns promptly."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from brokkr.plugins.groups import coordinator_of

from tests.serve import Served

from .conftest import ck_conf, ck_create_topic, ck_flush, ck_producer

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException  # noqa: E402

#: No initial rebalance delay, so that the tests do not wait 3 s per new group.
GROUPS = {"group.initial.rebalance.delay.ms": 0}
DEADLINE = 30.0


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(GROUPS)


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    """Records ``first .. first+count-1`` (as values), keyed so they spread over partitions."""
    producer = ck_producer(bootstrap)
    for i in range(first, first + count):
        producer.produce(topic, value=b"%06d" % i, key=b"k%d" % i)
    ck_flush(producer)


class KafkaPythonMember:
    """A kafka-python consumer polled without pause in a thread of its own, as an
    application runs one. It knows the topic's partitions before its first join, and
    commits after each poll when auto commit is off.

    Both work around kafka-python 3.0.12, whose ``poll()`` can lose a join:
    - A poll that times out leaves the join in flight. If the join's answers arrive before
      the next poll, that poll starts a new join and the finished one is never applied.
      Consumers polled in turn from one thread hit this on every rebalance: each one's
      join waits for the others, which are not being polled, so the group rebalances
      forever. Polling without pause shrinks the window to microseconds.
    - A consumer that leads the group before it has the topic's metadata assigns
      nothing, then rejoins when the metadata arrives. That rejoin is lost the same way,
      with no further heartbeats. The coordinator then holds the next rebalance for the
      member until its session times out (45 s), as Kafka's does."""

    def __init__(self, bootstrap: str, topic: str, group: str, **extra):
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **extra
        )
        assert self.consumer.partitions_for_topic(topic), f"no metadata for {topic}"
        self.consumer.subscribe([topic])
        self.commits = extra.get("enable_auto_commit") is False
        self.got: list[bytes] = []
        self.partitions: frozenset[int] = frozenset()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kafka-python {group}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=200).values():
                    self.got.extend(r.value for r in records)
                if self.commits:
                    self.consumer.commit()
                self.partitions = frozenset(tp.partition for tp in self.consumer.assignment())
        except BaseException as exc:  # handed to the test, which fails on it
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> float:
        """Stop polling, then close (which commits with auto commit on, and leaves): how long
        closing took."""
        self._stop.set()
        self._thread.join(DEADLINE)
        assert not self._thread.is_alive(), "the polling thread did not stop"
        start = time.monotonic()
        self.consumer.close()
        return time.monotonic() - start


class Member:
    """A confluent-kafka consumer of one group that commits each record synchronously
    after handling it (at-least-once with nothing in flight: exactly once here)."""

    def __init__(self, bootstrap: str, group: str, topic: str, **extra):
        conf = ck_conf(bootstrap, **{"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
        conf.update(extra)
        self.consumer = Consumer(conf)
        self.consumer.subscribe([topic])
        self.seen: list[tuple[int, int, bytes]] = []

    def poll_once(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                return
            raise KafkaException(msg.error())
        self.seen.append((msg.partition(), msg.offset(), msg.value()))
        self.consumer.commit(message=msg, asynchronous=False)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> float:
        start = time.monotonic()
        self.consumer.close()
        return time.monotonic() - start


def run_until(members: list[Member], done, what: str, timeout: float = DEADLINE) -> None:
    """Poll every member in turn until ``done()`` holds."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: " + ", ".join(
            f"{sorted(m.partitions())}/{len(m.seen)}" for m in members
        )
        for m in members:
            m.poll_once()


def split(members: list[Member], partitions: int) -> bool:
    """Every partition owned by exactly one member, and every member owns some."""
    owned = [m.partitions() for m in members]
    return all(owned) and sum(map(len, owned)) == partitions and set().union(*owned) == set(range(partitions))


@pytest.mark.parametrize("strategy", ["range,roundrobin", "cooperative-sticky"])
def test_partitions_move_as_members_join_and_leave_with_nothing_lost_or_repeated(broker, topic_name, strategy):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=6)
    produce(bootstrap, topic_name, 0, 60)
    extra = {"partition.assignment.strategy": strategy}
    a = Member(bootstrap, "g", topic_name, **extra)
    members = [a]
    try:
        run_until(members, lambda: len(a.seen) >= 20, "the first member to consume")
        b = Member(bootstrap, "g", topic_name, **extra)
        members.append(b)
        run_until(members, lambda: split(members, 6), "two members to split six partitions")
        assert sorted(map(len, (a.partitions(), b.partitions()))) == [3, 3]
        produce(bootstrap, topic_name, 60, 60)
        run_until(members, lambda: sum(len(m.seen) for m in members) >= 120, "120 records")
        c = Member(bootstrap, "g", topic_name, **extra)
        members.append(c)
        run_until(members, lambda: split(members, 6), "three members to split six partitions")
        assert sorted(map(len, (m.partitions() for m in members))) == [2, 2, 2]
        assert b.close() < 5, "close() returns promptly"
        members.remove(b)
        run_until(members, lambda: split(members, 6), "the partitions of the member that left to move")
        produce(bootstrap, topic_name, 120, 60)
        run_until(members, lambda: len(a.seen) + len(b.seen) + len(c.seen) >= 180, "180 records")
    finally:
        for m in members:
            m.close()
    seen = a.seen + b.seen + c.seen
    assert sorted(v for _, _, v in seen) == [b"%06d" % i for i in range(180)], "every record once, none lost"
    assert len({(p, o) for p, o, _ in seen}) == 180


CHILD = textwrap.dedent(
    """
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 1000})
    c.subscribe([sys.argv[3]])
    while True:
        c.poll(0.2)
        if c.assignment():
            print("assigned", flush=True)
    """
)


def test_a_member_that_dies_loses_its_partitions_after_its_session_timeout(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=4)
    a = Member(bootstrap, "dying", topic_name, **{"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
    run_until([a], lambda: len(a.partitions()) == 4, "the first member's assignment")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, bootstrap, "dying", topic_name], stdout=subprocess.PIPE, text=True
    )
    try:
        run_until([a], lambda: len(a.partitions()) == 2, "the child to take half")
        assert child.stdout.readline().strip() == "assigned"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed = time.monotonic()
        run_until([a], lambda: len(a.partitions()) == 4, "the dead member's partitions to come back", timeout=25)
        assert 5 < time.monotonic() - killed < 20, "moved by the session timeout (6 s), not before"
    finally:
        child.kill()
        child.wait(10)
        a.close()


def test_committed_offsets_survive_a_restart_and_a_sigkill(brokkr_broker_factory, tmp_path, topic_name):
    data = tmp_path / "data"
    broker = brokkr_broker_factory({"log.dirs": str(data), **GROUPS})
    port = broker.listeners[0].port
    same_place = {"log.dirs": str(data), "listeners": f"PLAINTEXT://127.0.0.1:{port}", **GROUPS}
    bootstrap = f"127.0.0.1:{port}"
    ck_create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, 0, 40)

    def consume(n: int) -> list[bytes]:
        # A member of an earlier run whose LeaveGroup was lost holds the next rebalance up
        # for its session timeout: keep it short so that the test stays bounded.
        m = Member(bootstrap, "durable", topic_name, **{"session.timeout.ms": 6000})
        try:
            run_until([m], lambda: len(m.seen) >= n, f"{n} records", timeout=60)
            return [v for _, _, v in m.seen]
        finally:
            assert m.close() < 10

    first = consume(10)
    broker.stop()
    broker = brokkr_broker_factory(same_place)
    second = consume(10)
    broker.stop()
    served = Served(*(f"--override={k}={v}" for k, v in same_place.items()), cwd=tmp_path)
    try:
        third = consume(10)
    finally:
        served.kill()  # SIGKILL: the commits must already be in the log
    broker = brokkr_broker_factory(same_place)
    fourth = consume(10)
    assert sorted(first + second + third + fourth) == [b"%06d" % i for i in range(40)]


def test_a_static_member_rejoins_without_a_rebalance(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=4)
    static = {"group.instance.id": "instance-1", "session.timeout.ms": 30000}
    a = Member(bootstrap, "static", topic_name, **static)
    b = Member(bootstrap, "static", topic_name)
    run_until([a, b], lambda: split([a, b], 4), "two members to split four partitions")
    group = broker.call(lambda: coordinator_of(broker.broker).groups["static"])
    generation, owned = group.generation_id, a.partitions()
    assert a.close() < 5  # a static member leaves no LeaveGroup behind
    again = Member(bootstrap, "static", topic_name, **static)
    try:
        run_until([again, b], lambda: again.partitions() == owned, "the static member's partitions back")
        assert group.generation_id == generation, "no rebalance"
        assert b.partitions() == {0, 1, 2, 3} - owned
    finally:
        again.close()
        b.close()


def test_kafka_python_members_split_partitions_and_resume_from_commits(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=4)
    produce(bootstrap, topic_name, 0, 40)
    members = [KafkaPythonMember(bootstrap, topic_name, "kp") for _ in range(2)]
    a, b = members

    def settled() -> bool:
        """Each member holds partitions, none twice, all four held. A member keeps its old
        assignment until its own rejoin completes, so a view taken mid-rebalance may overlap."""
        return bool(a.partitions and b.partitions and not a.partitions & b.partitions) and (
            a.partitions | b.partitions == {0, 1, 2, 3}
        )

    try:
        deadline = time.monotonic() + DEADLINE
        while not (settled() and len(a.got) + len(b.got) >= 40):
            a.check(), b.check()
            assert time.monotonic() < deadline, f"{a.partitions} {b.partitions} {len(a.got) + len(b.got)}"
            time.sleep(0.05)
    finally:
        for m in members:
            assert m.close() < 5  # commits the consumed positions (auto commit) and leaves
    assert sorted(a.got + b.got) == [b"%06d" % i for i in range(40)]
    produce(bootstrap, topic_name, 40, 8)
    c = KafkaPythonMember(bootstrap, topic_name, "kp")
    try:
        deadline = time.monotonic() + DEADLINE
        while len(c.got) < 8 and time.monotonic() < deadline:
            c.check()
            time.sleep(0.05)
    finally:
        c.close()
    assert sorted(c.got) == [b"%06d" % i for i in range(40, 48)], "resumed at the committed offsets"


def test_aiokafka_consumes_through_subscribe_and_commits(broker, topic_name):
    from aiokafka import AIOKafkaConsumer

    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=3)
    produce(bootstrap, topic_name, 0, 30)

    async def consume(count: int) -> list[bytes]:
        c = AIOKafkaConsumer(topic_name, bootstrap_servers=bootstrap, group_id="aio", auto_offset_reset="earliest")
        await asyncio.wait_for(c.start(), DEADLINE)
        out: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE
            while len(out) < count and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in records)
            await c.commit()
        finally:
            start = time.monotonic()
            await asyncio.wait_for(c.stop(), 10)
            assert time.monotonic() - start < 5
        return out

    assert sorted(asyncio.run(consume(30))) == [b"%06d" % i for i in range(30)]
    produce(bootstrap, topic_name, 30, 6)
    assert sorted(asyncio.run(consume(6))) == [b"%06d" % i for i in range(30, 36)]


def test_a_group_mixing_clients_of_the_classic_protocol(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=4)
    produce(bootstrap, topic_name, 0, 40)
    a = Member(bootstrap, "mixed", topic_name)
    kp = KafkaPythonMember(bootstrap, topic_name, "mixed", enable_auto_commit=False)
    try:
        deadline = time.monotonic() + DEADLINE
        while not (a.partitions() and kp.partitions and len(a.seen) + len(kp.got) >= 40):
            kp.check()
            assert time.monotonic() < deadline, f"{a.partitions()} {kp.partitions} {len(a.seen) + len(kp.got)}"
            a.poll_once()
        assert a.partitions() | kp.partitions == {0, 1, 2, 3}
    finally:
        kp.close()
        a.close()
    assert sorted(kp.got + [v for _, _, v in a.seen]) == [b"%06d" % i for i in range(40)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_balanced_consumer_reads_and_commits(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, 0, 20)

    def kcat() -> list[str]:
        out = subprocess.run(
            ["kcat", "-b", bootstrap, "-G", "kcat-group", "-X", "auto.offset.reset=earliest", "-e", "-q", "-f", "%s\n"]
            + [topic_name],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ},
        )
        assert out.returncode == 0, out.stderr
        return out.stdout.split()

    assert sorted(kcat()) == [f"{i:06d}" for i in range(20)]
    produce(bootstrap, topic_name, 20, 4)
    assert sorted(kcat()) == [f"{i:06d}" for i in range(20, 24)], "the second run starts at the commits"


def test_admin_client_lists_describes_alters_and_deletes_groups_and_offsets(broker, topic_name):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, 0, 20)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = Member(bootstrap, "admin-g", topic_name)
    try:
        run_until([member], lambda: len(member.seen) >= 20, "20 records")
        listed = admin.list_consumer_groups().result(DEADLINE)
        assert [(g.group_id, g.state.name) for g in listed.valid] == [("admin-g", "STABLE")]
        described = admin.describe_consumer_groups(["admin-g"])["admin-g"].result(DEADLINE)
        assert described.state.name == "STABLE" and described.partition_assignor == "range"
        (m,) = described.members
        assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}
        request = [
            ConsumerGroupTopicPartitions("admin-g", [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        ]
        offsets = admin.list_consumer_group_offsets(request)["admin-g"].result(DEADLINE)
        committed = {tp.partition: tp.offset for tp in offsets.topic_partitions}
        assert sum(committed.values()) == 20
        busy = admin.delete_consumer_groups(["admin-g"])["admin-g"]
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            busy.result(DEADLINE)
    finally:
        member.close()
    reset = [ConsumerGroupTopicPartitions("admin-g", [TopicPartition(topic_name, 0, 1)])]
    admin.alter_consumer_group_offsets(reset)["admin-g"].result(DEADLINE)
    offsets = admin.list_consumer_group_offsets(request)["admin-g"].result(DEADLINE)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions}[0] == 1
    import kafka.errors
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)  # confluent-kafka has no OffsetDelete call
    try:
        result = kp_admin.delete_group_offsets("admin-g", [KTP(topic_name, 1)])
        assert result == {KTP(topic_name, 1): kafka.errors.NoError}
    finally:
        kp_admin.close()
    offsets = admin.list_consumer_group_offsets(request)["admin-g"].result(DEADLINE)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == {0: 1, 1: -1001}
    admin.delete_consumer_groups(["admin-g"])["admin-g"].result(DEADLINE)
    assert admin.list_consumer_groups().result(DEADLINE).valid == []
