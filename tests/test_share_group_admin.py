"""A share group seen and changed by admin requests, with a real ``ShareConsumer`` in it:
ListGroups' ``share`` type, DescribeGroups' and DeleteGroups' answers as Kafka's, and the
share-group offset APIs (describe, alter, delete) through the share coordinator's state."""

from __future__ import annotations

import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import coordinator_of

from tests.test_share_group_membership import (
    FAST,
    assigned,
    describe,
    find_coordinator,
    heartbeat,
    member_id,
    share_consumer,
)
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import (  # noqa: E402
    Consumer,
    ConsumerGroupTopicPartitions,  # noqa: E402
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient  # noqa: E402

LIST_GROUPS, DESCRIBE_GROUPS, OFFSET_COMMIT, DELETE_GROUPS = 16, 15, 8, 42
OFFSET_FETCH, OFFSET_DELETE, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP = 9, 47, 11, 14, 12, 13
DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 90, 91, 92


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    b.call(b.broker.create_topic, "q", 1)
    b.call(b.broker.create_topic, "other", 1)
    producer = Producer({"bootstrap.servers": b.bootstrap_servers})
    for i in range(5):
        producer.produce("q", b"%d" % i)
    assert producer.flush(10) == 0
    return b


def joined(broker, client: RawClient, group: str):
    """A ShareConsumer in ``group``, once it holds q-0."""
    consumer = share_consumer(broker, group, "q")

    def holds():
        consumer.poll(0.05)
        d = describe(client, group)
        return d.error_code == 0 and list(assigned(d).values()) == [{("q", 0)}]

    wait_for("the consumer assigned q-0", holds, timeout=20)
    return consumer


def list_groups(client: RawClient, *types: str) -> dict[str, tuple[str, str, str]]:
    answer = client.request(LIST_GROUPS, 5, request_spec(LIST_GROUPS).cls(states_filter=[], types_filter=list(types)))
    return {g.group_id: (g.protocol_type, g.group_state, g.group_type) for g in answer.groups}


def offsets(client: RawClient, group: str, topics: list[tuple[str, list[int]]] | None = None):
    spec = request_spec(DESCRIBE_OFFSETS)
    topic = spec.struct("DescribeShareGroupOffsetsRequestTopic")
    wanted = None if topics is None else [topic(topic_name=t, partitions=ps) for t, ps in topics]
    body = spec.cls(groups=[spec.struct("DescribeShareGroupOffsetsRequestGroup")(group_id=group, topics=wanted)])
    g = client.request(DESCRIBE_OFFSETS, 1, body).groups[0]
    assert g.error_code == 0, g
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions}


def alter(client: RawClient, group: str, topic: str, partition: int, offset: int):
    spec = request_spec(ALTER_OFFSETS)
    p = spec.struct("AlterShareGroupOffsetsRequestPartition")(partition_index=partition, start_offset=offset)
    t = spec.struct("AlterShareGroupOffsetsRequestTopic")(topic_name=topic, partitions=[p])
    return client.request(ALTER_OFFSETS, 0, spec.cls(group_id=group, topics=[t]))


def delete_offsets(client: RawClient, group: str, *topics: str):
    spec = request_spec(DELETE_OFFSETS)
    body = spec.cls(
        group_id=group, topics=[spec.struct("DeleteShareGroupOffsetsRequestTopic")(topic_name=t) for t in topics]
    )
    return client.request(DELETE_OFFSETS, 0, body)


