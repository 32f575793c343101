"""The consumer group protocol (KIP-848) as a state machine, with fake time and no sockets:
joining, heartbeats, reconciliation that revokes before it reassigns, leaving (also
static members' temporary leave), fencing, Kafka's validation errors, session and
rebalance timeouts, topics that change, regex subscriptions, and groups rebuilt from
their records as a loading partition rebuilds them."""

from __future__ import annotations

import itertools
import random
import time
import uuid

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.plugins.groups.classic import ClassicGroup
from brokkr.plugins.groups.consumer_group import ConsumerGroupState
from brokkr.plugins.groups.consumer_member import MemberState
from brokkr.plugins.groups.records import decode_record

from tests.consumer_shard import Client, FakeTopics, Shard

JOIN = dict(member_epoch=0, rebalance_timeout_ms=30000, subscribed_topic_names=["t"], topic_partitions={})


def run(clients: list[Client], rounds: int = 20) -> None:
    """Heartbeat every client in turn until nothing changes; at every step no partition is
    owned by two clients (the protocol's safety property)."""
    last = None
    for _ in range(rounds):
        for c in clients:
            c.beat()
            owned = [(t, p) for x in clients for t, ps in x.owned.items() for p in ps]
            assert len(owned) == len(set(owned)), "a partition is owned twice"
        state = [(c.epoch, dict(c.owned)) for c in clients]
        if state == last:
            return
        last = state
    raise AssertionError("the group did not settle")


def test_the_first_member_gets_every_partition():
    shard = Shard()
    result = shard.heartbeat(api_version=0, **JOIN)
    assert result.member_id and result.member_epoch == 1 and result.heartbeat_interval_ms == 5000
    assert result.assignment == {shard.topics.id("t"): frozenset(range(6))}
    group = shard.group()
    assert (group.group_epoch, group.assignment_epoch, group.state) == (1, 1, ConsumerGroupState.STABLE)
    # A heartbeat that changes nothing writes nothing and answers no assignment.
    again = shard.heartbeat(member_id=result.member_id, member_epoch=1)
    assert again.assignment is None and again.member_epoch == 1
    assert len(shard.log) == 6


def test_partitions_are_revoked_before_they_are_given_to_a_new_member():
    shard = Shard()
    a = Client(shard)
    a.beat()
    assert a.partitions() == set(range(6))
    b = Client(shard)
    first = b.beat()
    assert first.member_epoch == 2 and b.partitions() == set(), "b waits: a still holds its partitions"
    assert shard.group().members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    assert shard.group().state is ConsumerGroupState.RECONCILING
    a.beat()  # told to give up half: stays in epoch 1 until it acknowledges
    assert a.epoch == 1 and len(a.partitions()) == 3
    assert shard.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    b.beat()
    assert b.partitions() == set(), "not before a acknowledged"
    run([a, b])
    assert a.partitions() | b.partitions() == set(range(6)) and len(b.partitions()) == 3
    assert a.epoch == b.epoch == 2 and shard.group().state is ConsumerGroupState.STABLE


def test_a_lost_answer_is_forgiven_with_the_previous_epoch():
    shard = Shard()
    a = Client(shard)
    a.beat()
    Client(shard).beat()
    result = shard.heartbeat(member_id=a.member_id, member_epoch=1, topic_partitions={shard.topics.id("t"): {0, 1, 2}})
    assert result.member_epoch == 2
    # The answer with epoch 2 was lost: epoch 1 again, with a subset of its partitions, is fine.
    again = shard.heartbeat(member_id=a.member_id, member_epoch=1, topic_partitions={shard.topics.id("t"): {0, 1}})
    assert again.member_epoch == 2
    # Not with a partition it does not have, nor from an older epoch.
    assert shard.error(member_id=a.member_id, member_epoch=1, topic_partitions={shard.topics.id("t"): {5}}).code == (
        ErrorCode.FENCED_MEMBER_EPOCH
    )
    assert shard.error(member_id=a.member_id, member_epoch=3).code == ErrorCode.FENCED_MEMBER_EPOCH
    # Rejoining with epoch 0 under a member id the group still has is fenced too, as in Kafka.
    rejoin = {k: v for k, v in JOIN.items() if k != "member_epoch"}
    assert shard.error(member_id=a.member_id, member_epoch=0, **rejoin).code == ErrorCode.FENCED_MEMBER_EPOCH


