"""Share groups' membership (KIP-932): real confluent-kafka ``ShareConsumer``s join and are
given the same partition, leave; raw ShareGroupHeartbeats where a client cannot misbehave
on purpose (a member that goes silent, one too many, wrong epochs, a group of another type);
the per-group session timeout (a GROUP config); the group rebuilt from ``__consumer_offsets``
after a SIGKILL."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from authorizers import Deny
from brokkr.core.authorization import ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import BUILTIN_PLUGINS
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient

from tests.serve import Served
from tests.waiting import wait_for
from tests.wire import METADATA, metadata_body

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import ShareConsumer  # noqa: E402
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from confluent_kafka.admin import ResourceType as AdminResourceType  # noqa: E402

SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, JOIN_GROUP, OFFSET_COMMIT = 76, 77, 68, 11, 8
FIND_COORDINATOR, DESCRIBE_OFFSETS = 10, 90
LOADING = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)
#: Fast heartbeats and short sessions allowed (a group's own values must lie within these);
#: the share plugin (share state, ShareFetch) named while it is not yet a built-in.
FAST = {
    "group.share.min.heartbeat.interval.ms": 100,
    "group.share.heartbeat.interval.ms": 300,
    "group.share.min.session.timeout.ms": 1000,
    **({} if "brokkr.plugins.share" in BUILTIN_PLUGINS else {"brokkr.plugins": "brokkr.plugins.share"}),
}


def member_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def heartbeat(client: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None):
    body = request_spec(SHARE_GROUP_HEARTBEAT).cls(
        group_id=group, member_id=member, member_epoch=epoch, subscribed_topic_names=topics
    )
    return client.request(SHARE_GROUP_HEARTBEAT, 1, body)


def find_coordinator(client: RawClient, group: str) -> None:
    """Ask for the group's coordinator until it is there and loaded (it creates
    ``__consumer_offsets``, as a client's first FindCoordinator does)."""
    spec = request_spec(FIND_COORDINATOR)

    def ready():
        found = client.request(FIND_COORDINATOR, 4, spec.cls(key_type=0, coordinator_keys=[group]))
        return found.coordinators[0].error_code == 0 and describe(client, group).error_code not in LOADING

    wait_for(f"the coordinator of {group}", ready)


def describe(client: RawClient, group: str):
    body = request_spec(SHARE_GROUP_DESCRIBE).cls(group_ids=[group], include_authorized_operations=False)
    return client.request(SHARE_GROUP_DESCRIBE, 1, body).groups[0]


