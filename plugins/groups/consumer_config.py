"""The settings of the consumer group protocol (KIP-848), with Kafka's names, defaults and
bounds (GroupCoordinatorConfig's ``group.consumer.*`` and
``group.coordinator.rebalance.protocols``).

Clients of the consumer protocol do not choose their session timeout or heartbeat
interval: the coordinator does, with ``group.consumer.session.timeout.ms`` and
``group.consumer.heartbeat.interval.ms`` (the interval is in every heartbeat's answer).
The min and max settings bound them, checked together at start as Kafka's ``require``
calls do.
"""

from __future__ import annotations

from brokkr.core.config import ConfigDef, ConfigType, at_least, one_of
from brokkr.core.errors import ConfigError

from .assignors import CLASS_NAMES, assignor_names
from .consumer_protocol import Settings

I, LST = ConfigType.INT, ConfigType.LIST


def _assignors(value: list[str]) -> None:
    assignor_names(value)  # raises ValueError for one brokkr does not have


CONSUMER_CONFIGS = [
    ConfigDef(
        "group.coordinator.rebalance.protocols",
        LST,
        ["classic", "consumer"],
        "The group protocols served: 'classic' (JoinGroup, SyncGroup, ...) and 'consumer' (KIP-848, "
        "ConsumerGroupHeartbeat and ConsumerGroupDescribe, not served without it).",
        validator=one_of("classic", "consumer"),
    ),
    ConfigDef(
        "group.consumer.session.timeout.ms",
        I,
        45_000,
        "The timeout to detect client failures when using the consumer group protocol.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.session.timeout.ms",
        I,
        45_000,
        "The minimum allowed session timeout for registered consumers.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.session.timeout.ms",
        I,
        60_000,
        "The maximum allowed session timeout for registered consumers.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.heartbeat.interval.ms",
        I,
        5_000,
        "The heartbeat interval given to the members of a consumer group.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.heartbeat.interval.ms",
        I,
        5_000,
        "The minimum heartbeat interval for registered consumers.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.heartbeat.interval.ms",
        I,
        15_000,
        "The maximum heartbeat interval for registered consumers.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.size",
        I,
        2**31 - 1,
        "The maximum number of consumers that a single consumer group can accommodate (the consumer protocol; "
        "group.max.size bounds classic groups).",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.consumer.assignors",
        LST,
        list(CLASS_NAMES),
        "The server side assignors, by Kafka's class names or brokkr's names ('uniform', 'range'); the first is "
        "the default, used when no member asks for one.",
        validator=_assignors,
    ),
]


def consumer_settings(config) -> Settings:
    """The protocol's settings from the broker's config; ConfigError when the bounds do
    not hold together."""
    value = config.__getitem__
    pairs = [
        ("group.consumer.max.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms"),
        ("group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms"),
        ("group.consumer.max.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
        ("group.consumer.max.session.timeout.ms", "group.consumer.min.session.timeout.ms"),
        ("group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms"),
        ("group.consumer.max.session.timeout.ms", "group.consumer.session.timeout.ms"),
    ]
    for larger, smaller in pairs:
        if value(larger) < value(smaller):
            raise ConfigError(f"{larger} must be greater than or equal to {smaller}")
    if "classic" not in value("group.coordinator.rebalance.protocols"):
        raise ConfigError("group.coordinator.rebalance.protocols must contain classic")
    return Settings(
        session_timeout_ms=value("group.consumer.session.timeout.ms"),
        heartbeat_interval_ms=value("group.consumer.heartbeat.interval.ms"),
        max_size=value("group.consumer.max.size"),
        assignors=tuple(assignor_names(value("group.consumer.assignors"))),
    )


def consumer_protocol_enabled(config) -> bool:
    return "consumer" in config["group.coordinator.rebalance.protocols"]
