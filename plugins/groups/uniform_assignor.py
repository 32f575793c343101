"""The ``uniform`` assignor (Kafka's UniformAssignor with its two builders,
UniformHomogeneousAssignmentBuilder and UniformHeterogeneousAssignmentBuilder).

Balance comes before stickiness. In a homogeneous group every member gets ``total //
members`` partitions and ``total % members`` of them one more; a member keeps what it has
up to its quota, and the rest (partitions nobody has, or that a member had over its
quota) fill the members below theirs, in partition order, so a new member gets a
contiguous run. The extra partitions go to the members that hold the most already (Kafka
leaves that to hash order), so that no more moves than needed.

In a heterogeneous group a member first keeps every partition of a topic it still
subscribes to; the free partitions are handed out topic by topic (topics with the most
partitions per subscriber first) to the least loaded subscriber; then, for up to 16
rounds over the topics with two or more subscribers, partitions move from a topic's most
loaded subscriber to its least loaded one until their counts differ by at most one.
Each move shrinks the sum of squared counts, so the loop ends even without the bound.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import uuid
from collections.abc import Mapping

from .assignor_spec import GroupAssignment, MemberSpec, is_homogeneous, subscriptions, to_assignment, valid_current

#: Kafka's MAX_ITERATION_COUNT of the heterogeneous balancing phase.
MAX_BALANCE_ROUNDS = 16


def uniform_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> GroupAssignment:
    """Balanced first, then sticky; see the module's description."""
    if not members:
        return {}
    subscribed = subscriptions(members, topics)
    if is_homogeneous(subscribed):
        return homogeneous(members, subscribed, topics)
    return heterogeneous(members, subscribed, topics)


def homogeneous(
    members: Mapping[str, MemberSpec], subscribed: Mapping[str, frozenset], topics: Mapping[uuid.UUID, int]
) -> GroupAssignment:
    topic_ids = sorted(next(iter(subscribed.values())), key=str)
    if not topic_ids:
        return {m: {} for m in members}
    kept = valid_current(members, subscribed, topics)
    quota, extra = divmod(sum(topics[t] for t in topic_ids), len(members))
    # A stable sort: among members holding as many, the earlier one gets the extra partition.
    by_holding = sorted(members, key=lambda m: -len(kept[m]))
    quotas = {m: quota + (1 if rank < extra else 0) for rank, m in enumerate(by_holding)}
    owned = {m: kept[m][: quotas[m]] for m in members}
    held = {tp for partitions in owned.values() for tp in partitions}
    free = iter([(t, p) for t in topic_ids for p in range(topics[t]) if (t, p) not in held])
    for m in members:
        owned[m].extend(itertools.islice(free, quotas[m] - len(owned[m])))
    return to_assignment(owned)


def heterogeneous(
    members: Mapping[str, MemberSpec], subscribed: Mapping[str, frozenset], topics: Mapping[uuid.UUID, int]
) -> GroupAssignment:
    return _Heterogeneous(members, subscribed, topics).build()


class _Heterogeneous:
    """One run of the heterogeneous builder. Members are numbered in the order given;
    ``owner[topic][partition]`` is a member's number, or -1 while unassigned."""

    def __init__(self, members, subscribed, topics):
        self.ids = list(members)
        self.topics = topics
        self.subscribers: dict[uuid.UUID, list[int]] = {}
        for i, m in enumerate(self.ids):
            for t in sorted(subscribed[m], key=str):
                self.subscribers.setdefault(t, []).append(i)
        self.owner = {t: [-1] * topics[t] for t in self.subscribers}
        self.size = [0] * len(self.ids)
        kept = valid_current(members, subscribed, topics)
        for i, m in enumerate(self.ids):
            for t, p in kept[m]:
                self.owner[t][p] = i
                self.size[i] += 1

    def build(self) -> GroupAssignment:
        for t in self._sorted(self.subscribers):
            self._assign_free(t)
        self._balance()
        owned: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in self.ids}
        for t, owners in self.owner.items():
            for p, i in enumerate(owners):
                owned[self.ids[i]].append((t, p))
        return to_assignment(owned)

    def _sorted(self, topic_ids) -> list[uuid.UUID]:
        """Most partitions per subscriber first, then fewest subscribers, then topic id."""

        def key(t):
            n = len(self.subscribers[t])
            return (-self.topics[t] / n, n, str(t))

        return sorted(topic_ids, key=key)

    def _assign_free(self, t: uuid.UUID) -> None:
        heap = [(self.size[i], i) for i in self.subscribers[t]]
        heapq.heapify(heap)
        for p, i in enumerate(self.owner[t]):
            if i != -1:
                continue
            _, least = heapq.heappop(heap)
            self.owner[t][p] = least
            self.size[least] += 1
            heapq.heappush(heap, (self.size[least], least))

    def _balance(self) -> None:
        movable = self._sorted([t for t, subs in self.subscribers.items() if len(subs) >= 2])
        last_moved = -1
        for _ in range(MAX_BALANCE_ROUNDS):
            for k, t in enumerate(movable):
                if k == last_moved:  # a whole round over the topics moved nothing
                    return
                if self._balance_topic(t) or last_moved == -1:
                    last_moved = k

    def _balance_topic(self, t: uuid.UUID) -> int:
        """Move partitions of ``t`` from its most loaded subscriber to its least loaded one
        while their counts differ by two or more; the number moved."""
        subs = self.subscribers[t]
        held: dict[int, list[int]] = {i: [] for i in subs}
        for p, i in enumerate(self.owner[t]):
            held[i].append(p)
        moved = 0
        while True:
            donors = [i for i in subs if held[i]]
            if not donors:
                return moved
            most = max(donors, key=lambda i: (self.size[i], i))
            least = min(subs, key=lambda i: (self.size[i], i))
            if self.size[most] - self.size[least] <= 1:
                return moved
            p = held[most].pop()
            bisect.insort(held[least], p)
            self.owner[t][p] = least
            self.size[most] -= 1
            self.size[least] += 1
            moved += 1