def commit_classic(client: RawClient, group: str) -> None:
    spec = request_spec(OFFSET_COMMIT)
    partition = spec.struct("OffsetCommitRequestPartition")(partition_index=0, committed_offset=0)
    topic = spec.struct("OffsetCommitRequestTopic")(name="q", partitions=[partition])
    body = spec.cls(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[topic])
    assert client.request(OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code == 0


def test_list_describe_and_delete_a_share_group(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    with RawClient(broker.bootstrap_servers) as client:
        for group in ("s", "c"):
            find_coordinator(client, group)
        commit_classic(client, "c")
        consumer = joined(broker, client, "s")
        try:
            assert list_groups(client, "share") == {"s": ("share", "Stable", "share")}
            assert list_groups(client, "classic") == {"c": ("", "Empty", "classic")}
            assert set(list_groups(client)) == {"s", "c"}
            body = request_spec(DESCRIBE_GROUPS).cls(groups=["s"], include_authorized_operations=False)
            d = client.request(DESCRIBE_GROUPS, 6, body).groups[0]
            assert (d.error_code, d.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group s is not a classic group.")
            with pytest.raises(confluent_kafka.KafkaException) as refused:
                admin.delete_consumer_groups(["s"])["s"].result()
            assert refused.value.args[0].name() == "NON_EMPTY_GROUP"
        finally:
            consumer.close()
        wait_for("the group empty", lambda: describe(client, "s").group_state == "Empty")
        assert set(offsets(client, "s")) == {("q", 0)}, "the assigned partition has share state"
        assert alter(client, "s", "q", 0, 3).responses[0].partitions[0].error_code == 0
        assert offsets(client, "s") == {("q", 0): 3}
        admin.delete_consumer_groups(["s"])["s"].result()
        gone = describe(client, "s")
        assert (gone.error_code, gone.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group s not found.")
        assert offsets(client, "s", [("q", [0])]) == {("q", 0): -1}, "its share state went with it"
        assert list_groups(client, "share") == {}


def test_share_group_offsets_are_described_altered_and_deleted(broker):
    with RawClient(broker.bootstrap_servers) as client:
        for group in ("s", "c", "none"):
            find_coordinator(client, group)
        joined(broker, client, "s").close()
        wait_for("the group empty", lambda: describe(client, "s").group_state == "Empty")
        assert set(offsets(client, "s")) == {("q", 0)}, "the assigned partition has share state"

        epoch = describe(client, "s").group_epoch
        answer = alter(client, "s", "q", 0, 2)
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0
        assert offsets(client, "s") == {("q", 0): 2}
        assert offsets(client, "s", [("q", [0]), ("nope", [0])]) == {("q", 0): 2, ("nope", 0): -1}
        assert describe(client, "s").group_epoch == epoch + 1, "a new epoch, that of the new state"
        unknown = alter(client, "s", "q", 7, 0).responses[0].partitions[0]
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        member = member_id()
        heartbeat(client, "s", member, 0, ["q"])
        busy = alter(client, "s", "q", 0, 0)
        assert (busy.error_code, busy.error_message) == (ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        assert delete_offsets(client, "s", "q").error_code == ErrorCode.NON_EMPTY_GROUP
        heartbeat(client, "s", member, -1)

        deleted = delete_offsets(client, "s", "q", "other")
        assert deleted.error_code == 0
        by_topic = {r.topic_name: (r.error_code, r.error_message) for r in deleted.responses}
        assert by_topic == {
            "q": (0, None),
            "other": (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "There is no offset information to delete."),
        }
        assert offsets(client, "s") == {}
        assert offsets(client, "s", [("q", [0])]) == {("q", 0): -1}

        commit_classic(client, "c")
        for answer in (alter(client, "c", "q", 0, 0), delete_offsets(client, "c", "q")):
            assert (answer.error_code, answer.error_message) == (
                ErrorCode.GROUP_ID_NOT_FOUND,
                "Group c is not a share group.",
            )
        missing = delete_offsets(client, "none", "q")
        assert (missing.error_code, missing.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group none not found.")


def test_a_share_consumer_starts_where_the_offsets_were_altered_to(broker):
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "s")
        assert alter(client, "s", "q", 0, 2).responses[0].partitions[0].error_code == 0
        consumer = share_consumer(broker, "s", "q")
        try:
            got: list[int] = []

            def three():
                got.extend(m.offset() for m in consumer.poll(0.2) or [] if m.error() is None)
                return len(got) >= 3

            wait_for("three records", three, timeout=20)
        finally:
            consumer.close()
    assert sorted(got) == [2, 3, 4], "the records before offset 2 are not delivered"


def test_a_leave_names_a_missing_group_and_one_of_another_type_as_kafka(broker):
    with RawClient(broker.bootstrap_servers) as client:
        for group in ("nobody", "classic", "g"):
            find_coordinator(client, group)
        commit_classic(client, "classic")
        for group, message in [
            ("nobody", "Group nobody not found."),
            ("classic", "Group classic is not a share group."),
        ]:
            answer = heartbeat(client, group, member_id(), -1)
            assert (answer.error_code, answer.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, message)
        assert heartbeat(client, "g", member_id(), 0, ["q"]).error_code == 0
        stranger = member_id()
        answer = heartbeat(client, "g", stranger, -1)
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.UNKNOWN_MEMBER_ID,
            f"Member {stranger} is not a member of group g.",
        )


def test_offsets_of_an_empty_group_id_are_refused_and_no_group_is_made(broker):
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "")
        assert alter(client, "", "q", 0, 0).error_code == ErrorCode.INVALID_GROUP_ID
        assert "" not in list_groups(client)


def test_describing_offsets_asks_for_existing_partitions_only(broker):
    """A request naming 100,000 partition indexes of a one-partition topic (a 400 kB frame)
    costs the broker one share-state read, not 100,000: it takes about as long as the same
    request for a topic that does not exist (the frames' cost alone), and answers start
    offset -1 for the indexes that do not exist, as Kafka answers them."""
    indexes = list(range(100_000))
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "g")
        assert heartbeat(client, "g", member_id(), 0, ["q"]).error_code == 0
        started = time.monotonic()
        assert set(offsets(client, "g", [("nowhere", indexes)]).values()) == {-1}
        frames = time.monotonic() - started
        started = time.monotonic()
        answered = offsets(client, "g", [("q", indexes)])
        took = time.monotonic() - started
        assert len(answered) == 100_000 and answered[("q", 99_999)] == -1
        assert took < 1.5 * frames + 1, (
            f"{took:.1f} s against {frames:.1f} s (every index read from the share coordinator: several times as long)"
        )


def test_a_deleted_topic_leaves_the_groups_share_state_metadata(broker):
    """Kafka's maybeCleanupShareGroupState: a topic deleted (and one recreated under the same
    name, a new topic id) is no longer among the group's initialized topics (from its
    deletion, tests/test_share_topic_deletion.py; here checked at the heartbeats after it)."""
    coordinator = coordinator_of(broker.broker)
    broker.call(broker.broker.create_topic, "brief", 1)
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "g")
        m = member_id()
        joined = heartbeat(client, "g", m, 0, ["brief"])
        assert joined.error_code == 0
        old = broker.broker.topics["brief"].topic_id
        wait_for("brief's share state", lambda: old in coordinator.groups["g"].initialized)
        broker.call(broker.broker.delete_topic, "brief")
        broker.call(broker.broker.create_topic, "brief", 1)
        epoch = joined.member_epoch
        for _ in range(3):  # the group forgets the old topic, then initializes the new one
            answer = heartbeat(client, "g", m, epoch)
            assert answer.error_code == 0
            epoch = answer.member_epoch
        new = broker.broker.topics["brief"].topic_id
        wait_for("the new brief's share state", lambda: new in coordinator.groups["g"].initialized)
        assert old not in coordinator.groups["g"].initialized


def test_classic_and_consumer_group_requests_naming_a_share_group_answer_as_kafka(broker):
    """Kafka's ShareGroup.validateOffsetCommit/validateOffsetFetch and the classic lookups:
    OffsetCommit answers GROUP_ID_NOT_FOUND for every partition of every version (metadata
    too large or not: the group is checked first), OffsetFetch no offsets and no error,
    OffsetDelete GROUP_ID_NOT_FOUND, JoinGroup INCONSISTENT_GROUP_PROTOCOL with no member
    id, SyncGroup, Heartbeat and LeaveGroup UNKNOWN_MEMBER_ID; the group is left as it was."""
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "s")
        m = member_id()
        assert heartbeat(client, "s", m, 0, ["q"]).error_code == 0
        spec = request_spec(OFFSET_COMMIT)
        part = spec.struct("OffsetCommitRequestPartition")
        big = "x" * 5000  # over offset.metadata.max.bytes
        topics = [
            spec.struct("OffsetCommitRequestTopic")(
                name=name, partitions=[part(partition_index=0, committed_metadata=meta)]
            )
            for name, meta in (("q", ""), ("other", big))
        ]
        for version, generation, member in [(2, -1, ""), (8, -1, ""), (9, -1, ""), (9, 1, m), (7, 1, m)]:
            body = spec.cls(group_id="s", generation_id_or_member_epoch=generation, member_id=member, topics=topics)
            answer = client.request(OFFSET_COMMIT, version, body)
            errors = [p.error_code for t in answer.topics for p in t.partitions]
            assert errors == [ErrorCode.GROUP_ID_NOT_FOUND] * 2, (version, generation, errors)
        fetch = request_spec(OFFSET_FETCH)
        named = fetch.cls(
            group_id="s", topics=[fetch.struct("OffsetFetchRequestTopic")(name="q", partition_indexes=[0])]
        )
        old = client.request(OFFSET_FETCH, 7, named)
        assert old.error_code == 0
        assert [(p.committed_offset, p.error_code) for t in old.topics for p in t.partitions] == [(-1, 0)]
        group = fetch.struct("OffsetFetchRequestGroup")
        for topics in (None, [fetch.struct("OffsetFetchRequestTopics")(name="q", partition_indexes=[0])]):
            answer = client.request(OFFSET_FETCH, 8, fetch.cls(groups=[group(group_id="s", topics=topics)])).groups[0]
            assert answer.error_code == 0
            assert [(p.committed_offset, p.error_code) for t in answer.topics for p in t.partitions] == (
                [] if topics is None else [(-1, 0)]
            )
        delete = request_spec(OFFSET_DELETE)
        t = delete.struct("OffsetDeleteRequestTopic")(
            name="q", partitions=[delete.struct("OffsetDeleteRequestPartition")(partition_index=0)]
        )
        assert (
            client.request(OFFSET_DELETE, 0, delete.cls(group_id="s", topics=[t])).error_code
            == ErrorCode.GROUP_ID_NOT_FOUND
        )
        join = request_spec(JOIN_GROUP)
        protocol = join.struct("JoinGroupRequestProtocol")(name="range", metadata=b"")
        for member in ("", "someone"):
            body = join.cls(
                group_id="s", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=member,
                protocol_type="consumer", protocols=[protocol],
            )  # fmt: skip
            answer = client.request(JOIN_GROUP, 9, body)
            assert (answer.error_code, answer.member_id) == (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "")
        sync = request_spec(SYNC_GROUP).cls(group_id="s", generation_id=1, member_id=m, assignments=[])
        assert client.request(SYNC_GROUP, 5, sync).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        beat = request_spec(HEARTBEAT).cls(group_id="s", generation_id=1, member_id=m)
        assert client.request(HEARTBEAT, 4, beat).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        leave = request_spec(LEAVE_GROUP)
        body = leave.cls(group_id="s", members=[leave.struct("MemberIdentity")(member_id=m)])
        assert client.request(LEAVE_GROUP, 5, body).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        d = describe(client, "s")
        assert (d.group_state, [x.member_id for x in d.members]) == ("Stable", [m])


def test_a_transaction_cannot_commit_offsets_for_a_share_group(broker):
    """Kafka's ShareGroup.validateOffsetCommit refuses a transactional commit too: a real
    transactional producer's ``send_offsets_to_transaction`` for a share group's id fails
    with GROUP_ID_NOT_FOUND, and the group has no committed offset afterwards."""
    with RawClient(broker.bootstrap_servers) as client:
        find_coordinator(client, "s")
        assert heartbeat(client, "s", member_id(), 0, ["q"]).error_code == 0
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "tx", "log_level": 3})
    producer.init_transactions(10)
    producer.begin_transaction()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "s"})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.send_offsets_to_transaction([TopicPartition("q", 0, 3)], metadata, 10)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND, refused.value
    producer.abort_transaction(10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("s", [TopicPartition("q", 0)])])
    assert [tp.offset for tp in listed["s"].result(10).topic_partitions] == [-1001], "no offset committed"