def assigned(described) -> dict[str, set[tuple[str, int]]]:
    return {
        m.member_id: {(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions}
        for m in described.members
    }


def share_consumer(broker, group: str, topic: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    consumer.subscribe([topic])
    return consumer


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    b.call(b.broker.create_topic, "q", 1)
    return b


def test_share_consumers_share_one_partition_and_leave(broker):
    consumers = [share_consumer(broker, "workers", "q") for _ in range(3)]
    try:
        with RawClient(broker.bootstrap_servers) as client:

            def all_assigned():
                for c in consumers:
                    c.poll(0.05)
                d = describe(client, "workers")
                got = assigned(d) if d.error_code == 0 else {}
                return d if len(got) == 3 and all(tps == {("q", 0)} for tps in got.values()) else None

            described = wait_for("three members all given q-0", all_assigned, timeout=20)
            assert described.group_state == "Stable" and described.assignor_name == "simple"
            assert {m.member_epoch for m in described.members} == {described.assignment_epoch}
            epoch = described.group_epoch
            consumers.pop().close()  # leaves the group (epoch -1)
            left = wait_for("the member gone", lambda: (d := describe(client, "workers")).members[2:] == [] and d)
            assert len(left.members) == 2 and left.group_epoch > epoch
            assert all(tps == {("q", 0)} for tps in assigned(left).values())
    finally:
        for c in consumers:
            c.close()


def test_a_silent_member_is_removed_after_the_groups_own_session_timeout(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    entry = ConfigEntry("share.session.timeout.ms", "1200", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
        [ConfigResource(AdminResourceType.GROUP, "quick", incremental_configs=[entry])]
    ).values():
        future.result()
    with RawClient(broker.bootstrap_servers) as client:
        quick, slow = member_id(), member_id()
        find_coordinator(client, "quick")
        find_coordinator(client, "slow")
        joined = heartbeat(client, "quick", quick, 0, ["q"])
        assert joined.error_code == 0 and joined.member_epoch >= 1 and joined.heartbeat_interval_ms == 300
        assert heartbeat(client, "slow", slow, 0, ["q"]).error_code == 0  # the broker's 45 s
        started = time.monotonic()
        wait_for("the silent member removed", lambda: describe(client, "quick").members == [], timeout=10)
        assert time.monotonic() - started >= 0.8
        assert describe(client, "quick").group_state == "Empty"
        assert [m.member_id for m in describe(client, "slow").members] == [slow]
        gone = heartbeat(client, "quick", quick, joined.member_epoch)
        assert gone.error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert gone.error_message == f"Member {quick} is not a member of group quick."


def test_a_group_takes_at_most_group_share_max_size_members(brokkr_broker_factory):
    b = brokkr_broker_factory({**FAST, "group.share.max.size": 2})
    b.call(b.broker.create_topic, "q", 1)
    with RawClient(b.bootstrap_servers) as client:
        first, second = member_id(), member_id()
        find_coordinator(client, "g")
        assert heartbeat(client, "g", first, 0, ["q"]).error_code == 0
        epoch = heartbeat(client, "g", second, 0, ["q"]).member_epoch
        refused = heartbeat(client, "g", member_id(), 0, ["q"])
        assert refused.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
        assert refused.error_message == "The share group has reached its maximum capacity of 2 members."
        assert heartbeat(client, "g", second, epoch).error_code == 0, "a member of a full group stays"


def test_kafkas_answers_to_bad_heartbeats_and_groups_of_other_types(broker):
    with RawClient(broker.bootstrap_servers) as client:
        m = member_id()
        for group in ("g", "nobody", "classic"):
            find_coordinator(client, group)
        for member, epoch, topics, message in [
            (m, 0, None, "SubscribedTopicNames must be set in first request."),
            (m, 0, [], "SubscribedTopicNames must be set in first request."),
            ("", 0, ["q"], "Invalid member id in the request."),
            ("x" * 37, 0, ["q"], "Invalid member id in the request."),
            (m, -2, None, "MemberEpoch is invalid."),
        ]:
            answer = heartbeat(client, "g", member, epoch, topics)
            assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_REQUEST, message)
        unknown = heartbeat(client, "nobody", m, 3)
        assert (unknown.error_code, unknown.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Share group nobody not found.",
        )
        joined = heartbeat(client, "g", m, 0, ["q"])
        ahead = heartbeat(client, "g", m, joined.member_epoch + 1)
        assert ahead.error_code == ErrorCode.FENCED_MEMBER_EPOCH
        # A share group is no consumer group, and no classic group joins it.
        spec = request_spec(CONSUMER_GROUP_HEARTBEAT)
        body = spec.cls(
            group_id="g", member_id=member_id(), member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["q"], topic_partitions=[],
        )  # fmt: skip
        answer = client.request(CONSUMER_GROUP_HEARTBEAT, 1, body)
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group g is not a consumer group.",
        )
        spec = request_spec(JOIN_GROUP)
        protocol = spec.struct("JoinGroupRequestProtocol")(name="range", metadata=b"")
        body = spec.cls(
            group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=[protocol],
        )  # fmt: skip
        assert client.request(JOIN_GROUP, 5, body).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        # A classic group (committed offsets only) is no share group either.
        spec = request_spec(OFFSET_COMMIT)
        partition = spec.struct("OffsetCommitRequestPartition")(partition_index=0, committed_offset=0)
        topic = spec.struct("OffsetCommitRequestTopic")(name="q", partitions=[partition])
        body = spec.cls(group_id="classic", generation_id_or_member_epoch=-1, member_id="", topics=[topic])
        assert client.request(OFFSET_COMMIT, 8, body).topics[0].partitions[0].error_code == 0
        answer = heartbeat(client, "classic", member_id(), 0, ["q"])
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group classic is not a share group.",
        )


