"""The consumer group protocol's server-side assignors (``uniform``, ``range``) as pure
functions: balance, stickiness, heterogeneous subscriptions, members subscribed to
nothing, topics deleted or grown, and Kafka's range co-partitioning and static order."""

from __future__ import annotations

import random
import uuid

import pytest
from brokkr.plugins.groups.assignors import ASSIGNORS, MemberSpec, assignor_names, range_assign
from brokkr.plugins.groups.uniform_assignor import uniform_assign

T1, T2, T3 = (uuid.UUID(int=i) for i in (1, 2, 3))


def spec(*topics, assignment=None, instance_id=None) -> MemberSpec:
    return MemberSpec(frozenset(topics), {t: frozenset(ps) for t, ps in (assignment or {}).items()}, instance_id)


def sizes(result) -> list[int]:
    return [sum(map(len, a.values())) for a in result.values()]


def owners(result) -> dict[tuple[uuid.UUID, int], str]:
    """Each assigned partition's member; fails if one is assigned twice."""
    out = {}
    for member, assignment in result.items():
        for t, ps in assignment.items():
            for p in ps:
                assert (t, p) not in out, f"{t}-{p} assigned twice"
                out[(t, p)] = member
    return out


def check_complete(members, topics, result) -> None:
    """Every partition of a subscribed, existing topic is assigned to one of its subscribers."""
    assert set(result) == set(members)
    assigned = owners(result)
    expected = {(t, p) for s in members.values() for t in s.subscribed if t in topics for p in range(topics[t])}
    assert set(assigned) == expected
    for (t, _), member in assigned.items():
        assert t in members[member].subscribed


def moved(before, after) -> int:
    """Partitions taken from a member still in the group (new partitions, and those of
    members that left, do not count)."""
    a, b = owners(before), owners(after)
    return sum(1 for tp, m in a.items() if m in after and tp in b and b[tp] != m)


def again(members, result):
    """The same members with ``result`` as their current assignment."""
    return {m: MemberSpec(s.subscribed, result[m], s.instance_id) for m, s in members.items()}


# -- uniform, homogeneous ----------------------------------------------------------------


def test_uniform_balances_a_new_group():
    members = {m: spec(T1, T2) for m in ("a", "b", "c")}
    result = uniform_assign(members, {T1: 5, T2: 4})
    check_complete(members, {T1: 5, T2: 4}, result)
    assert sizes(result) == [3, 3, 3]
    assert result == uniform_assign(members, {T1: 5, T2: 4}), "deterministic"
    assert result["a"] == {T1: frozenset({0, 1, 2})}, "a new member gets a contiguous run"


def test_uniform_moves_only_what_balance_needs_when_a_member_joins_and_leaves():
    topics = {T1: 6}
    two = {m: spec(T1) for m in ("a", "b")}
    first = uniform_assign(two, topics)
    three = again(two, first) | {"c": spec(T1)}
    second = uniform_assign(three, topics)
    check_complete(three, topics, second)
    assert sizes(second) == [2, 2, 2] and moved(first, second) == 2
    assert all(second[m][T1] <= first[m][T1] for m in ("a", "b")), "a and b only give partitions up"
    back = again(three, second)
    del back["b"]
    third = uniform_assign(back, topics)
    check_complete(back, topics, third)
    assert sizes(third) == [3, 3] and moved(second, third) == 0
    assert all(third[m][T1] >= second[m][T1] for m in ("a", "c")), "a and c keep theirs and take b's"


def test_uniform_keeps_the_extra_partition_with_a_member_that_has_it():
    # 7 partitions over 3 members: one gets 3. The member already holding 3 keeps them.
    members = {"a": spec(T1, assignment={T1: {0, 1}}), "b": spec(T1, assignment={T1: {2, 3, 4}}), "c": spec(T1)}
    result = uniform_assign(members, {T1: 7})
    assert result["b"] == {T1: frozenset({2, 3, 4})} and result["a"] == {T1: frozenset({0, 1})}
    assert result["c"] == {T1: frozenset({5, 6})}


def test_uniform_is_stable_when_nothing_changed():
    members = {m: spec(T1, T2) for m in "abcd"}
    first = uniform_assign(members, {T1: 7, T2: 3})
    assert uniform_assign(again(members, first), {T1: 7, T2: 3}) == first


def test_members_subscribed_to_nothing_get_nothing():
    assert uniform_assign({"a": spec(), "b": spec()}, {T1: 3}) == {"a": {}, "b": {}}
    members = {"a": spec(T1), "b": spec()}
    result = uniform_assign(members, {T1: 3})
    assert result == {"a": {T1: frozenset({0, 1, 2})}, "b": {}}
    assert range_assign(members, {T1: 3}) == result
    assert uniform_assign({}, {T1: 3}) == {}


def test_added_partitions_are_spread_and_deleted_topics_dropped():
    members = {m: spec(T1, T2) for m in ("a", "b")}
    first = uniform_assign(members, {T1: 2, T2: 2})
    grown = uniform_assign(again(members, first), {T1: 4, T2: 2})
    check_complete(members, {T1: 4, T2: 2}, grown)
    assert sizes(grown) == [3, 3] and moved(first, grown) == 0
    gone = uniform_assign(again(members, grown), {T1: 4})  # T2 was deleted
    check_complete(members, {T1: 4}, gone)
    assert sizes(gone) == [2, 2] and all(T2 not in a for a in gone.values())


