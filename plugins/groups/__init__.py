"""The group coordinator, a built-in plugin (Kafka's GroupCoordinator and
GroupMetadataManager).

It serves its Kafka APIs through ``brokkr_apis``, so a plugin registered later can replace
any of them, or the whole coordinator is blocked with
``brokkr.plugins.disabled=brokkr.plugins.groups``. Its state lives on the broker it serves
(:func:`group_coordinator`), one :class:`~brokkr.plugins.groups.coordinator.GroupCoordinator`
per broker, which owns the groups (of either protocol) and their offsets, partitioned like
``__consumer_offsets``.

Modules: ``coordinator`` (the coordinator, partition ownership and its
became-leader/resigned seam), ``find_coordinator`` (FindCoordinator), ``records`` (the
``__consumer_offsets`` record formats, compiled from ``coordinator_records/``).
"""

from __future__ import annotations

import weakref

from brokkr.core.config import ConfigDef, ConfigType, at_least
from brokkr.core.plugins import hookimpl

from .coordinator import OFFSETS_TOPIC, GroupCoordinator

_coordinators: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def group_coordinator(broker) -> GroupCoordinator:
    """The group coordinator of ``broker`` (created on first use)."""
    found = _coordinators.get(broker)
    if found is None:
        found = _coordinators[broker] = GroupCoordinator(broker)
    return found


@hookimpl
def brokkr_config_definitions():
    return [
        ConfigDef(
            "offsets.topic.num.partitions",
            ConfigType.INT,
            50,
            f"The number of partitions of {OFFSETS_TOPIC}, fixed once it exists (a group's coordinator is the "
            "leader of partition abs(hashCode(group id)) % this).",
            validator=at_least(1),
        ),
        ConfigDef(
            "offsets.topic.segment.bytes",
            ConfigType.INT,
            100 * 1024 * 1024,
            f"The segment size of {OFFSETS_TOPIC}, kept small for faster compaction and loading.",
            validator=at_least(14),  # log.segment.bytes' bound
        ),
    ]


@hookimpl
def brokkr_apis():
    from . import find_coordinator

    return [find_coordinator.API]


@hookimpl
def brokkr_broker_started(broker):
    group_coordinator(broker).start()


@hookimpl
def brokkr_broker_stopping(broker):
    found = _coordinators.pop(broker, None)
    if found is not None:
        found.stop()