def test_members_and_assignments_survive_a_sigkill(tmp_path):
    args = ("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}")
    args += tuple(a for k, v in FAST.items() for a in ("--override", f"{k}={v}"))
    served = Served(
        *args, "--override", "num.partitions=2", "--override", "auto.create.topics.enable=true", cwd=tmp_path
    )
    try:
        with RawClient(served.address) as client:
            client.request(METADATA, 12, metadata_body("q"))  # creates it
            find_coordinator(client, "g")
            a, b = member_id(), member_id()
            heartbeat(client, "g", a, 0, ["q"])
            joined = heartbeat(client, "g", b, 0, ["q"])
            before = wait_for(
                "both members assigned",
                lambda: (d := describe(client, "g")) and all(assigned(d).values()) and len(d.members) == 2 and d,
            )
    finally:
        served.kill()
    restarted = Served(*args, cwd=tmp_path)
    try:
        with RawClient(restarted.address) as client:
            find_coordinator(client, "g")
            after = describe(client, "g")
            assert assigned(after) == assigned(before)
            assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
            assert {m.member_id: m.member_epoch for m in after.members} == {
                m.member_id: m.member_epoch for m in before.members
            }
            again = heartbeat(client, "g", b, [m.member_epoch for m in after.members if m.member_id == b][0])
            assert again.error_code == 0, "the member goes on without rejoining"
            assert joined.error_code == 0
    finally:
        restarted.kill()


def deny_secrets(action) -> bool:
    """No access to group "secret" (nor its settings), no DESCRIBE of topic "hidden"."""
    if action.resource_type is ResourceType.GROUP:
        return action.resource_name == "secret"
    return action.resource_type is ResourceType.TOPIC and action.resource_name == "hidden"


def test_groups_and_topics_are_authorized_as_kafka_does(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    for name in ("q", "hidden"):
        b.call(b.broker.create_topic, name, 1)
    with RawClient(b.bootstrap_servers) as client:
        find_coordinator(client, "g")
        holder = member_id()
        assert heartbeat(client, "g", holder, 0, ["hidden"]).error_code == 0
        b.broker.pm.register(Deny(deny_secrets), name="deny-secrets")
        assert heartbeat(client, "secret", member_id(), 0, ["q"]).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        answer = heartbeat(client, "g", member_id(), 0, ["q", "hidden"])
        assert answer.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert describe(client, "secret").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        hidden = describe(client, "g")
        assert (hidden.error_code, hidden.members) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, []), (
            "no hidden topic shown"
        )
        spec = request_spec(DESCRIBE_OFFSETS)
        body = spec.cls(groups=[spec.struct("DescribeShareGroupOffsetsRequestGroup")(group_id="secret", topics=None)])
        assert client.request(DESCRIBE_OFFSETS, 1, body).groups[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    entry = ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(AdminResourceType.GROUP, "secret", incremental_configs=[entry])
    for future in (
        *admin.incremental_alter_configs([resource]).values(),
        *admin.describe_configs([ConfigResource(AdminResourceType.GROUP, "secret")]).values(),
    ):
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            future.result()
        assert refused.value.args[0].name() == "GROUP_AUTHORIZATION_FAILED"


def test_a_share_group_moves_with_its_coordinator(brokkr_cluster):
    state = {"share.coordinator.state.topic.replication.factor": 2, "share.coordinator.state.topic.min.isr": 1}
    brokers = brokkr_cluster(2, offsets_topic_num_partitions=1, offsets_topic_replication_factor=2, **FAST, **state)
    admin = AdminClient({"bootstrap.servers": ",".join(b.bootstrap_servers for b in brokers)})
    admin.create_topics([NewTopic("q", 1, 2)])["q"].result(30)
    spec = request_spec(FIND_COORDINATOR)

    def coordinator() -> int:
        with RawClient(brokers[0].bootstrap_servers) as c:
            found = c.request(FIND_COORDINATOR, 4, spec.cls(key_type=0, coordinator_keys=["g"])).coordinators[0]
        return found.node_id if found.error_code == 0 else -1

    first = wait_for("a coordinator", lambda: (n := coordinator()) > 0 and n)
    leader = next(b for b in brokers if b.broker.node_id == first)
    other = next(b for b in brokers if b is not leader)
    with RawClient(leader.bootstrap_servers) as client:
        find_coordinator(client, "g")
        a, b = member_id(), member_id()
        epochs = {m: heartbeat(client, "g", m, 0, ["q"]).member_epoch for m in (a, b)}

        def both_assigned():
            for m in (a, b):  # a member learns of its new assignment at its next heartbeat
                epochs[m] = heartbeat(client, "g", m, epochs[m]).member_epoch
            d = describe(client, "g")
            return list(assigned(d).values()) == [{("q", 0)}] * 2 and d

        before = wait_for("both assigned", both_assigned)
    leader.stop()  # controlled shutdown: __consumer_offsets-0 moves to the other broker, which loads it
    with RawClient(other.bootstrap_servers) as client:
        find_coordinator(client, "g")
        after = describe(client, "g")
    assert assigned(after) == assigned(before) and assigned(after)[a] == {("q", 0)}
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
