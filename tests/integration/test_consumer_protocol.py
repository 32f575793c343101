"""The consumer group protocol (KIP-848) with a real client: confluent-kafka (librdkafka)
with ``group.protocol=consumer``. Partitions split across members and move when one joins,
leaves or dies; nothing is lost or read twice; committed offsets resume; a regex
subscription follows the topics that match it, also ones created later; the AdminClient
lists, describes (ConsumerGroupDescribe) and deletes the group.

The broker hands out a short heartbeat interval and session so that each test is over in
seconds (with Kafka's defaults, a dead member holds its partitions for 45 s)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest
from brokkr.plugins.groups import coordinator_of

from .conftest import ck_conf, ck_create_topic, ck_flush, ck_producer

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException  # noqa: E402

SESSION_MS = 6000
FAST = {
    "group.consumer.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.session.timeout.ms": SESSION_MS,
    "group.consumer.min.session.timeout.ms": 1000,
}
DEADLINE = 30.0


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory(FAST)


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = ck_producer(bootstrap)
    for i in range(first, first + count):
        producer.produce(topic, value=b"%06d" % i, key=b"k%d" % i)
    ck_flush(producer)


class Member:
    """A confluent-kafka consumer of the consumer protocol that commits each record
    synchronously after handling it."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **extra):
        conf = ck_conf(
            bootstrap,
            **{
                "group.id": group,
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            },
        )
        conf.update(extra)
        self.consumer = Consumer(conf)
        self.consumer.subscribe(topics)
        self.seen: list[tuple[str, int, int, bytes]] = []

    def poll_once(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                return
            raise KafkaException(msg.error())
        self.seen.append((msg.topic(), msg.partition(), msg.offset(), msg.value()))
        self.consumer.commit(message=msg, asynchronous=False)

    def partitions(self, topic: str | None = None) -> set:
        return {
            tp.partition if topic else (tp.topic, tp.partition)
            for tp in self.consumer.assignment()
            if topic is None or tp.topic == topic
        }

    def close(self) -> float:
        start = time.monotonic()
        self.consumer.close()
        return time.monotonic() - start


def run_until(members: list[Member], done, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: " + ", ".join(
            f"{sorted(m.partitions())}/{len(m.seen)}" for m in members
        )
        for m in members:
            m.poll_once()


def split(members: list[Member], topic: str, partitions: int) -> bool:
    """Every partition owned by exactly one member, and the members' shares balanced (a
    partition moving between members is revoked first, so the shares settle in steps)."""
    owned = [m.partitions(topic) for m in members]
    balanced = max(map(len, owned)) - min(map(len, owned)) <= 1
    return balanced and sum(map(len, owned)) == partitions and set().union(*owned) == set(range(partitions))


def values(members: list[Member]) -> list[bytes]:
    return sorted(v for m in members for *_, v in m.seen)


def test_partitions_move_as_members_join_and_leave_with_nothing_lost_or_repeated(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=6)
    produce(bootstrap, topic_name, 0, 60)
    a = Member(bootstrap, "g", [topic_name])
    members = [a]
    try:
        run_until(members, lambda: len(a.seen) >= 20, "the first member to consume")
        b = Member(bootstrap, "g", [topic_name])
        members.append(b)
        run_until(members, lambda: split(members, topic_name, 6), "two members to split six partitions")
        assert sorted(len(m.partitions()) for m in members) == [3, 3]
        produce(bootstrap, topic_name, 60, 60)
        run_until(members, lambda: sum(len(m.seen) for m in members) >= 120, "120 records")
        c = Member(bootstrap, "g", [topic_name])
        members.append(c)
        run_until(members, lambda: split(members, topic_name, 6), "three members to split six partitions")
        assert sorted(len(m.partitions()) for m in members) == [2, 2, 2]
        group = broker.call(lambda: coordinator_of(broker.broker).groups["g"])
        assert (group.type, group.state_name) == ("consumer", "Stable")
        assert b.close() < 5, "close() returns promptly"
        members.remove(b)
        run_until(members, lambda: split(members, topic_name, 6), "the partitions of the member that left to move")
        produce(bootstrap, topic_name, 120, 60)
        run_until(members, lambda: sum(len(m.seen) for m in (a, b, c)) >= 180, "180 records")
    finally:
        for m in members:
            m.close()
    seen = a.seen + b.seen + c.seen
    assert values([a, b, c]) == [b"%06d" % i for i in range(180)], "every record once, none lost"
    assert len({(p, o) for _, p, o, _ in seen}) == 180


CHILD = textwrap.dedent(
    """
    import sys
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer"})
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
    a = Member(bootstrap, "dying", [topic_name])
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
        elapsed = time.monotonic() - killed
        assert SESSION_MS / 1000 - 1.5 < elapsed < 20, f"moved by the session timeout, not before ({elapsed:.1f} s)"
    finally:
        child.kill()
        child.wait(10)
        a.close()


def test_committed_offsets_resume_in_the_next_member(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, 0, 40)

    def consume(n: int) -> list[bytes]:
        m = Member(bootstrap, "durable", [topic_name])
        try:
            run_until([m], lambda: len(m.seen) >= n, f"{n} records")
            return [v for *_, v in m.seen]
        finally:
            assert m.close() < 5

    first = consume(15)
    second = consume(15)
    third = consume(10)
    assert sorted(first + second + third) == [b"%06d" % i for i in range(40)], "each resumed at the commits"


def test_a_regex_subscription_follows_the_topics_that_match(broker, topic_name):
    bootstrap = broker.bootstrap_servers
    prefix = f"rx-{topic_name}"[:60]
    ck_create_topic(bootstrap, f"{prefix}-a", partitions=2)
    ck_create_topic(bootstrap, f"other-{topic_name}"[:60], partitions=1)
    produce(bootstrap, f"{prefix}-a", 0, 10)
    m = Member(bootstrap, "regex", [f"^{prefix}-.*"])
    try:
        run_until([m], lambda: len(m.seen) >= 10, "the records of the matching topic")
        assert {t for t, *_ in m.seen} == {f"{prefix}-a"}
        member = broker.call(lambda: next(iter(coordinator_of(broker.broker).groups["regex"].members.values())))
        assert f"^{prefix}-.*" in member.subscribed_topic_regex  # librdkafka joins its patterns: (^a|^b)
        ck_create_topic(bootstrap, f"{prefix}-b", partitions=3)
        produce(bootstrap, f"{prefix}-b", 10, 10)
        run_until([m], lambda: len(m.seen) >= 20, "the records of a topic created after subscribe()")
        assert len(m.partitions()) == 5 and {t for t, *_ in m.seen} == {f"{prefix}-a", f"{prefix}-b"}
    finally:
        m.close()


def test_admin_client_lists_describes_and_deletes_a_consumer_group(broker, topic_name):
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    bootstrap = broker.bootstrap_servers
    ck_create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, 0, 10)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    member = Member(bootstrap, "admin-c", [topic_name])
    try:
        run_until([member], lambda: len(member.seen) >= 10, "10 records")
        listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(DEADLINE)
        assert [(g.group_id, g.state.name, g.type.name) for g in listed.valid] == [("admin-c", "STABLE", "CONSUMER")]
        described = admin.describe_consumer_groups(["admin-c"])["admin-c"].result(DEADLINE)
        assert (described.type.name, described.state.name, described.partition_assignor) == (
            "CONSUMER",
            "STABLE",
            "uniform",
        )
        (m,) = described.members
        assert {tp.partition for tp in m.assignment.topic_partitions} == {0, 1}
        assert {tp.partition for tp in m.target_assignment.topic_partitions} == {0, 1}
        with pytest.raises(KafkaException, match="NON_EMPTY_GROUP"):
            admin.delete_consumer_groups(["admin-c"])["admin-c"].result(DEADLINE)
    finally:
        member.close()
    admin.delete_consumer_groups(["admin-c"])["admin-c"].result(DEADLINE)
    assert admin.list_consumer_groups().result(DEADLINE).valid == []
