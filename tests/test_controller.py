"""The controller's decisions as pure functions: first states, elections from the ISR
(never unclean), ISR narrowing, ElectLeaders' preferred and unclean elections, and which
partitions an imbalanced broker takes back."""

from __future__ import annotations

import uuid

import pytest
from brokkr.core.cluster import PartitionState, TopicAssignment
from brokkr.core.controller import PREFERRED, UNCLEAN, Controller, elect, imbalanced, place_replicas
from brokkr.core.errors import ErrorCode

decide = Controller.decide


def state(leader, epoch, isr, version=3):
    return PartitionState(leader, epoch, tuple(isr), 1, version)


def test_a_new_partition_is_led_by_its_first_live_replica():
    assert decide((1, 2, 3), None, {2, 3}, 5) == PartitionState(2, 0, (2, 3), 5, 0)
    assert decide((1, 2), None, set(), 5) == PartitionState(-1, 0, (1,), 5, 0)


def test_a_lost_leader_is_replaced_from_the_isr_with_a_new_epoch():
    assert decide((1, 2, 3), state(1, 4, [1, 3]), {2, 3}, 5) == PartitionState(3, 5, (3,), 5, 3)
    # 2 is live but was not in sync: no unclean election, the partition goes offline
    assert decide((1, 2, 3), state(1, 4, [1]), {2, 3}, 5) == PartitionState(-1, 5, (1,), 5, 3)
    assert decide((1, 2, 3), state(-1, 5, [1]), {2, 3}, 5) is None
    assert decide((1, 2, 3), state(-1, 5, [1]), {1, 2}, 5) == PartitionState(1, 6, (1,), 5, 3)


def test_the_isr_keeps_only_live_replicas_of_the_partition():
    assert decide((1, 2, 3), state(1, 4, [1, 2, 3]), {1, 2, 3}, 5) is None
    assert decide((1, 2, 3), state(1, 4, [1, 2, 3]), {1, 3}, 5) == PartitionState(1, 4, (1, 3), 5, 3)
    assert decide((1, 3), state(1, 4, [1, 2, 3]), {1, 2, 3}, 5) == PartitionState(1, 4, (1, 3), 5, 3)


def test_elect_leaders():
    assert elect(PREFERRED, (1, 2), state(1, 4, [1, 2]), {1, 2}, 5) == (None, ErrorCode.ELECTION_NOT_NEEDED)
    assert elect(PREFERRED, (1, 2), state(2, 4, [2]), {1, 2}, 5) == (None, ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE)
    assert elect(PREFERRED, (1, 2), state(2, 4, [1, 2]), {1, 2}, 5) == (PartitionState(1, 5, (1, 2), 5, 3), 0)
    assert elect(UNCLEAN, (1, 2), state(1, 4, [1]), {1, 2}, 5) == (None, ErrorCode.ELECTION_NOT_NEEDED)
    assert elect(UNCLEAN, (1, 2), state(-1, 4, [1]), {2}, 5) == (PartitionState(2, 5, (2,), 5, 3), 0)
    assert elect(UNCLEAN, (1, 2), state(-1, 4, [1]), set(), 5) == (None, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE)


def test_an_imbalanced_broker_takes_back_the_partitions_it_prefers_and_is_in_sync_for():
    topic = TopicAssignment("t", uuid.uuid4(), {0: (1, 2), 1: (1, 2), 2: (2, 1), 3: (1, 2)})
    states = {0: state(2, 1, [1, 2]), 1: state(2, 1, [2]), 2: state(2, 1, [1, 2]), 3: state(1, 1, [1, 2])}
    moves = imbalanced({"t": topic}, lambda name, p: states[p], {1, 2}, 10)
    assert moves == [("t", 0)], "partition 1's preferred replica is not in sync"
    assert imbalanced({"t": topic}, lambda name, p: states[p], {1, 2}, 90) == []


def test_replicas_are_placed_as_kafka_places_them():
    # AdminUtils' own example: 5 brokers, 10 partitions, 3 replicas, start 0, shift 0
    placed = place_replicas(dict.fromkeys(range(5)), range(10), 3, 0, 0)
    assert placed[0] == (0, 1, 2) and placed[4] == (4, 0, 1)
    assert placed[5] == (0, 2, 3) and placed[9] == (4, 1, 2), "the second replica shifts after each round"
    leaders = [replicas[0] for replicas in placed.values()]
    assert sorted(leaders) == sorted(list(range(5)) * 2)


def test_replicas_spread_over_racks():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    # Kafka's example: the rack-alternated list is 0, 3, 1, 5, 4, 2
    placed = place_replicas(racks, range(6), 3, 0, 0)
    assert [placed[p] for p in range(6)] == [(0, 3, 1), (3, 1, 5), (1, 5, 4), (5, 4, 2), (4, 2, 0), (2, 0, 3)]
    for start in range(6):
        for shift in range(6):
            for replicas in place_replicas(racks, range(12), 3, start, shift).values():
                assert len(set(replicas)) == 3 and len({racks[r] for r in replicas}) == 3
            for replicas in place_replicas(racks, range(12), 4, start, shift).values():
                assert len(set(replicas)) == 4 and len({racks[r] for r in replicas}) == 3
    # brokers without a rack count as one rack
    mixed = place_replicas({1: "a", 2: None, 3: "a", 4: None}, range(8), 2, 1, 2)
    assert all({r % 2 for r in replicas} == {0, 1} for replicas in mixed.values())
    with pytest.raises(ValueError):
        place_replicas(racks, range(1), 7, 0, 0)