def test_partitions_beyond_a_topic_s_count_or_held_twice_are_dropped():
    members = {"a": spec(T1, assignment={T1: {0, 5}}), "b": spec(T1, assignment={T1: {0, 1}})}
    result = uniform_assign(members, {T1: 2})
    check_complete(members, {T1: 2}, result)
    assert result == {"a": {T1: frozenset({0})}, "b": {T1: frozenset({1})}}


def test_unsubscribed_topics_are_revoked():
    members = {"a": spec(T2, assignment={T1: {0, 1}}), "b": spec(T2)}
    result = uniform_assign(members, {T1: 2, T2: 2})
    assert all(T1 not in a for a in result.values()) and sizes(result) == [1, 1]


# -- uniform, heterogeneous --------------------------------------------------------------


def test_uniform_heterogeneous_gives_each_topic_to_its_subscribers_only():
    members = {"a": spec(T1, T2), "b": spec(T1), "c": spec(T2, T3)}
    topics = {T1: 4, T2: 4, T3: 2}
    result = uniform_assign(members, topics)
    check_complete(members, topics, result)
    assert sorted(sizes(result)) == [3, 3, 4]
    assert uniform_assign(again(members, result), topics) == result, "stable when nothing changed"


def test_uniform_heterogeneous_rebalances_when_a_subscriber_arrives():
    topics = {T1: 6, T2: 2}
    members = {"a": spec(T1, T2), "b": spec(T2)}
    first = uniform_assign(members, topics)
    assert first["a"][T1] == frozenset(range(6))
    joined = again(members, first) | {"c": spec(T1)}
    second = uniform_assign(joined, topics)
    check_complete(joined, topics, second)
    assert max(sizes(second)) - min(sizes(second)) <= 1
    assert moved(first, second) <= 3


@pytest.mark.parametrize("seed", range(40))
def test_uniform_invariants_on_random_groups(seed):
    rng = random.Random(seed)
    topic_ids = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(rng.randint(1, 5))]
    topics = {t: rng.randint(1, 12) for t in topic_ids}
    members = {}
    for i in range(rng.randint(1, 7)):
        subs = frozenset(rng.sample(topic_ids, rng.randint(0, len(topic_ids))))
        members[f"m{i}"] = MemberSpec(subs)
    first = uniform_assign(members, topics)
    check_complete(members, topics, first)
    subscribed = {s.subscribed for s in members.values()}
    if len(subscribed) == 1:
        assert max(sizes(first)) - min(sizes(first)) <= 1
    else:  # per topic: a subscriber holding some of it has at most one more than any other subscriber
        size = {m: n for m, n in zip(first, sizes(first), strict=True)}
        for t in topics:
            subs = [m for m, s in members.items() if t in s.subscribed]
            holders = [m for m in subs if t in first[m]]
            if holders:
                assert max(size[m] for m in holders) - min(size[m] for m in subs) <= 1
    assert uniform_assign(again(members, first), topics) == first
    # A member leaves: the others keep everything they had.
    if len(members) > 1:
        leaving = rng.choice(list(members))
        rest = {m: s for m, s in again(members, first).items() if m != leaving}
        after = uniform_assign(rest, topics)
        check_complete(rest, topics, after)
        if len(subscribed) == 1:
            assert all(after[m].get(t, frozenset()) >= ps for m in rest for t, ps in first[m].items())


# -- range --------------------------------------------------------------------------------


def test_range_co_partitions_topics_of_equal_size():
    members = {"m1": spec(T1, T2), "m0": spec(T1, T2)}
    result = range_assign(members, {T1: 3, T2: 3})
    assert result == {
        "m0": {T1: frozenset({0, 1}), T2: frozenset({0, 1})},
        "m1": {T1: frozenset({2}), T2: frozenset({2})},
    }


def test_range_orders_static_members_first_by_instance_id():
    members = {
        "z": spec(T1),
        "b": spec(T1, instance_id="i2"),
        "a": spec(T1, instance_id="i1"),
    }
    result = range_assign(members, {T1: 5})
    assert result == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}, "z": {T1: frozenset({4})}}
    # A static member rejoining under a new member id keeps its range.
    members["a2"] = spec(T1, instance_id="i1")
    del members["a"]
    assert range_assign(members, {T1: 5})["a2"] == {T1: frozenset({0, 1})}


def test_range_heterogeneous_and_more_members_than_partitions():
    members = {"a": spec(T1), "b": spec(T1, T2), "c": spec(T2)}
    result = range_assign(members, {T1: 3, T2: 1})
    assert result == {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2}), T2: frozenset({0})}, "c": {}}
    check_complete(members, {T1: 3, T2: 1}, result)


def test_assignor_names_take_kafka_s_class_names():
    assert assignor_names(["org.apache.kafka.coordinator.group.assignor.UniformAssignor", "range"]) == [
        "uniform",
        "range",
    ]
    assert set(ASSIGNORS) == {"uniform", "range"}
    with pytest.raises(ValueError):
        assignor_names(["sticky"])