def test_leaving_moves_the_partitions_and_bumps_the_epoch():
    shard = Shard()
    a, b = Client(shard), Client(shard)
    run([a, b])
    left = b.leave()
    assert (left.member_id, left.member_epoch) == (b.member_id, -1)
    group = shard.group()
    assert b.member_id not in group.members and group.state is ConsumerGroupState.ASSIGNING
    assert b.member_id not in group.target_assignment
    run([a])
    assert a.partitions() == set(range(6)) and a.epoch == 3
    a.leave()
    assert shard.group().state is ConsumerGroupState.EMPTY and not shard.group().members


def test_unknown_members_groups_and_epochs_are_refused():
    shard = Shard()
    a = Client(shard)
    a.beat()
    assert shard.error(member_id="nobody", member_epoch=1).code == ErrorCode.UNKNOWN_MEMBER_ID
    assert shard.error(group_id="other", member_id="x", member_epoch=1).code == ErrorCode.GROUP_ID_NOT_FOUND
    assert shard.error(group_id="other", member_id="x", member_epoch=-1).code == ErrorCode.GROUP_ID_NOT_FOUND
    assert shard.error(member_id="nobody", member_epoch=-1).code == ErrorCode.UNKNOWN_MEMBER_ID
    shard.groups["classic"] = ClassicGroup("classic")
    shard.groups["classic"].members["m"] = object()
    assert shard.error(group_id="classic", member_id="m", **JOIN).code == ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize(
    "fields, version, message",
    [
        (dict(member_epoch=1), 0, "MemberId can't be empty."),
        (dict(JOIN), 1, "MemberId can't be empty."),  # KIP-1082: v1 clients make their own id
        (dict(JOIN, member_id="m", group_id=" "), 1, "GroupId can't be empty."),
        (dict(JOIN, member_id="m", instance_id=""), 1, "InstanceId can't be empty."),
        (dict(JOIN, member_id="m", rack_id=" \t"), 1, "RackId can't be empty."),
        (
            dict(JOIN, member_id="m", rebalance_timeout_ms=-1),
            1,
            "RebalanceTimeoutMs must be provided in first request.",
        ),
        (dict(JOIN, member_id="m", topic_partitions=None), 1, "TopicPartitions must be empty when (re-)joining."),
        (dict(JOIN, member_id="m", topic_partitions={"x": {0}}), 1, "TopicPartitions must be empty when (re-)joining."),
        (
            dict(JOIN, member_id="m", subscribed_topic_names=[]),
            1,
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
        ),
        (dict(member_id="m", member_epoch=-2), 1, "InstanceId can't be null."),
        (dict(member_id="m", member_epoch=-3), 1, "MemberEpoch is invalid."),
    ],
)
def test_invalid_requests_get_kafka_s_messages(fields, version, message):
    if isinstance(fields.get("topic_partitions"), dict) and "x" in fields["topic_partitions"]:
        fields["topic_partitions"] = {uuid.UUID(int=1): {0}}
    error = Shard().error(api_version=version, **fields)
    assert (error.code, error.message) == (ErrorCode.INVALID_REQUEST, message)


def test_assignors_are_chosen_by_the_members():
    shard = Shard(topics=FakeTopics(t=4, u=4))
    assert shard.error(member_id="m", **JOIN, server_assignor="sticky").code == ErrorCode.UNSUPPORTED_ASSIGNOR
    a, b = Client(shard, ["t", "u"], "m1", assignor="range"), Client(shard, ["t", "u"], "m2", assignor="range")
    run([a, b])
    # range co-partitions: the same partition numbers of both topics.
    assert a.partitions("t") == a.partitions("u") == {0, 1} and b.partitions("t") == {2, 3}


