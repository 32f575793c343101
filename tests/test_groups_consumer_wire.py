"""The consumer group protocol (KIP-848) on raw sockets: ConsumerGroupHeartbeat and
ConsumerGroupDescribe with Kafka's error codes for each misstep, authorization, the
records written to ``__consumer_offsets`` and the group they rebuild after a restart,
session expiry on the broker's clock, and the group as ListGroups, OffsetCommit and
DeleteGroups see it."""

from __future__ import annotations

import time

import pytest
from authorizers import Deny
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.client import RawClient
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import read_all_records
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.groups.consumer_group import ConsumerGroup
from brokkr.plugins.groups.coordinator import OFFSETS_TOPIC
from brokkr.plugins.groups.records import decode_record

HEARTBEAT, DESCRIBE = 68, 69
OFFSET_COMMIT, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST, DELETE_GROUPS, API_VERSIONS = 8, 10, 15, 16, 42, 18
#: Short sessions, so that a silent member expires within a test.
SHORT = {"group.consumer.session.timeout.ms": 1500, "group.consumer.min.session.timeout.ms": 1000}


def req(api_key: int, **fields):
    return request_spec(api_key).cls(**fields)


def join(c: RawClient, group: str = "g", member_id: str = "m1", version: int = 1, **fields):
    body = dict(
        group_id=group,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"],
        topic_partitions=[],
    )
    body.update(fields)
    return c.request(HEARTBEAT, version, req(HEARTBEAT, **body))


def beat(c: RawClient, member_id: str, epoch: int, group: str = "g", owned=None, version: int = 1, **fields):
    owned_struct = request_spec(HEARTBEAT).struct("TopicPartitions")
    topic_partitions = None if owned is None else [owned_struct(topic_id=t, partitions=ps) for t, ps in owned.items()]
    body = req(HEARTBEAT, group_id=group, member_id=member_id, member_epoch=epoch, topic_partitions=topic_partitions)
    for k, v in fields.items():
        setattr(body, k, v)
    return c.request(HEARTBEAT, version, body)


def owned(response) -> dict:
    return {tp.topic_id: list(tp.partitions) for tp in response.assignment.topic_partitions}


def start(factory, config=None, plugins=()):
    b = factory(config or {}, plugins=plugins)
    b.call(b.broker.create_topic, "t", 4)
    with RawClient(b.bootstrap_servers) as c:  # creates __consumer_offsets
        c.request(FIND_COORDINATOR, 3, req(FIND_COORDINATOR, key="g", key_type=0))
    b.call(coordinator_of(b.broker).wait_loaded)
    return b


@pytest.fixture
def broker(brokkr_broker_factory):
    return start(brokkr_broker_factory)


def test_members_join_share_the_partitions_and_leave(broker):
    topic_id = broker.broker.topics["t"].topic_id
    with RawClient(broker.bootstrap_servers) as c:
        first = join(c, version=0, member_id="")
        assert (first.error_code, first.member_epoch, first.heartbeat_interval_ms) == (0, 1, 5000)
        assert first.member_id and owned(first) == {topic_id: [0, 1, 2, 3]}
        a = first.member_id
        assert beat(c, a, 1).assignment is None, "an unchanged assignment is not repeated"
        second = join(c, member_id="m2")
        assert (second.member_epoch, owned(second)) == (2, {}), "m2 waits for a to revoke"
        revoke = beat(c, a, 1, owned={topic_id: [0, 1, 2, 3]})
        assert revoke.member_epoch == 1 and len(owned(revoke)[topic_id]) == 2
        kept = owned(revoke)[topic_id]
        acknowledged = beat(c, a, 1, owned={topic_id: kept})
        assert acknowledged.member_epoch == 2
        given = beat(c, "m2", 2, owned={})
        assert sorted(kept + owned(given)[topic_id]) == [0, 1, 2, 3]
        described = c.request(DESCRIBE, 0, req(DESCRIBE, group_ids=["g"], include_authorized_operations=True))
        (g,) = described.groups
        assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
            0,
            "Stable",
            2,
            2,
            "uniform",
        )
        assert [m.member_id for m in g.members] == sorted([a, "m2"])
        member = next(m for m in g.members if m.member_id == "m2")
        assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [
            ("t", owned(given)[topic_id])
        ]
        assert member.target_assignment == member.assignment and member.client_host == "/127.0.0.1"
        assert g.authorized_operations == sum(1 << op for op in (AclOperation.READ, AclOperation.DESCRIBE, 6))
        (g1,) = c.request(DESCRIBE, 1, req(DESCRIBE, group_ids=["g"])).groups
        assert [(m.member_id, m.member_type) for m in g1.members] == [(m.member_id, 1) for m in g.members], (
            "v1 (KIP-1099): consumer members"
        )
        (classic,) = c.request(DESCRIBE_GROUPS, 6, req(DESCRIBE_GROUPS, groups=["g"])).groups
        assert (classic.error_code, classic.error_message, classic.group_state) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            "Group g is not a classic group.",
            "Dead",
        ), "DescribeGroups v6 (KIP-1043) describes classic groups only"
        listed = c.request(LIST, 5, req(LIST, types_filter=["consumer"]))
        assert [(x.group_id, x.group_state, x.group_type, x.protocol_type) for x in listed.groups] == [
            ("g", "Stable", "consumer", "consumer")
        ]
        left = beat(c, "m2", -1)
        assert (left.error_code, left.member_id, left.member_epoch) == (0, "m2", -1)
        alone = beat(c, a, 2, owned={topic_id: kept})
        assert (alone.member_epoch, owned(alone)) == (3, {topic_id: [0, 1, 2, 3]})


