"""The server-side assignors of the consumer group protocol (KIP-848): ``uniform``, the
default, and ``range``, with the semantics of Kafka's UniformAssignor and RangeAssignor.

An assignor is a pure function of plain data, so that the coordinator can call it while
it computes a heartbeat's records, and tests can call it without a broker:

- ``members``: member id -> :class:`MemberSpec` (the topic ids it subscribes to, its
  current *target* assignment, its instance id), in a stable order;
- ``topics``: topic id -> partition count, for the topics that exist.

It returns member id -> {topic id: frozenset of partitions}, one entry for every member
(an empty dict for a member that gets nothing). Topics a member subscribes to that are
missing from ``topics`` are treated as nonexistent, and partitions at or beyond a topic's
count (or held by two members) are dropped from the current assignment, so whatever the
caller hands in, every partition of a subscribed topic ends up with exactly one
subscriber. Everything is deterministic: ties are broken by the order of ``members``,
topic ids and partition numbers, never by hashing.

The inputs and shared bookkeeping are in :mod:`.assignor_spec`; ``uniform`` is in
:mod:`.uniform_assignor`; ``range`` is here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from .assignor_spec import Assignor, GroupAssignment, MemberSpec, subscriptions
from .uniform_assignor import uniform_assign

# -- range ------------------------------------------------------------------------------


def range_assign(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]) -> GroupAssignment:
    """Kafka's RangeAssignor: per topic, its subscribers in order (static members first,
    by instance id, then the others by member id) take consecutive ranges, the first
    ``partitions % subscribers`` of them one partition more. Members subscribed to the
    same topics with equal partition counts therefore get the same partition numbers of
    each (co-partitioning, for joins). It is sticky only as Kafka's is: static members
    keep their place in the order, so a rolling bounce keeps their ranges."""
    subscribed = subscriptions(members, topics)
    order = sorted(
        members,
        key=lambda m: (0, members[m].instance_id, "") if members[m].instance_id is not None else (1, "", m),
    )
    result: dict[str, dict[uuid.UUID, frozenset[int]]] = {m: {} for m in members}
    for topic_id in sorted(set().union(*subscribed.values()) if subscribed else (), key=str):
        subscribers = [m for m in order if topic_id in subscribed[m]]
        quota, extra = divmod(topics[topic_id], len(subscribers))
        start = 0
        for i, member_id in enumerate(subscribers):
            end = start + quota + (1 if i < extra else 0)
            if end > start:
                result[member_id][topic_id] = frozenset(range(start, end))
            start = end
    return result


#: The assignors by the name a member asks for (``server_assignor``).
ASSIGNORS: dict[str, Assignor] = {"uniform": uniform_assign, "range": range_assign}
#: Kafka's ``group.consumer.assignors`` takes class names; they name the same assignors.
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_names(configured: list[str]) -> list[str]:
    """The assignor names of ``group.consumer.assignors`` (names or Kafka's class names),
    in order (the first is the default); ValueError for one brokkr does not have."""
    names = []
    for entry in configured:
        name = CLASS_NAMES.get(entry.strip(), entry.strip())
        if name not in ASSIGNORS:
            raise ValueError(f"unknown assignor {entry!r} (brokkr has {', '.join(ASSIGNORS)})")
        if name not in names:
            names.append(name)
    if not names:
        raise ValueError("at least one assignor is needed")
    return names
