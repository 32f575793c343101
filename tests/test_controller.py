"""The controller's decisions as pure functions: first states, elections from the ISR
(never unclean), ISR narrowing, ElectLeaders' preferred and unclean elections, and which
partitions an imbalanced broker takes back."""

from __future__ import annotations

import uuid

from brokkr.core.cluster import PartitionState, TopicAssignment
from brokkr.core.controller import PREFERRED, UNCLEAN, Controller, elect, imbalanced
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