@pytest.mark.parametrize(
    "fields, error",
    [
        (dict(member_id=""), ErrorCode.INVALID_REQUEST),
        (dict(rebalance_timeout_ms=-1), ErrorCode.INVALID_REQUEST),
        (dict(topic_partitions=None), ErrorCode.INVALID_REQUEST),
        (dict(server_assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR),
        (dict(subscribed_topic_names=None, subscribed_topic_regex="t(("), ErrorCode.INVALID_REGULAR_EXPRESSION),
        (dict(member_epoch=-3), ErrorCode.INVALID_REQUEST),
    ],
)
def test_bad_heartbeats_get_kafka_s_errors(broker, fields, error):
    with RawClient(broker.bootstrap_servers) as c:
        response = join(c, **fields)
        assert response.error_code == error and response.error_message
        assert response.member_id is None and response.assignment is None


def test_fenced_unknown_and_unreleased_members(broker):
    with RawClient(broker.bootstrap_servers) as c:
        assert join(c).member_epoch == 1
        assert beat(c, "m1", 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert beat(c, "ghost", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert beat(c, "m1", 1, group="nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert join(c, member_id="s1", instance_id="i").member_epoch == 2
        taken = join(c, member_id="s2", instance_id="i")
        assert taken.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
        assert beat(c, "s2", 2, instance_id="i").error_code == ErrorCode.FENCED_INSTANCE_ID
        assert beat(c, "s1", -2, instance_id="i").member_epoch == -2
        assert join(c, member_id="s2", instance_id="i").error_code == 0, "released by the temporary leave"


def test_the_group_size_is_bounded(brokkr_broker_factory):
    b = start(brokkr_broker_factory, {"group.consumer.max.size": 1})
    with RawClient(b.bootstrap_servers) as c:
        assert join(c).error_code == 0
        assert join(c, member_id="m2").error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def deny_secrets(a) -> bool:
    """Denies everything on group "secret" and on topic "hidden"."""
    return (a.resource_type, a.resource_name) in ((ResourceType.GROUP, "secret"), (ResourceType.TOPIC, "hidden"))


def test_groups_and_topics_are_authorized(brokkr_broker_factory):
    b = start(brokkr_broker_factory, plugins=(Deny(deny_secrets),))
    b.call(b.broker.create_topic, "hidden", 1)
    with RawClient(b.bootstrap_servers) as c:
        assert join(c, group="secret").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert join(c, subscribed_topic_names=["t", "hidden"]).error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        everything = join(c, member_id="r", subscribed_topic_names=None, subscribed_topic_regex=".*")
        assert everything.error_code == 0, everything.error_message
        names = {b.broker.topics_by_id[t].name for t in owned(everything)}
        assert "hidden" not in names and "t" in names, "a regex yields only what the member may describe"
        described = c.request(DESCRIBE, 0, req(DESCRIBE, group_ids=["secret", "g", "none", ""]))
        assert [g.error_code for g in described.groups] == [
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            0,
            ErrorCode.GROUP_ID_NOT_FOUND,
            ErrorCode.INVALID_GROUP_ID,
        ]


def test_describing_a_group_with_a_hidden_topic_fails(brokkr_broker_factory):
    b = start(brokkr_broker_factory)
    b.call(b.broker.create_topic, "hidden", 1)
    with RawClient(b.bootstrap_servers) as c:
        assert join(c, subscribed_topic_names=["hidden"]).error_code == 0
    b.broker.pm.register(Deny(deny_secrets), name="deny-secrets")
    with RawClient(b.bootstrap_servers) as c:
        (g,) = c.request(DESCRIBE, 0, req(DESCRIBE, group_ids=["g"])).groups
    assert (g.error_code, g.members) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])


def test_a_silent_member_is_fenced_when_its_session_expires(brokkr_broker_factory):
    b = start(brokkr_broker_factory, SHORT)
    with RawClient(b.bootstrap_servers) as c:
        join(c, member_id="quiet")
        second = join(c, member_id="busy")
        deadline = time.monotonic() + 10
        while "quiet" in b.call(lambda: dict(coordinator_of(b.broker).groups["g"].members)):
            assert time.monotonic() < deadline, "the silent member was not fenced"
            beat(c, "busy", second.member_epoch)
            time.sleep(0.2)
        assert beat(c, "quiet", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_commits_delete_and_the_group_after_a_restart(brokkr_broker_factory, tmp_path):
    config = {"log.dirs": str(tmp_path / "data")}
    b = start(brokkr_broker_factory, config)
    topic = request_spec(OFFSET_COMMIT).struct("OffsetCommitRequestTopic")
    part = request_spec(OFFSET_COMMIT).struct("OffsetCommitRequestPartition")

    def commit(c, epoch, member="m1", version=9):
        body = req(
            OFFSET_COMMIT,
            group_id="g",
            generation_id_or_member_epoch=epoch,
            member_id=member,
            topics=[topic(name="t", partitions=[part(partition_index=0, committed_offset=5)])],
        )
        return c.request(OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code

    with RawClient(b.bootstrap_servers) as c:
        joined = join(c)
        assert commit(c, 1) == 0
        assert commit(c, 0) == ErrorCode.STALE_MEMBER_EPOCH
        assert commit(c, 1, version=8) == ErrorCode.UNSUPPORTED_VERSION
        assert commit(c, 1, member="other") == ErrorCode.UNKNOWN_MEMBER_ID
        group = request_spec(9).struct("OffsetFetchRequestGroup")

        def fetch(member, epoch):
            body = req(9, groups=[group(group_id="g", member_id=member, member_epoch=epoch, topics=None)])
            return c.request(9, 9, body).groups[0]

        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in fetch("m1", 1).topics] == [("t", [5])]
        assert fetch("m1", 0).error_code == ErrorCode.STALE_MEMBER_EPOCH
        assert fetch("other", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert fetch(None, -1).error_code == 0, "an admin fetch names no member"
        deleted = c.request(DELETE_GROUPS, 2, req(DELETE_GROUPS, groups_names=["g"]))
        assert deleted.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    index = coordinator_of(b.broker).partition_for("g")
    b.stop()
    log = tmp_path / "data" / f"{OFFSETS_TOPIC}-{index}" / "00000000000000000000.log"
    types = {decode_record(r.key, r.value).type for r in read_all_records(log.read_bytes())}
    assert {"ConsumerGroupMetadata", "ConsumerGroupCurrentMemberAssignment", "OffsetCommit"} <= types
    again = brokkr_broker_factory(config)
    again.call(coordinator_of(again.broker).wait_loaded)
    with RawClient(again.bootstrap_servers) as c:
        carry_on = beat(c, "m1", 1, owned=owned(joined))
        assert (carry_on.error_code, carry_on.member_epoch) == (0, 1), "the member carries on after the restart"
        assert beat(c, "m1", -1).error_code == 0
        deleted = c.request(DELETE_GROUPS, 2, req(DELETE_GROUPS, groups_names=["g"]))
        assert deleted.results[0].error_code == 0
        assert not isinstance(again.call(lambda: coordinator_of(again.broker).groups.get("g")), ConsumerGroup)
        (g,) = c.request(DESCRIBE, 0, req(DESCRIBE, group_ids=["g"])).groups
        assert g.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_the_apis_are_advertised_unless_the_protocol_is_turned_off(brokkr_broker_factory):
    def versions(b):
        with RawClient(b.bootstrap_servers) as c:
            keys = c.request(API_VERSIONS, 3, req(API_VERSIONS, client_software_name="t", client_software_version="1"))
        return {k.api_key: (k.min_version, k.max_version) for k in keys.api_keys}

    served = versions(brokkr_broker_factory())
    assert (served[HEARTBEAT], served[DESCRIBE]) == ((0, 1), (0, 1))
    classic_only = versions(brokkr_broker_factory({"group.coordinator.rebalance.protocols": "classic"}))
    assert HEARTBEAT not in classic_only and DESCRIBE not in classic_only
