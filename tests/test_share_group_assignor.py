"""The ``simple`` share assignor's rules (Kafka's SimpleAssignor): a partition goes to
several members when there are more members than partitions, the places are spread evenly,
a member keeps what it had where that still fits, and members subscribed to different
topics share each topic among its own subscribers."""

from __future__ import annotations

import random
import uuid
from collections import Counter

from brokkr.plugins.groups.share_assignor import assign

T, U = uuid.UUID(int=1), uuid.UUID(int=2)


def places(result) -> Counter:
    return Counter((t, p) for a in result.values() for t, ps in a.items() for p in ps)


def test_more_members_than_partitions_share_each_partition_evenly():
    members = {m: frozenset({T}) for m in "abcde"}
    result = assign(members, {T: frozenset({0, 1})}, {})
    assert places(result) == {(T, 0): 3, (T, 1): 3}, "ceil(5/2) = 3 members per partition"
    assert sorted(len(a[T]) for a in result.values()) == [1, 1, 1, 1, 2]
    assert all(len(a[T]) >= 1 for a in result.values()), "every member reads something"


def test_fewer_members_than_partitions_split_them_and_keep_what_they_had():
    partitions = {T: frozenset(range(6))}
    first = assign({"a": frozenset({T}), "b": frozenset({T})}, partitions, {})
    assert places(first) == {(T, p): 1 for p in range(6)} and {len(a[T]) for a in first.values()} == {3}
    second = assign({m: frozenset({T}) for m in "abc"}, partitions, first)
    assert places(second) == {(T, p): 1 for p in range(6)} and {len(a[T]) for a in second.values()} == {2}
    for m in "ab":
        assert second[m][T] <= first[m][T], "a member keeps a part of what it had, nothing moves between the two"


def test_only_initialized_partitions_are_assigned_and_topics_go_to_their_subscribers():
    result = assign({"a": frozenset({T}), "b": frozenset({T, U})}, {T: frozenset({0, 1}), U: frozenset()}, {})
    assert places(result) == {(T, 0): 1, (T, 1): 1} and U not in result["b"]
    result = assign({"a": frozenset({T}), "b": frozenset({T, U})}, {T: frozenset({0}), U: frozenset({0, 1})}, {})
    assert result["a"] == {T: frozenset({0})} and result["b"] == {T: frozenset({0}), U: frozenset({0, 1})}


def test_every_partition_gets_its_share_of_members_whatever_they_held_before():
    rng = random.Random(932)
    for _ in range(500):
        members, partitions = rng.randint(1, 7), rng.randint(1, 7)
        names = [f"m{i}" for i in range(members)]
        before = {
            m: {T: frozenset(rng.sample(range(partitions + 2), rng.randint(0, min(partitions + 2, 4))))} for m in names
        }
        result = assign(dict.fromkeys(names, frozenset({T})), {T: frozenset(range(partitions))}, before)
        sharing = -(-members // partitions)
        assert places(result) == {(T, p): sharing for p in range(partitions)}, (before, result)
        loads = [len(a.get(T, ())) for a in result.values()]
        assert max(loads) - min(loads) <= 1, (before, result)


def test_assigning_again_from_its_own_result_moves_nothing():
    """Stickiness: once every partition has its members, a new target assignment computed
    from the last one (a member's unrelated change bumped the epoch) is the same."""
    rng = random.Random(38)
    topics = [uuid.UUID(int=i) for i in range(1, 5)]
    for _ in range(1500):
        names = [f"m{i}" for i in range(rng.randint(1, 9))]
        partitions = {t: frozenset(range(rng.randint(0, 7))) for t in topics}
        subscriptions = {m: frozenset(rng.sample(topics, rng.randint(1, 3))) for m in names}
        before = {
            m: {t: frozenset(rng.sample(range(8), rng.randint(0, 4))) for t in rng.sample(topics, 2)} for m in names
        }
        result = assign(subscriptions, partitions, before)
        assert assign(subscriptions, partitions, result) == result, (subscriptions, partitions, before)
