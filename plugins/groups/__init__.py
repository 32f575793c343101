"""The group coordinator, a built-in plugin (Kafka's GroupCoordinator, GroupMetadataManager
and OffsetMetadataManager).

It serves its Kafka APIs through ``brokkr_apis``, so a plugin registered later can replace
any of them, or the whole coordinator is blocked with
``brokkr.plugins.disabled=brokkr.plugins.groups``. Its state lives on the broker it serves:
one :class:`~brokkr.plugins.groups.coordinator.GroupCoordinator` per broker, registered as
a plugin of that broker (:func:`coordinator_of` finds it), which owns the groups and their
offsets, partitioned like ``__consumer_offsets``.

Modules: ``coordinator`` (partition ownership, loading, writing and replaying records),
``classic`` and ``classic_protocol`` (the classic group protocol's state and operations),
``consumer_*``, ``reconciliation``, ``target_assignment`` and the assignors (the consumer
group protocol of KIP-848: see ``consumer_protocol``), ``share_*`` (share groups of
KIP-932: ``share_protocol`` the operations, ``share_groups`` on the running coordinator,
``share_assignor`` the ``simple`` assignor, ``share_records`` their records),
``offsets`` (committed offsets and their expiry), ``records`` (the ``__consumer_offsets``
record formats, compiled from ``coordinator_records/``), ``apis/`` (one module per API).
"""

from __future__ import annotations

import importlib

from brokkr.core.config import ASSIGNS_AT_ONCE, ASSIGNS_ON_THE_LOOP, ConfigDef, ConfigType, at_least, between, only
from brokkr.core.plugins import hookimpl

from .consumer_config import CONSUMER_CONFIGS, consumer_protocol_enabled
from .coordinator import OFFSETS_TOPIC, PLUGIN_NAME, GroupCoordinator


def coordinator_of(broker) -> GroupCoordinator:
    """The group coordinator registered on ``broker``."""
    return broker.pm.get_plugin(PLUGIN_NAME)


CONFIGS = [
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
    ConfigDef(
        "offsets.topic.replication.factor",
        ConfigType.INT,
        3,
        f"Replicas of each {OFFSETS_TOPIC} partition on a cluster (FindCoordinator answers COORDINATOR_NOT_AVAILABLE "
        "until that many brokers are live); a broker alone keeps one and refuses a setting above 1.",
        validator=at_least(1),
    ),
    ConfigDef(
        "offsets.topic.compression.codec",
        ConfigType.INT,
        0,
        f"The codec of the group coordinator's writes to {OFFSETS_TOPIC}, a Kafka compression id: 0 none, 1 gzip, "
        "2 snappy, 3 lz4, 4 zstd.",
        validator=between(0, 4),
    ),
    ConfigDef(
        "offsets.commit.timeout.ms",
        ConfigType.INT,
        5000,
        "How long an offset commit (or any group coordinator write) waits to be acknowledged, as acks=-1 waits.",
        validator=at_least(1),
    ),
    ConfigDef(
        "offsets.retention.minutes",
        ConfigType.INT,
        7 * 24 * 60,
        "Committed offsets of a group are kept this long after it became empty (or, for offsets of topics its "
        "members no longer subscribe to, after their commit).",
        validator=at_least(1),
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms",
        ConfigType.INT,
        600_000,
        "How often expired offsets are looked for.",
        validator=at_least(1),
    ),
    ConfigDef(
        "offset.metadata.max.bytes",
        ConfigType.INT,
        4096,
        "The largest metadata string an offset commit may carry (else OFFSET_METADATA_TOO_LARGE).",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.min.session.timeout.ms",
        ConfigType.INT,
        6000,
        "The smallest session timeout a classic member may ask for (else INVALID_SESSION_TIMEOUT).",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.max.session.timeout.ms",
        ConfigType.INT,
        1_800_000,
        "The largest session timeout a classic member may ask for (else INVALID_SESSION_TIMEOUT).",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        ConfigType.INT,
        3000,
        "How long a classic group leaving Empty waits for more members before its first rebalance completes "
        "(extended while members keep joining, up to the rebalance timeout).",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.max.size",
        ConfigType.INT,
        2**31 - 1,
        "The most members a classic group may have (else GROUP_MAX_SIZE_REACHED).",
        validator=at_least(1),
    ),
    # Kafka 4.3's assignment batching and assignor offload (KIP-1263) for consumer groups: brokkr
    # computes a target assignment at once, on the event loop (as for share groups, core/config.py).
    ConfigDef(
        "group.consumer.assignment.interval.ms",
        ConfigType.INT,
        0,
        "Least time between two assignments of a consumer group: 0, brokkr assigns at once (Kafka's default: 1000).",
        validator=only(0, why=ASSIGNS_AT_ONCE),
    ),
    ConfigDef(
        "group.consumer.min.assignment.interval.ms",
        ConfigType.INT,
        0,
        "Least consumer.assignment.interval.ms a group may set.",
        validator=only(0, why=ASSIGNS_AT_ONCE),
    ),
    ConfigDef(
        "group.consumer.max.assignment.interval.ms",
        ConfigType.INT,
        15000,
        "Most consumer.assignment.interval.ms a group may set.",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.consumer.assignor.offload.enable",
        ConfigType.BOOLEAN,
        False,
        "Whether consumer groups' assignments are computed on a background thread: no (Kafka's default: true).",
        validator=only(False, why=ASSIGNS_ON_THE_LOOP),
    ),
]


@hookimpl
def brokkr_config_definitions():
    return CONFIGS + CONSUMER_CONFIGS


@hookimpl
def brokkr_internal_topics():
    return [GroupCoordinator.internal]


@hookimpl
def brokkr_apis(broker):
    from .apis import CONSUMER_MODULES, MODULES, SHARE_MODULES

    modules = MODULES + (CONSUMER_MODULES if consumer_protocol_enabled(broker.config) else ()) + SHARE_MODULES
    return [importlib.import_module(f"{__package__}.apis.{name}").API for name in modules]


@hookimpl
def brokkr_broker_starting(broker):
    broker.pm.register(GroupCoordinator(broker), name=PLUGIN_NAME)


@hookimpl
def brokkr_broker_started(broker):
    coordinator_of(broker).start()


@hookimpl
def brokkr_became_leader(partition, broker):
    if partition.topic.name == OFFSETS_TOPIC:
        coordinator_of(broker).became_leader(partition.index, partition.leader_epoch)


@hookimpl
def brokkr_became_follower(partition, broker):
    if partition.topic.name == OFFSETS_TOPIC:
        coordinator_of(broker).resigned(partition.index)


@hookimpl
def brokkr_txn_marker_written(partition, marker, offset, broker):
    """A transaction that committed offsets (TxnOffsetCommit) ended on one of our partitions."""
    if partition.topic.name == OFFSETS_TOPIC:
        coordinator = coordinator_of(broker)
        if coordinator is not None:
            coordinator.offsets.complete_transaction(marker.producer_id, marker.committed, partition.index)


@hookimpl
def brokkr_topic_deleted(topic, broker):
    """The groups coordinated here lose their committed offsets of the deleted topic's
    partitions (Kafka's GroupCoordinatorService.onPartitionsDeleted), written as tombstones."""
    coordinator = coordinator_of(broker)
    if coordinator is not None and topic.name != OFFSETS_TOPIC:
        coordinator.spawn(
            coordinator.offsets.topic_deleted(topic.name, len(topic.partitions)),
            f"offsets of deleted topic {topic.name}",
        )


@hookimpl
def brokkr_broker_stopping(broker):
    coordinator = coordinator_of(broker)
    if coordinator is not None:
        coordinator.stop()
