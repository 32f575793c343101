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

import importlib

from brokkr.core.plugins import hookimpl

from .coordinator import PLUGIN_NAME as COORDINATOR_NAME
from .coordinator import SHARE_STATE_TOPIC, ShareCoordinator
from .manager import PLUGIN_NAME as MANAGER_NAME
from .manager import ShareManager
from .persister import SharePersister


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
