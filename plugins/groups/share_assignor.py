"""The share groups' server-side assignor, ``simple`` (the rules of Kafka's SimpleAssignor;
a pure function).

Unlike a consumer group's assignors, a partition may go to several members. With M members
subscribed to a topic of P assignable partitions, each partition goes to
``sharing = ceil(M / P)`` members, and the ``sharing * P`` places are spread evenly over the
members (member i of M, in member id order, takes ``ceil(x*(i+1)) - ceil(x*i)`` of them,
``x = sharing*P/M``). The previous assignment is kept where it fits: a member keeps its
partitions up to its share, a partition keeps its members up to ``sharing``; the free places
then go round the members that have room; a place that every member with room cannot take
(it holds that partition already) is filled by a swap (the member with room takes another
partition from one without it, which takes the place), else by the least loaded other, so
that every partition has its ``sharing`` members (no partition is left unread, nor the
epoch bumped again for it) and assigning again from the result changes nothing. When
every member subscribes to the same topics (homogeneous) their partitions are one pool,
else each topic is spread over its own subscribers (heterogeneous), as Kafka does.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from .consumer_member import Assignment

TopicPartition = tuple[uuid.UUID, int]
NAME = "simple"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _spread(
    targets: list[TopicPartition], members: list[str], old: Mapping[str, set[TopicPartition]]
) -> dict[str, set[TopicPartition]]:
    """``targets`` shared over ``members`` (sorted), keeping ``old`` where it fits."""
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    if not targets or not members:
        return out
    n, p = len(members), len(targets)
    sharing = _ceil_div(n, p)
    quota = {m: _ceil_div(sharing * p * (i + 1), n) - _ceil_div(sharing * p * i, n) for i, m in enumerate(members)}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in targets}
    for m in members:  # keep what each had, up to its quota and the partition's sharing
        for tp in sorted(old.get(m, ()), key=lambda tp: (str(tp[0]), tp[1])):
            if tp in holders and len(out[m]) < quota[m] and len(holders[tp]) < sharing:
                out[m].add(tp)
                holders[tp].append(m)
    room = [m for m in members if len(out[m]) < quota[m]]
    turn = 0
    for tp in targets:
        tries = 0
        while len(holders[tp]) < sharing and room and tries < len(room):
            m = room[turn % len(room)]
            if m in holders[tp]:
                turn, tries = turn + 1, tries + 1
                continue
            out[m].add(tp)
            holders[tp].append(m)
            tries = 0
            if len(out[m]) >= quota[m]:
                room.remove(m)
            else:
                turn += 1
    for tp in targets:  # the places left where every member with room holds the partition already
        while len(holders[tp]) < sharing:
            if not _swap(tp, members, out, holders, quota):
                m = min((m for m in members if m not in holders[tp]), key=lambda m: (len(out[m]), members.index(m)))
                out[m].add(tp)
                holders[tp].append(m)
    return out


def _swap(
    tp: TopicPartition,
    members: list[str],
    out: dict[str, set[TopicPartition]],
    holders: dict[TopicPartition, list[str]],
    quota: dict[str, int],
) -> bool:
    """Fill one place of ``tp`` within the quotas: a member with room, which holds ``tp``
    already, takes over another partition from a member without ``tp``, which takes ``tp``
    instead (so that the result is what assigning again from it gives: stable). Whether a
    swap was found."""
    for r in members:
        if len(out[r]) >= quota[r]:
            continue
        for o in members:
            if o in holders[tp]:
                continue
            movable = sorted(out[o] - out[r], key=lambda x: (str(x[0]), x[1]))
            if movable:
                moved = movable[0]
                out[o].remove(moved)
                holders[moved].remove(o)
                out[r].add(moved)
                holders[moved].append(r)
                out[o].add(tp)
                holders[tp].append(o)
                return True
    return False


def assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    assignable: Mapping[uuid.UUID, frozenset[int]],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """The target assignment of each member. ``subscriptions``: member -> the ids of its
    subscribed topics that exist; ``assignable``: topic id -> its partitions whose share
    state is initialized; ``current``: the previous target assignment."""
    members = sorted(subscriptions)
    old = {m: {(t, p) for t, ps in current.get(m, {}).items() for p in ps} for m in members}
    result: dict[str, set[TopicPartition]] = {m: set() for m in members}
    topics = sorted({t for ts in subscriptions.values() for t in ts}, key=str)
    homogeneous = len({subscriptions[m] for m in members}) == 1
    if homogeneous:
        groups = [(topics, members)]
    else:
        groups = [([t], [m for m in members if t in subscriptions[m]]) for t in topics]
    for group_topics, subscribers in groups:
        targets = [(t, p) for t in group_topics for p in sorted(assignable.get(t, ()))]
        wanted = set(targets)
        spread = _spread(targets, subscribers, {m: old[m] & wanted for m in subscribers})
        for m, tps in spread.items():
            result[m] |= tps
    out: dict[str, Assignment] = {}
    for m, tps in result.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        out[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out
