"""Share groups' data path and the share coordinator (KIP-932), a built-in plugin.

* Share partitions (:mod:`.partition`) on each data partition's leader: what a share group
  has delivered, acquired, acknowledged; locks, delivery counts, read_committed.
* Share sessions and the share partitions of a broker (:mod:`.manager`, one
  :class:`~.manager.ShareManager` per broker, registered on its plugin manager).
* ShareFetch and ShareAcknowledge (:mod:`.apis`).
* The share coordinator (:mod:`.coordinator`) on ``__share_group_state`` (records:
  :mod:`.records`) and the state APIs brokers send it; the persister everything else calls,
  ``broker.share_state`` (:mod:`.persister`): ``initialize``, ``read_summary``, ``delete``
  (the group coordinator's share-group offset APIs), ``read_state``, ``write_state``.

The share group's membership and assignment (ShareGroupHeartbeat, ...) are the group
coordinator's (:mod:`brokkr.plugins.groups`). Settings: ``group.share.*`` and
``share.coordinator.*`` in :mod:`brokkr.core.config`, a group's own through
``broker.group_configs``. Blocked with ``brokkr.plugins.disabled=brokkr.plugins.share``:
the APIs are not served and FindCoordinator answers COORDINATOR_NOT_AVAILABLE for share keys.
"""

from __future__ import annotations

import asyncio
import importlib
import logging

from brokkr.core.plugins import hookimpl
from brokkr.plugins.groups import coordinator_of

from .coordinator import PLUGIN_NAME as COORDINATOR_NAME
from .coordinator import SHARE_STATE_TOPIC, ShareCoordinator
from .manager import PLUGIN_NAME as MANAGER_NAME
from .manager import ShareManager
from .persister import SharePersister

log = logging.getLogger("brokkr.share")


def share_coordinator_of(broker) -> ShareCoordinator | None:
    """The share coordinator registered on ``broker`` (None when the plugin is blocked)."""
    return broker.pm.get_plugin(COORDINATOR_NAME)


def share_manager_of(broker) -> ShareManager | None:
    return broker.pm.get_plugin(MANAGER_NAME)


@hookimpl
def brokkr_internal_topics():
    return [ShareCoordinator.internal]


@hookimpl
def brokkr_apis(broker):
    from .apis import MODULES

    return [importlib.import_module(f"{__package__}.apis.{name}").API for name in MODULES]


@hookimpl
def brokkr_broker_starting(broker):
    coordinator = ShareCoordinator(broker)
    manager = ShareManager(broker)
    broker.pm.register(coordinator, name=COORDINATOR_NAME)
    broker.pm.register(manager, name=MANAGER_NAME)
    broker.share_state = SharePersister(broker, coordinator, manager)


@hookimpl
def brokkr_broker_started(broker):
    share_coordinator_of(broker).start()


@hookimpl
def brokkr_topic_deleted(topic, broker):
    coordinator = share_coordinator_of(broker)
    if coordinator is not None:
        coordinator.spawn(topics_deleted(broker, {topic.topic_id}), f"share state of deleted topic {topic.name}")


async def topics_deleted(broker, topic_ids: set) -> None:
    """The topics ``topic_ids`` were deleted: this broker's share partitions of them go (their
    locks and timers with them), the share state of their partitions in the
    ``__share_group_state`` partitions led here is deleted, and the share groups coordinated
    here forget them (Kafka's onMetadataUpdate of the share and group coordinators)."""
    manager = share_manager_of(broker)
    for partition in {sp.partition for sp in list(manager.partitions.values()) if sp.key[1] in topic_ids}:
        manager.drop_partition(partition)
    groups = coordinator_of(broker)
    try:
        await asyncio.gather(
            share_coordinator_of(broker).topics_deleted(topic_ids),
            groups.share.topics_deleted(topic_ids) if groups is not None else asyncio.sleep(0),
        )
    except Exception:  # logged; the share state of later deletions is still deleted
        log.exception("deleting the share state of the deleted topics %s failed", sorted(map(str, topic_ids)))


@hookimpl
def brokkr_became_leader(partition, broker):
    if partition.topic.name == SHARE_STATE_TOPIC:
        share_coordinator_of(broker).became_leader(partition.index, partition.leader_epoch)


@hookimpl
def brokkr_became_follower(partition, broker):
    if partition.topic.name == SHARE_STATE_TOPIC:
        share_coordinator_of(broker).resigned(partition.index)
    else:
        share_manager_of(broker).drop_partition(partition)


@hookimpl
def brokkr_connection_closed(connection, broker):
    manager = share_manager_of(broker)
    if manager is not None and manager.sessions:
        manager.connection_closed(connection.connection_id)


@hookimpl
def brokkr_broker_stopping(broker):
    manager = share_manager_of(broker)
    if manager is not None:
        manager.stop()
    coordinator = share_coordinator_of(broker)
    if coordinator is not None:
        coordinator.stop()
    persister = getattr(broker, "share_state", None)
    if persister is not None:
        persister.close()