def test_the_group_size_is_bounded():
    shard = Shard(max_size=2)
    a, b = Client(shard), Client(shard)
    run([a, b])
    error = shard.error(member_id="third", **JOIN)
    assert error.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    a.beat()  # members already in keep heartbeating


def test_static_members_leave_for_now_and_come_back_with_their_partitions():
    shard = Shard()
    a, b = Client(shard, instance_id="i-a"), Client(shard, instance_id="i-b")
    run([a, b])
    before = a.partitions()
    gone = a.leave(epoch=-2)
    assert gone.member_epoch == -2
    group = shard.group()
    assert group.members[a.member_id].member_epoch == -2 and group.group_epoch == 2, "no rebalance"
    # Someone else cannot take the instance id while it is held...
    assert shard.error(member_id="x", instance_id="i-b", **JOIN).code == ErrorCode.UNRELEASED_INSTANCE_ID
    # ...but the instance itself rejoins under a new member id, with its partitions.
    back = Client(shard, instance_id="i-a", member_id="a-again")
    back.beat()
    assert back.partitions() == before and a.member_id not in shard.group().members
    run([back, b])
    assert back.partitions() == before and shard.group().group_epoch == 2
    # The old member id is fenced.
    assert shard.error(member_id=a.member_id, member_epoch=3, instance_id="i-a").code == ErrorCode.FENCED_INSTANCE_ID
    assert shard.error(member_id="y", member_epoch=3, instance_id="i-z").code == ErrorCode.UNKNOWN_MEMBER_ID
    # Leaving for good (-1) removes it.
    back.leave()
    assert "a-again" not in shard.group().members and "i-a" not in shard.group().static_members


def test_a_static_member_that_does_not_come_back_in_its_session_is_removed():
    shard = Shard()
    a, b = Client(shard, instance_id="i-a"), Client(shard)
    run([a, b])
    a.leave(epoch=-2)
    for _ in range(8):
        assert shard.advance(5000) == []
        b.beat()
    assert shard.group().members[a.member_id].member_epoch == -2, "its partitions wait for it"
    assert [e.member_id for e in shard.advance(5000)] == [a.member_id]
    run([b])
    assert b.partitions() == set(range(6)) and "i-a" not in shard.group().static_members


def test_a_member_whose_session_expires_is_fenced_and_its_partitions_move():
    shard = Shard(session_timeout_ms=45000)
    a, b = Client(shard), Client(shard)
    run([a, b])
    for _ in range(8):  # a keeps heartbeating, b goes silent
        assert shard.advance(5000) == []
        a.beat()
    fired = shard.advance(5000)  # 45 s since b's last heartbeat
    assert [e.member_id for e in fired] == [b.member_id]
    assert b.member_id not in shard.group().members
    run([a])
    assert a.partitions() == set(range(6))
    assert shard.error(member_id=b.member_id, member_epoch=b.epoch).code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_member_that_does_not_revoke_in_time_is_fenced():
    shard = Shard()
    a = Client(shard)
    a.beat()
    b = Client(shard)
    b.beat()
    # a is told to revoke, then heartbeats without ever letting go.
    shard.heartbeat(member_id=a.member_id, member_epoch=1, topic_partitions=a.owned)
    stubborn = {shard.topics.id("t"): frozenset(range(6))}
    for _ in range(5):
        shard.advance(5000)
        shard.heartbeat(member_id=a.member_id, member_epoch=1, topic_partitions=stubborn)
        b.beat()
    assert shard.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    fired = shard.advance(5001)
    assert [(e.kind, e.member_id) for e in fired] == [("rebalance", a.member_id)]
    run([b])
    assert b.partitions() == set(range(6))


