"""The transaction coordinator, a built-in plugin (Kafka's TransactionCoordinator,
TransactionStateManager and TransactionMarkerChannelManager).

Like the group coordinator, it serves its Kafka APIs through ``brokkr_apis`` (InitProducerId
for transactional ids, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions) and keeps its state on the broker it serves: one
:class:`~brokkr.plugins.transactions.coordinator.TransactionCoordinator` per broker,
registered as a plugin of that broker (:func:`transaction_coordinator_of` finds it),
which owns the transactional ids of the ``__transaction_state`` partitions it leads.
Blocked with ``brokkr.plugins.disabled=brokkr.plugins.transactions``: FindCoordinator then
answers COORDINATOR_NOT_AVAILABLE for transactional ids and InitProducerId NOT_COORDINATOR.

It also implements ``brokkr_transaction_verify`` (KIP-890 part 1): Produce asks it whether
a transactional batch that would start a transaction on a partition belongs to a
transaction the coordinator knows.

Modules: ``coordinator`` (the operations and the state machine's transitions),
``metadata`` (an id's state), ``records`` (the ``__transaction_state`` formats, compiled
from ``coordinator_records/``), ``markers`` (writing COMMIT/ABORT markers), ``expiry``
(the timeout and expiration timers), ``verify`` (KIP-890 part 1), ``errors``, ``apis/``.
"""

from __future__ import annotations

import importlib

from brokkr.core.config import ConfigDef, ConfigType, at_least
from brokkr.core.plugins import hookimpl

from .coordinator import PLUGIN_NAME, TRANSACTION_STATE_TOPIC, TransactionCoordinator
from .expiry import abort_timed_out_periodically, remove_expired_periodically


def transaction_coordinator_of(broker) -> TransactionCoordinator | None:
    """The transaction coordinator registered on ``broker`` (None when the plugin is blocked)."""
    return broker.pm.get_plugin(PLUGIN_NAME)


I = ConfigType.INT
CONFIGS = [
    ConfigDef(
        "transaction.state.log.num.partitions",
        I,
        50,
        f"The number of partitions of {TRANSACTION_STATE_TOPIC}, fixed once it exists (a transactional id's "
        "coordinator is the leader of partition abs(hashCode(id)) % this).",
        validator=at_least(1),
    ),
    ConfigDef(
        "transaction.state.log.segment.bytes",
        I,
        100 * 1024 * 1024,
        f"The segment size of {TRANSACTION_STATE_TOPIC}, kept small for faster compaction and loading.",
        validator=at_least(14),
    ),
    ConfigDef(
        "transaction.state.log.replication.factor",
        I,
        3,
        f"Replicas of each {TRANSACTION_STATE_TOPIC} partition on a cluster; a broker alone keeps one and refuses "
        "a setting above 1.",
        validator=at_least(1),
    ),
    ConfigDef(
        "transaction.state.log.min.isr",
        I,
        2,
        f"min.insync.replicas of {TRANSACTION_STATE_TOPIC} on a cluster (alone: 1).",
        validator=at_least(1),
    ),
    ConfigDef(
        "request.timeout.ms",
        I,
        30000,
        f"How long a write to {TRANSACTION_STATE_TOPIC} and a WriteTxnMarkers request to another broker wait.",
        validator=at_least(1),
    ),
    ConfigDef(
        "transaction.partition.verification.enable",
        ConfigType.BOOLEAN,
        True,
        "Whether a partition leader asks the transaction coordinator before a transactional batch starts a "
        "transaction there (KIP-890 part 1); off, such batches are appended unverified.",
    ),
    ConfigDef(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        I,
        10_000,
        "How often ongoing transactions older than their timeout are looked for (and aborted).",
        validator=at_least(1),
    ),
    ConfigDef(
        "transactional.id.expiration.ms",
        I,
        7 * 24 * 3600 * 1000,
        "A transactional id without a transaction for this long is removed.",
        validator=at_least(1),
    ),
    ConfigDef(
        "transaction.remove.expired.transactional.id.cleanup.interval.ms",
        I,
        3600 * 1000,
        "How often expired transactional ids are looked for.",
        validator=at_least(1),
    ),
]


@hookimpl
def brokkr_config_definitions():
    return CONFIGS


@hookimpl
def brokkr_internal_topics():
    return [TransactionCoordinator.internal]


@hookimpl
def brokkr_apis(broker):
    from .apis import MODULES

    return [importlib.import_module(f"{__package__}.apis.{name}").API for name in MODULES]


@hookimpl
def brokkr_broker_starting(broker):
    broker.pm.register(TransactionCoordinator(broker), name=PLUGIN_NAME)


@hookimpl
def brokkr_broker_started(broker):
    coordinator = transaction_coordinator_of(broker)
    coordinator.start()
    coordinator.spawn(abort_timed_out_periodically(coordinator), "abort timed-out transactions")
    coordinator.spawn(remove_expired_periodically(coordinator), "remove expired transactional ids")


@hookimpl
def brokkr_became_leader(partition, broker):
    if partition.topic.name == TRANSACTION_STATE_TOPIC:
        transaction_coordinator_of(broker).became_leader(partition.index, partition.leader_epoch)


@hookimpl
def brokkr_became_follower(partition, broker):
    if partition.topic.name == TRANSACTION_STATE_TOPIC:
        transaction_coordinator_of(broker).resigned(partition.index)


@hookimpl
def brokkr_broker_stopping(broker):
    coordinator = transaction_coordinator_of(broker)
    if coordinator is not None:
        coordinator.stop()
        coordinator.markers.close()
        coordinator.verify_clients.close()


@hookimpl
def brokkr_transaction_verify(transactional_id, producer_id, producer_epoch, partitions, broker):
    from .verify import verify

    coordinator = transaction_coordinator_of(broker)
    if coordinator is None or not broker.config["transaction.partition.verification.enable"]:
        return None
    return verify(broker, coordinator, transactional_id, producer_id, producer_epoch, partitions)
