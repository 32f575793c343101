"""The schema registry served by the broker (issue 36), a built-in plugin: Confluent Schema
Registry's REST API (:mod:`.api`), its state in the compacted internal topic ``_schemas``
in Confluent's record format (:mod:`.store`), compatibility levels
(:mod:`.compatibility`), the AVRO, JSON and PROTOBUF formats (:mod:`.formats`).

One :class:`~.store.SchemaRegistry` per broker, registered on it (:func:`registry_of`),
keeps the registry's state whenever the plugin is not blocked (the produce-path
validation reads it even on a broker without a listener). The HTTP listeners start only
with ``brokkr.schema.registry.listeners``. Blocked with
``brokkr.plugins.disabled=brokkr.plugins.schema_registry``.

On a cluster every broker with a listener answers reads from its replica of ``_schemas``
and forwards writes to the leader of ``_schemas``, whose registry URL it finds in the
cluster membership (:mod:`.server`, :mod:`.api`).
"""

from __future__ import annotations

from brokkr.core.config import ConfigDef, ConfigType, at_least
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import hookimpl

from .compatibility import LEVELS
from .formats import FORMATS
from .store import PLUGIN_NAME, TOPIC_SETTING, SchemaRegistry, registry_of, schemas_topic

__all__ = ["registry_of", "SchemaRegistry"]

P = "brokkr.schema.registry."


def _level(value: str) -> None:
    if value.upper() not in LEVELS:
        raise ValueError(f"not one of {', '.join(LEVELS)}")


def _method(value: str) -> None:
    if value.upper() not in ("NONE", "BASIC"):
        raise ValueError("not NONE or BASIC")


CONFIGS = [
    ConfigDef(
        P + "listeners",
        ConfigType.LIST,
        [],
        "Where the schema registry listens: http://HOST:PORT and https://HOST:PORT (the broker's TLS settings), "
        "comma separated; port 0 takes a free port. Empty (the default): no registry is served.",
    ),
    ConfigDef(
        P + "host.name",
        ConfigType.STRING,
        None,
        "The host other brokers forward writes to (Confluent's host.name); by default the first listener's host, "
        "or this machine's name for a wildcard listener.",
    ),
    ConfigDef(
        P + "schema.compatibility.level",
        ConfigType.STRING,
        "backward",
        "The compatibility level of subjects without one, until PUT /config sets another (Confluent's "
        "schema.compatibility.level).",
        validator=_level,
    ),
    ConfigDef(
        P + "mode.mutability",
        ConfigType.BOOLEAN,
        True,
        "Whether PUT and DELETE /mode may change modes (Confluent's mode.mutability).",
    ),
    ConfigDef(
        TOPIC_SETTING,
        ConfigType.STRING,
        "_schemas",
        "The compacted internal topic the schemas are kept in (Confluent's kafkastore.topic).",
    ),
    ConfigDef(
        P + "kafkastore.topic.replication.factor",
        ConfigType.INT,
        3,
        "Replicas of the schemas topic on a cluster (created with the first write); a broker alone keeps one.",
        validator=at_least(1),
    ),
    ConfigDef(
        P + "kafkastore.timeout.ms",
        ConfigType.INT,
        10_000,
        "How long a write to the schemas topic waits to be acknowledged by its in-sync replicas "
        "(Confluent's kafkastore.timeout.ms, whose 500 ms leaves followers no time to fetch).",
        validator=at_least(1),
    ),
    ConfigDef(
        P + "authentication.method",
        ConfigType.STRING,
        None,
        "NONE or BASIC (HTTP basic credentials of the broker's SCRAM users); by default BASIC where a SASL "
        "listener of the broker enables a SCRAM mechanism.",
        validator=_method,
    ),
    ConfigDef(
        P + "request.max.bytes",
        ConfigType.INT,
        2 * 1024 * 1024,
        "The largest request body the registry reads (larger ones answer 413).",
        validator=at_least(1024),
    ),
]


@hookimpl
def brokkr_config_definitions():
    return CONFIGS


@hookimpl
def brokkr_internal_topics(broker):
    return [schemas_topic(broker.config)]


@hookimpl
def brokkr_broker_starting(broker):
    registry = SchemaRegistry(broker)
    broker.pm.register(registry, name=PLUGIN_NAME)
    if broker.config[P + "listeners"]:
        try:
            from .server import RegistryServer
        except ImportError as exc:
            raise ConfigError(f"{P}listeners needs {exc.name}: pip install 'brokkr[schema-registry]'") from None
        len(FORMATS)  # the formats' libraries too, or a clear refusal now rather than at a request
        registry.server = RegistryServer(broker, registry)
        registry.server.bind()


@hookimpl
def brokkr_broker_started(broker):
    registry = registry_of(broker)
    registry.start()
    if registry.server is not None:
        registry.spawn(registry.server.start(), "serve")


@hookimpl
def brokkr_became_leader(partition, broker):
    registry = registry_of(broker)
    if registry is not None and partition.topic.name == registry.topic:
        registry.became_leader(partition.index, partition.leader_epoch)


@hookimpl
def brokkr_became_follower(partition, broker):
    registry = registry_of(broker)
    if registry is not None and partition.topic.name == registry.topic:
        registry.resigned(partition.index)


@hookimpl
def brokkr_broker_stopping(broker):
    registry = registry_of(broker)
    if registry is not None:
        if registry.server is not None:
            registry.server.close()
        registry.stop()