def test_new_partitions_and_deleted_topics_rebalance_the_group():
    topics = FakeTopics(t=2, u=2)
    shard = Shard(topics)
    a, b = Client(shard, ["t", "u"]), Client(shard, ["t", "u"])
    run([a, b])
    epoch = shard.group().group_epoch
    topics.grow("t", 4)
    run([a, b])
    assert shard.group().group_epoch == epoch + 1
    assert a.partitions("t") | b.partitions("t") == {0, 1, 2, 3}
    topics.delete("u")
    run([a, b])
    assert all(len(c.owned) == 1 for c in (a, b)) and len(a.partitions("t")) == 2
    assert set(shard.group().subscription_metadata) == {"t"}


def test_members_subscribing_to_other_topics():
    shard = Shard(topics=FakeTopics(t=4, u=2))
    a, b, c = Client(shard, ["t", "u"]), Client(shard, ["t"]), Client(shard, ["nonexistent"])
    run([a, b, c])
    assert c.owned == {} and a.partitions("u") == {0, 1}
    assert len(a.partitions("t")) + len(b.partitions("t")) == 4
    assert abs(len(a.partitions("t")) + 2 - len(b.partitions("t"))) <= 1


def test_regex_subscriptions_follow_the_topics_that_match():
    topics = FakeTopics(**{"orders-1": 2, "orders-2": 2, "payments": 2})
    shard = Shard(topics)
    bad = shard.error(member_id="m", **dict(JOIN, subscribed_topic_names=None), subscribed_topic_regex="orders-(")
    assert bad.code == ErrorCode.INVALID_REGULAR_EXPRESSION and "orders-(" in bad.message
    a = Client(shard, regex="orders-.*")
    a.beat()
    assert a.partitions("orders-1") == a.partitions("orders-2") == {0, 1} and len(a.owned) == 2
    assert shard.group().members[a.member_id].subscribed_topic_regex == "orders-.*"
    topics.create("orders-3", 1)
    topics.create("xorders-4", 1)  # matched as a whole name: not by orders-.*
    run([a])
    assert a.partitions("orders-3") == {0} and len(a.owned) == 3


@pytest.mark.parametrize("regex", ["(?<=a)b", "(a)\\1", "(?=x)y"])
def test_regexes_are_re2_patterns_as_kafka_s_re2j(regex):
    """Look-arounds and back-references are not RE2 (nor RE2/J): Kafka refuses them."""
    shard = Shard(FakeTopics(t=1))
    bad = shard.error(member_id="m", **dict(JOIN, subscribed_topic_names=None), subscribed_topic_regex=regex)
    assert bad.code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_a_pathological_regex_matches_in_linear_time():
    """(a+)+$ against a long name of a's and a b takes exponential time in a backtracking
    engine; a member must not be able to stall the coordinator with it."""
    topics = FakeTopics(**{"a" * 200 + "b": 1, "aaa": 1})
    shard = Shard(topics)
    a = Client(shard, regex="(a+)+")
    start = time.monotonic()
    a.beat()
    assert time.monotonic() - start < 1.0
    assert a.partitions("aaa") == {0} and len(a.owned) == 1


def test_states_and_the_group_rebuilt_from_its_records():
    shard = Shard(topics=FakeTopics(t=5, u=3))
    clients = [Client(shard, ["t", "u"], instance_id=f"i{n}" if n % 2 else None) for n in range(3)]
    run(clients)
    clients[1].leave(epoch=-2)
    shard.heartbeat(member_id=clients[0].member_id, member_epoch=clients[0].epoch, topic_partitions={})
    rebuilt = shard.reloaded()
    live = shard.group()
    again = rebuilt["g"]
    for field in ("group_epoch", "assignment_epoch", "members", "target_assignment", "subscription_metadata"):
        assert getattr(again, field) == getattr(live, field), field
    for field in ("static_members", "subscribed_names", "server_assignors", "partition_epochs", "state"):
        assert getattr(again, field) == getattr(live, field), field


def test_an_empty_classic_group_gives_way_to_a_consumer_group():
    shard = Shard()
    shard.groups["g"] = ClassicGroup("g")  # a group that only held offsets
    result = shard.heartbeat(member_id="m", **JOIN)
    first = decode_record(*shard.log[0])
    assert (first.type, first.value) == ("GroupMetadata", None)
    assert result.member_epoch == 1 and shard.group().type == "consumer"


def test_records_are_what_kafka_writes():
    shard = Shard()
    shard.heartbeat(member_id="m", **JOIN)
    types = [decode_record(k, v).type for k, v in shard.log]
    assert types == [
        "ConsumerGroupMemberMetadata",
        "ConsumerGroupPartitionMetadata",
        "ConsumerGroupMetadata",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupTargetAssignmentMetadata",
        "ConsumerGroupCurrentMemberAssignment",
    ]
    member = decode_record(*shard.log[0]).value
    assert (member.client_id, member.client_host, member.subscribed_topic_names) == ("client", "/127.0.0.1", ["t"])
    assert member.rebalance_timeout_ms == 30000
    current = decode_record(*shard.log[-1]).value
    assert (current.member_epoch, current.previous_member_epoch, current.state) == (1, 0, 0)


@pytest.mark.parametrize("seed", range(12))
def test_random_joins_leaves_and_deaths_never_assign_a_partition_twice(seed):
    rng = random.Random(seed)
    shard = Shard(topics=FakeTopics(t=7, u=3))
    clients: list[Client] = []
    names = itertools.count()
    for _ in range(30):
        action = rng.random()
        if action < 0.4 or not clients:
            clients.append(Client(shard, rng.choice([["t"], ["u"], ["t", "u"]]), f"m{next(names)}"))
        elif action < 0.6:
            clients.pop(rng.randrange(len(clients))).leave()
        elif action < 0.7:  # dies: its session expires while the others heartbeat
            dead = clients.pop(rng.randrange(len(clients)))
            for _ in range(10):
                shard.advance(5000)
                for c in clients:
                    c.beat()
            assert dead.member_id not in shard.group().members
        for _ in range(rng.randint(1, 3)):
            for c in rng.sample(clients, len(clients)):
                c.beat()
                owned = [(t, p) for x in clients for t, ps in x.owned.items() for p in ps]
                assert len(owned) == len(set(owned)), "a partition is owned twice"
    run(clients, rounds=40)
    expected = {(shard.topics.id(n), p) for c in clients for n in c.topics for p in range(shard.topics.topics[n][1])}
    assert {(t, p) for c in clients for t, ps in c.owned.items() for p in ps} == expected
    assert shard.group().state is ConsumerGroupState.STABLE


def test_settings_have_kafka_s_defaults_and_bounds():
    from brokkr.core.errors import ConfigError
    from brokkr.plugins.groups.consumer_config import CONSUMER_CONFIGS, consumer_settings

    config = {d.name: d.default for d in CONSUMER_CONFIGS}
    settings = consumer_settings(config)
    assert (settings.session_timeout_ms, settings.heartbeat_interval_ms) == (45000, 5000)
    assert settings.assignors == ("uniform", "range") and settings.max_size == 2**31 - 1
    with pytest.raises(ConfigError, match="group.consumer.session.timeout.ms must be greater"):
        consumer_settings(config | {"group.consumer.session.timeout.ms": 6000})
    with pytest.raises(ConfigError, match="heartbeat.interval.ms must be greater"):
        consumer_settings(config | {"group.consumer.max.heartbeat.interval.ms": 4000})
    with pytest.raises(ConfigError, match="must contain classic"):
        consumer_settings(config | {"group.coordinator.rebalance.protocols": ["consumer"]})
    short = config | {"group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 1000}
    assert consumer_settings(short | {"group.consumer.assignors": ["range"]}).assignors == ("range",)
