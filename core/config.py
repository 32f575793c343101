"""Configuration with Kafka's names and defaults.

Sources, later ones winning: the embedded defaults below (plus every plugin's
:class:`ConfigDef` from ``brokkr_config_definitions``), a ``server.properties`` file, and
``--override key=value`` pairs. Topic-level settings (``retention.ms``, ``segment.bytes``,
...) take their defaults from the broker-level synonyms Kafka uses (``log.retention.ms``,
``log.segment.bytes``, ...), so a Kafka user's files carry over unchanged.

The embedded defaults differ from Kafka's in two places, on purpose, so that ``brokkr
serve`` alone gives a usable local broker: ``listeners`` is ``PLAINTEXT://127.0.0.1:9092``
and ``log.dirs`` is ``./data``. Security settings differ where brokkr cannot do what
Kafka's default does: ``sasl.enabled.mechanisms`` is ``PLAIN`` (not GSSAPI), and
``ssl.keystore.type``/``ssl.truststore.type`` are ``PEM`` (not JKS).

Settings may be given for one listener as ``listener.name.<listener>.<setting>`` (and SASL
settings for one mechanism too, ``listener.name.<listener>.<mechanism>.<setting>``), as in
Kafka; :func:`listener_value` reads the most specific.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from .errors import ConfigError

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1


class ConfigType(enum.IntEnum):
    """DescribeConfigs' ConfigType numbers."""

    UNKNOWN = 0  # a setting brokkr has no definition of
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' ConfigSource numbers."""

    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@attrs.frozen
class ConfigDef:
    """One setting: its Kafka name, type, default and documentation.

    ``synonym`` links a topic-level setting to the broker-level one that supplies its
    default (``retention.ms`` -> ``log.retention.ms``). ``validator`` raises ValueError
    with a message for a bad value.
    """

    name: str
    type: ConfigType
    default: Any
    doc: str
    synonym: str | None = None
    validator: Callable[[Any], None] | None = None
    sensitive: bool = False
    #: A family of settings: every name that starts with ``name`` (ending in ".") takes
    #: this definition (``brokkr.sink.spark.conf.<Spark setting>``).
    prefix: bool = False
    #: A topic setting a plugin declares (``confluent.value.schema.validation``): taken in
    #: CreateTopics and AlterConfigs, shown by DescribeConfigs; no broker setting is behind
    #: it, so a topic without its own value has ``default``.
    topic: bool = False

    def parse(self, raw: Any) -> Any:
        try:
            value = _parse(self.type, raw)
            if self.validator is not None and value is not None:
                self.validator(value)
        except (ValueError, TypeError) as exc:
            shown, reason = repr(raw), str(exc)
            if is_sensitive(self.name, self):  # the reason may quote the value too (int()'s does)
                secret = str(raw).strip()
                shown, reason = HIDDEN, reason.replace(secret, HIDDEN) if secret else reason
            raise ConfigError(f"invalid value {shown} for configuration {self.name}: {reason}") from None
        return value


#: Kafka's replica selector for fetching from the closest replica (KIP-392), the one there is.
RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
#: What logs and tools show instead of a sensitive value (Kafka's Password.toString).
HIDDEN = "[hidden]"
#: A name ending in one of these words holds a secret: ``ssl.key.password``,
#: ``password.encoder.secret``, ``ssl.keystore.key``, ``delegation.token.master.key``,
#: ``fs.s3a.secret.key``, ``fs.s3a.access.key``, Spark's ``spark.ssl.keyPassword``. Only the
#: last word counts: Kafka's own names use these words for other things too:
#: ``password.encoder.iterations``, ``delegation.token.expiry.time.ms``,
#: ``sasl.oauthbearer.token.endpoint.url``, ``key.serializer``, ``confluent.key.schema.validation``.
SECRET_LAST_WORDS = frozenset(
    {"password", "passwd", "passphrase", "secret", "token", "credential", "credentials", "key"}
)
#: A name with ``jaas`` anywhere (``sasl.jaas.config``, per listener or mechanism too)
#: holds a JAAS configuration, and so its passwords.
SECRET_WORDS = frozenset({"jaas"})
#: A key after one of these words is a secret even with words after it:
#: Hadoop's ``fs.azure.account.key.<account>.dfs.core.windows.net``.
SECRET_KEY_QUALIFIERS = frozenset({"secret", "access", "account", "api"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")


def looks_secret(name: str) -> bool:
    """Whether a setting's name says that its value is a secret (the words of the name:
    split at dots, dashes, underscores and camelCase humps, in any case)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    if not words:
        return False
    return (
        words[-1] in SECRET_LAST_WORDS
        or not SECRET_WORDS.isdisjoint(words)
        or any(w == "key" and before in SECRET_KEY_QUALIFIERS for before, w in zip(words, words[1:]))
    )


def is_sensitive(name: str, d: ConfigDef | None) -> bool:
    """Whether the value of setting ``name`` (defined by ``d``, None when unknown) is kept
    out of logs, tools and DescribeConfigs (a null value, isSensitive): as in Kafka, a
    PASSWORD setting or one whose type is unknown; beyond Kafka, any whose name looks
    secret (:func:`looks_secret`), such as those passed on as given (``brokkr.sink.spark.conf.*``)."""
    return d is None or d.sensitive or d.type is ConfigType.PASSWORD or looks_secret(name)


def _parse(kind: ConfigType, raw: Any) -> Any:
    if raw is None or not isinstance(raw, str):
        return raw
    raw = raw.strip()
    if kind is ConfigType.BOOLEAN:
        if raw.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return raw.lower() == "true"
    if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        return int(raw)
    if kind is ConfigType.DOUBLE:
        return float(raw)
    if kind is ConfigType.LIST:
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def parse_ip_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma separated
    (ValueError for anything else)."""
    overrides = {}
    for item in (part.strip() for part in (text or "").split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, found {item!r}")
        overrides[host.strip("[]")] = int(count)
    return overrides


def at_least(minimum: int) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")

    return check


def between(low: float, high: float) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")

    return check


def _one_share_assignor(value: list[str]) -> None:
    """group.share.assignors: exactly one, Kafka's built-in (by name or class name)."""
    if len(value) != 1:
        raise ValueError(f"group.share.assignors must contain exactly one assignor, but found {len(value)}")
    if value[0] not in ("simple", "org.apache.kafka.coordinator.group.assignor.SimpleAssignor"):
        raise ValueError(f"unknown share group assignor {value[0]} (brokkr has 'simple')")


def only(*values: Any, why: str) -> Callable[[Any], None]:
    """A Kafka setting brokkr takes only at the values that describe what it does (``why``
    says what that is): any other is refused at start, never taken and ignored."""

    def check(value: Any) -> None:
        if value not in values:
            raise ValueError(f"brokkr takes only {' or '.join(format_value(v) for v in values)}: {why}")

    return check


def one_of(*choices: str) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item not in choices:
                raise ValueError(f"must be one of {', '.join(choices)}")

    return check


B, S, I, L, LST = ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.INT, ConfigType.LONG, ConfigType.LIST
D = ConfigType.DOUBLE
P = ConfigType.PASSWORD
TLS_PROTOCOLS = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
#: Kafka's persister of share state, the one brokkr has (through its share coordinator).
DEFAULT_STATE_PERSISTER = "org.apache.kafka.server.share.persister.DefaultStatePersister"
#: Why only 0 is taken for the groups' assignment intervals (Kafka 4.3's assignment batching,
#: KIP-1263), and only false for their assignor offload: brokkr does neither.
ASSIGNS_AT_ONCE = "a group's target assignment is computed at once, in the heartbeat that finds it out of date"
ASSIGNS_ON_THE_LOOP = "a group's assignor runs in the heartbeat that needs it, on the broker's event loop"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

BROKER_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef(
        "listeners", LST, ["PLAINTEXT://127.0.0.1:9092"], "Listener URIs, name://host:port; port 0 picks a free port."
    ),
    ConfigDef("advertised.listeners", LST, None, "Listeners given to clients in Metadata; defaults to listeners."),
    ConfigDef(
        "listener.security.protocol.map",
        LST,
        ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"],
        "Security protocol of each listener name, NAME:PROTOCOL (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).",
    ),
    # Security: each may be set for one listener as listener.name.<listener>.<setting>.
    ConfigDef(
        "sasl.enabled.mechanisms",
        LST,
        ["PLAIN"],
        "SASL mechanisms offered on SASL listeners (Kafka's default, GSSAPI, is not available in brokkr).",
    ),
    ConfigDef(
        "sasl.server.max.receive.size", I, 524288, "Largest frame read before authentication.", validator=at_least(1)
    ),
    ConfigDef(
        "connections.max.reauth.ms",
        L,
        0,
        "SASL session lifetime (KIP-368): clients must re-authenticate within it; 0 disables it.",
        validator=at_least(0),
    ),
    ConfigDef(
        "connection.failed.authentication.delay.ms",
        I,
        100,
        "How long a failed authentication waits before its answer and the close.",
        validator=at_least(0),
    ),
    ConfigDef("ssl.keystore.type", S, "PEM", "PEM, or PKCS12 (needs the cryptography package); JKS is not read."),
    ConfigDef("ssl.keystore.location", S, None, "PEM file with the private key and the certificate chain."),
    ConfigDef("ssl.keystore.password", P, None, "Password of a PKCS12 keystore.", sensitive=True),
    ConfigDef("ssl.keystore.certificate.chain", P, None, "Certificate chain in PEM, inline.", sensitive=True),
    ConfigDef("ssl.keystore.key", P, None, "Private key in PEM, inline.", sensitive=True),
    ConfigDef("ssl.key.password", P, None, "Password of an encrypted private key.", sensitive=True),
    ConfigDef("ssl.truststore.type", S, "PEM", "PEM, or PKCS12 (needs the cryptography package); JKS is not read."),
    ConfigDef("ssl.truststore.location", S, None, "CA certificates that sign client certificates, in PEM."),
    ConfigDef("ssl.truststore.password", P, None, "Password of a PKCS12 truststore.", sensitive=True),
    ConfigDef("ssl.truststore.certificates", P, None, "CA certificates in PEM, inline.", sensitive=True),
    ConfigDef(
        "ssl.client.auth",
        S,
        "none",
        "Client certificates: none, requested or required.",
        validator=one_of("none", "requested", "required"),
    ),
    ConfigDef(
        "ssl.enabled.protocols",
        LST,
        ["TLSv1.2", "TLSv1.3"],
        "TLS versions accepted.",
        validator=one_of(*TLS_PROTOCOLS),
    ),
    ConfigDef("ssl.cipher.suites", LST, [], "TLS 1.2 cipher suites, OpenSSL names; empty: OpenSSL's defaults."),
    ConfigDef("node.id", I, 0, "This broker's id.", validator=at_least(0)),
    ConfigDef(
        "broker.id", I, None, "This broker's id in a ZooKeeper cluster (node.id's older name).", validator=at_least(0)
    ),
    ConfigDef(
        "broker.rack",
        S,
        None,
        "This broker's rack: replicas of a partition are spread over racks when placed, and consumers in the rack "
        "may fetch from this broker's replicas (replica.selector.class).",
    ),
    ConfigDef(
        "replica.selector.class",
        S,
        None,
        "How a leader picks the replica a consumer should fetch from (KIP-392): Kafka's "
        f"{RACK_AWARE_SELECTOR}, the most caught-up in-sync replica in the consumer's rack (client.rack); unset, "
        "the leader serves every consumer.",
        validator=one_of(RACK_AWARE_SELECTOR),
    ),
    # Core's, not the ZooKeeper plugin's: whether this broker is alone or on a cluster is asked
    # by core and other plugins (replication factors of the internal topics) whatever plugins
    # load, and a blocked membership plugin must not turn a cluster's broker into a lone one
    # (brokkr.plugins.cluster.zookeeper is essential while it is set: plugins.BUILTIN_ROLES).
    ConfigDef(
        "zookeeper.connect",
        S,
        None,
        "ZooKeeper's host:port[,host:port...][/chroot]; set, the broker joins that cluster; unset, it runs alone.",
    ),
    ConfigDef(
        "replica.lag.time.max.ms",
        L,
        30000,
        "A follower not caught up with the leader's log end for this long leaves the ISR.",
        validator=at_least(1),
    ),
    ConfigDef(
        "replica.fetch.wait.max.ms", I, 500, "How long a follower's fetch waits for data.", validator=at_least(0)
    ),
    ConfigDef("replica.fetch.min.bytes", I, 1, "Bytes a follower's fetch waits for.", validator=at_least(1)),
    ConfigDef("replica.fetch.max.bytes", I, 1048576, "Bytes a follower fetches per partition.", validator=at_least(0)),
    ConfigDef(
        "replica.fetch.response.max.bytes",
        I,
        10485760,
        "Bytes a follower's fetch response holds.",
        validator=at_least(0),
    ),
    ConfigDef("replica.fetch.backoff.ms", I, 1000, "A follower's pause after a failed fetch.", validator=at_least(0)),
    ConfigDef(
        "replica.socket.timeout.ms", I, 30000, "A follower's timeout on its leader's socket.", validator=at_least(1)
    ),
    ConfigDef("num.replica.fetchers", I, 1, "Fetchers a follower runs per leader broker.", validator=at_least(1)),
    ConfigDef(
        "auto.leader.rebalance.enable",
        B,
        True,
        "On a cluster, the controller moves leaders back to their preferred replicas when a broker's share of "
        "partitions led elsewhere exceeds leader.imbalance.per.broker.percentage.",
    ),
    ConfigDef(
        "leader.imbalance.check.interval.seconds",
        L,
        300,
        "How often the controller checks for leader imbalance.",
        validator=at_least(1),
    ),
    ConfigDef(
        "leader.imbalance.per.broker.percentage",
        I,
        10,
        "The share (percent) of a broker's preferred partitions led elsewhere that triggers a rebalance.",
        validator=at_least(0),
    ),
    ConfigDef(
        "controlled.shutdown.enable",
        B,
        True,
        "On a cluster, a stopping broker first hands its leaderships to in-sync replicas.",
    ),
    ConfigDef("log.dirs", LST, ["./data"], "Directories holding the partition logs."),
    ConfigDef("log.dir", S, None, "The log directory when log.dirs is not set (Kafka's supplemental setting)."),
    ConfigDef("auto.create.topics.enable", B, True, "Create a topic when Metadata names an unknown one."),
    ConfigDef("num.partitions", I, 1, "Partitions of an auto-created topic.", validator=at_least(1)),
    ConfigDef(
        "default.replication.factor", I, 1, "Replication factor of an auto-created topic.", validator=at_least(1)
    ),
    ConfigDef("delete.topic.enable", B, True, "Whether DeleteTopics may delete topics."),
    ConfigDef("socket.request.max.bytes", I, 104857600, "Largest request frame accepted.", validator=at_least(1)),
    ConfigDef(
        "connections.max.idle.ms",
        L,
        600000,
        "Close connections idle, stalled mid-frame or not reading their responses this long.",
        validator=at_least(1),
    ),
    ConfigDef(
        "max.connections",
        I,
        2147483647,
        "Connections open at once; at the limit, accepting waits.",
        validator=at_least(0),
    ),
    ConfigDef(
        "max.connections.per.ip", I, 2147483647, "Connections from one address; more are closed.", validator=at_least(0)
    ),
    ConfigDef(
        "max.connections.per.ip.overrides",
        S,
        "",
        "Per-address limits: host:count,...",
        validator=lambda text: parse_ip_overrides(text) and None,
    ),
    ConfigDef("queued.max.requests", I, 500, "Requests read and not yet answered, broker-wide.", validator=at_least(1)),
    ConfigDef(
        "queued.max.request.bytes", L, -1, "Bytes of requests read and not yet answered, broker-wide; -1: no bound."
    ),
    ConfigDef("fetch.max.bytes", I, 57671680, "Largest fetch response.", validator=at_least(1024)),
    ConfigDef("message.max.bytes", I, 1048588, "Largest record batch.", synonym=None, validator=at_least(0)),
    ConfigDef("log.segment.bytes", I, 1073741824, "Segment size before a roll.", validator=at_least(14)),
    ConfigDef("log.roll.hours", I, 168, "Segment age before a roll, in hours."),
    ConfigDef("log.roll.ms", L, None, "Segment age before a roll; overrides log.roll.hours."),
    ConfigDef("log.retention.hours", I, 168, "Retention time in hours."),
    ConfigDef("log.retention.minutes", I, None, "Retention time in minutes; overrides log.retention.hours."),
    ConfigDef("log.retention.ms", L, None, "Retention time; overrides log.retention.minutes; -1 keeps forever."),
    ConfigDef("log.retention.bytes", L, -1, "Retention size per partition; -1 is unlimited."),
    ConfigDef("log.cleanup.policy", LST, ["delete"], "delete and/or compact.", validator=one_of("delete", "compact")),
    ConfigDef("log.index.interval.bytes", I, 4096, "Bytes between offset index entries.", validator=at_least(0)),
    ConfigDef("log.index.size.max.bytes", I, 10485760, "Largest offset index file.", validator=at_least(4)),
    ConfigDef("log.flush.interval.messages", L, LONG_MAX, "Messages between forced flushes."),
    ConfigDef("log.flush.interval.ms", L, None, "Time between forced flushes."),
    ConfigDef(
        "log.flush.offset.checkpoint.interval.ms",
        I,
        60000,
        "How often recovery points and log start offsets are checkpointed.",
        validator=at_least(1),
    ),
    ConfigDef("log.retention.check.interval.ms", L, 300000, "How often retention runs.", validator=at_least(1)),
    # The log cleaner (plugins/storage/segment/cleaner.py).
    ConfigDef("log.cleaner.enable", B, True, "Run the log cleaner for compacted topics."),
    ConfigDef("log.cleaner.threads", I, 1, "Cleaner threads.", validator=at_least(1)),
    ConfigDef("log.cleaner.backoff.ms", L, 15000, "Sleep when there is nothing to clean.", validator=at_least(0)),
    ConfigDef("log.cleaner.dedupe.buffer.size", L, 134217728, "Memory for the key map, over all threads."),
    ConfigDef("log.cleaner.io.buffer.size", I, 524288, "Cleaner I/O buffers, all threads.", validator=at_least(0)),
    ConfigDef("log.cleaner.io.max.bytes.per.second", D, 1.7976931348623157e308, "Cleaner read+write throttle."),
    ConfigDef("log.cleaner.min.cleanable.ratio", D, 0.5, "Default min.cleanable.dirty.ratio.", validator=between(0, 1)),
    ConfigDef("log.cleaner.min.compaction.lag.ms", L, 0, "Default of it per topic.", validator=at_least(0)),
    ConfigDef("log.cleaner.max.compaction.lag.ms", L, LONG_MAX, "Default per topic.", validator=at_least(1)),
    ConfigDef("log.cleaner.delete.retention.ms", L, 86400000, "Default delete.retention.ms.", validator=at_least(0)),
    ConfigDef(
        "log.message.timestamp.type",
        S,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        validator=one_of("CreateTime", "LogAppendTime"),
    ),
    ConfigDef("log.message.timestamp.before.max.ms", L, LONG_MAX, "Allowed age of a record's timestamp."),
    ConfigDef("log.message.timestamp.after.max.ms", L, 3600000, "Allowed lead of a record's timestamp."),
    ConfigDef("compression.type", S, "producer", "Codec for stored batches.", validator=one_of(*COMPRESSION_TYPES)),
    ConfigDef("min.insync.replicas", I, 1, "Replicas that must acknowledge an acks=-1 write.", validator=at_least(1)),
    ConfigDef("transaction.max.timeout.ms", I, 900000, "Largest transaction timeout allowed.", validator=at_least(1)),
    # Share groups (KIP-932): the share partitions' settings (Kafka's ShareGroupConfig) and the
    # share coordinator's (ShareCoordinatorConfig); used by brokkr.plugins.share.
    ConfigDef(
        "group.share.record.lock.duration.ms",
        I,
        30000,
        "How long records handed to a share consumer stay acquired by it before they become available again.",
        validator=between(1000, 3600000),
    ),
    ConfigDef(
        "group.share.min.record.lock.duration.ms",
        I,
        15000,
        "The least share.record.lock.duration.ms a group may set.",
        validator=between(1000, 3600000),
    ),
    ConfigDef(
        "group.share.max.record.lock.duration.ms",
        I,
        60000,
        "The most share.record.lock.duration.ms a group may set.",
        validator=between(1000, 3600000),
    ),
    ConfigDef(
        "group.share.delivery.count.limit",
        I,
        5,
        "How many times a record of a share group may be delivered before it is archived.",
        validator=between(2, 10),
    ),
    ConfigDef(
        "group.share.min.delivery.count.limit",
        I,
        2,
        "The least share.delivery.count.limit a group may set.",
        validator=between(2, 10),
    ),
    ConfigDef(
        "group.share.max.delivery.count.limit",
        I,
        10,
        "The most share.delivery.count.limit a group may set.",
        validator=between(2, 10),
    ),
    ConfigDef(
        "group.share.partition.max.record.locks",
        I,
        2000,
        "The most records in flight (acquired, not yet acknowledged) in one share partition.",
        validator=between(100, 10000),
    ),
    ConfigDef(
        "group.share.min.partition.max.record.locks",
        I,
        100,
        "The least share.partition.max.record.locks a group may set.",
        validator=between(100, 10000),
    ),
    ConfigDef(
        "group.share.max.partition.max.record.locks",
        I,
        4000,
        "The most share.partition.max.record.locks a group may set.",
        validator=between(100, 10000),
    ),
    ConfigDef(
        "group.share.max.share.sessions",
        I,
        2000,
        "The most share sessions (ShareFetch, one per group and member) this broker keeps.",
        validator=at_least(1),
    ),
    # Kafka's share settings that name something brokkr does one way: taken at that value only.
    ConfigDef(
        "group.share.enable",
        B,
        True,
        "Kafka 4.2's old switch of share groups: brokkr serves them always (as Kafka does at share.version 1).",
        validator=only(
            True, why="share groups are always served (brokkr.plugins.disabled=brokkr.plugins.share turns them off)"
        ),
    ),
    ConfigDef(
        "group.share.persister.class.name",
        S,
        DEFAULT_STATE_PERSISTER,
        "Where share partitions keep their state: Kafka's DefaultStatePersister, the share coordinator.",
        validator=only(
            DEFAULT_STATE_PERSISTER, why="share state is kept by the share coordinator (__share_group_state)"
        ),
    ),
    ConfigDef(
        "share.fetch.purgatory.purge.interval.requests",
        I,
        1000,
        "Kafka's purge interval of waiting ShareFetch requests; brokkr's purgatory drops each one as it completes.",
        validator=only(1000, why="a completed ShareFetch leaves brokkr's purgatory at once, there is nothing to purge"),
    ),
    ConfigDef(
        "share.coordinator.state.topic.num.partitions",
        I,
        50,
        "The number of partitions of __share_group_state, fixed once it exists.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.state.topic.replication.factor",
        ConfigType.SHORT,
        3,
        "Replicas of each __share_group_state partition on a cluster; a broker alone keeps one.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.state.topic.min.isr",
        I,
        2,
        "min.insync.replicas of __share_group_state on a cluster.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.state.topic.segment.bytes",
        I,
        104857600,
        "The segment size of __share_group_state.",
        validator=at_least(14),
    ),
    ConfigDef(
        "share.coordinator.state.topic.compression.codec",
        I,
        0,
        "The codec of the share coordinator's writes, a Kafka compression id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.",
        validator=between(0, 4),
    ),
    ConfigDef(
        "share.coordinator.snapshot.update.records.per.snapshot",
        I,
        500,
        "How many ShareUpdate records a share partition gets between two full ShareSnapshot records.",
        validator=between(0, 500),
    ),
    ConfigDef(
        "share.coordinator.write.timeout.ms",
        I,
        5000,
        "How long a write of share state waits for the in-sync replicas.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.state.topic.prune.interval.ms",
        I,
        300000,
        "How often the share coordinator deletes the __share_group_state records older than every state's snapshot.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.cold.partition.snapshot.interval.ms",
        I,
        300000,
        "How often the share coordinator snapshots again the states not written since (so that pruning moves on).",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.load.buffer.size",
        I,
        5242880,
        "Bytes read per step when a __share_group_state partition loads.",
        validator=at_least(1),
    ),
    ConfigDef(
        "share.coordinator.threads",
        I,
        1,
        "Threads of the share coordinator: brokkr's runs on the broker's event loop.",
        validator=only(1, why="the share coordinator runs on the broker's one event loop"),
    ),
    ConfigDef(
        "share.coordinator.append.linger.ms",
        I,
        -1,
        "How long share state writes wait to be batched: brokkr appends each at once (-1, adaptive, or 0).",
        validator=only(-1, 0, why="the share coordinator appends each write at once, it never waits to batch them"),
    ),
    ConfigDef(
        "share.coordinator.cached.buffer.max.bytes",
        I,
        1048588,
        "Kafka's largest write buffer kept for reuse; brokkr's share coordinator keeps none.",
        validator=only(1048588, why="the share coordinator builds each write's batch anew and keeps no buffer"),
    ),
    # Share groups' membership (KIP-932; GroupCoordinatorConfig's group.share.*): plugins/groups/share_*.py;
    # a group's own share.session.timeout.ms, share.heartbeat.interval.ms stay within min..max (core/group_configs.py).
    ConfigDef(
        "group.share.session.timeout.ms",
        I,
        45000,
        "A share group member that sends no heartbeat for this long is removed from its group.",
        validator=at_least(1),
    ),
    ConfigDef("group.share.min.session.timeout.ms", I, 45000, "Least share.session.timeout.ms.", validator=at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", I, 60000, "Most share.session.timeout.ms.", validator=at_least(1)),
    ConfigDef(
        "group.share.heartbeat.interval.ms",
        I,
        5000,
        "The heartbeat interval given to share group members.",
        validator=at_least(1),
    ),
    ConfigDef(
        "group.share.min.heartbeat.interval.ms", I, 5000, "Least share.heartbeat.interval.ms.", validator=at_least(1)
    ),
    ConfigDef(
        "group.share.max.heartbeat.interval.ms", I, 15000, "Most share.heartbeat.interval.ms.", validator=at_least(1)
    ),
    ConfigDef(
        "group.share.max.size",
        I,
        200,
        "The most members a share group may have (else GROUP_MAX_SIZE_REACHED).",
        validator=between(1, 1000),
    ),
    ConfigDef(
        "group.share.assignors",
        LST,
        ["simple"],
        "The share groups' server-side assignor: exactly one, 'simple' (Kafka's SimpleAssignor, or its class name).",
        validator=_one_share_assignor,
    ),
    # Kafka 4.3's assignment batching (KIP-1263): brokkr computes a share group's target
    # assignment in the heartbeat that finds it out of date, so the interval is 0; a group's
    # own share.assignment.interval.ms likewise (core/group_configs.py). The consumer
    # protocol's group.consumer.* twins are declared in brokkr.plugins.groups.
    ConfigDef(
        "group.share.assignor.offload.enable",
        B,
        False,
        "Whether share groups' assignments are computed on a background thread: no (Kafka's default: true).",
        validator=only(False, why=ASSIGNS_ON_THE_LOOP),
    ),
    ConfigDef(
        "group.share.assignment.interval.ms",
        I,
        0,
        "Least time between two assignments of a share group: 0, brokkr assigns at once (Kafka's default: 1000).",
        validator=only(0, why=ASSIGNS_AT_ONCE),
    ),
    ConfigDef(
        "group.share.min.assignment.interval.ms",
        I,
        0,
        "Least share.assignment.interval.ms a group may set.",
        validator=only(0, why=ASSIGNS_AT_ONCE),
    ),
    ConfigDef(
        "group.share.max.assignment.interval.ms",
        I,
        15000,
        "Most share.assignment.interval.ms a group may set.",
        validator=at_least(0),
    ),
    ConfigDef(
        "group.share.initialize.retry.interval.ms",
        I,
        30000,
        "How long after a failed initialization of share state a share group tries its partitions again.",
        validator=at_least(1),
    ),
    ConfigDef("brokkr.storage", S, "segment", "Which storage plugin keeps the logs: segment (Kafka's files), memory."),
    ConfigDef(
        "brokkr.plugins",
        LST,
        [],
        "Plugins to load besides the entry points: importable modules or module:object, as pytest's -p.",
    ),
    ConfigDef("brokkr.plugins.disabled", LST, [], "Names of plugins not to load (built-in or entry point)."),
)


def _retention_ms(broker: Mapping[str, Any]) -> int:
    if broker.get("log.retention.ms") is not None:
        return broker["log.retention.ms"]
    if broker.get("log.retention.minutes") is not None:
        return broker["log.retention.minutes"] * 60_000
    return broker["log.retention.hours"] * 3_600_000


def _segment_ms(broker: Mapping[str, Any]) -> int:
    if broker.get("log.roll.ms") is not None:
        return broker["log.roll.ms"]
    return broker["log.roll.hours"] * 3_600_000


# Topic-level settings: name -> (definition, how the broker supplies its default).
TOPIC_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("cleanup.policy", LST, None, "delete and/or compact.", "log.cleanup.policy", one_of("delete", "compact")),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        D,
        None,
        "Dirty share before cleaning.",
        "log.cleaner.min.cleanable.ratio",
        between(0, 1),
    ),
    ConfigDef("min.compaction.lag.ms", L, None, "Age before compaction.", "log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", L, None, "Age by which to compact.", "log.cleaner.max.compaction.lag.ms"),
    ConfigDef("delete.retention.ms", L, None, "How long tombstones stay.", "log.cleaner.delete.retention.ms"),
    ConfigDef("compression.type", S, None, "Codec for stored batches.", "compression.type", one_of(*COMPRESSION_TYPES)),
    ConfigDef("max.message.bytes", I, None, "Largest record batch.", "message.max.bytes", at_least(0)),
    ConfigDef("min.insync.replicas", I, None, "Replicas needed for acks=-1.", "min.insync.replicas", at_least(1)),
    ConfigDef("retention.ms", L, None, "Retention time; -1 keeps forever.", "log.retention.ms"),
    ConfigDef("retention.bytes", L, None, "Retention size; -1 is unlimited.", "log.retention.bytes"),
    ConfigDef("segment.bytes", I, None, "Segment size before a roll.", "log.segment.bytes", at_least(14)),
    ConfigDef("segment.ms", L, None, "Segment age before a roll.", "log.roll.ms", at_least(1)),
    ConfigDef("segment.index.bytes", I, None, "Largest offset index file.", "log.index.size.max.bytes", at_least(4)),
    ConfigDef("index.interval.bytes", I, None, "Bytes between index entries.", "log.index.interval.bytes", at_least(0)),
    ConfigDef("flush.messages", L, None, "Messages between forced flushes.", "log.flush.interval.messages"),
    ConfigDef("flush.ms", L, None, "Time between forced flushes.", "log.flush.interval.ms"),
    ConfigDef(
        "message.timestamp.type",
        S,
        None,
        "CreateTime or LogAppendTime.",
        "log.message.timestamp.type",
        one_of("CreateTime", "LogAppendTime"),
    ),
    ConfigDef(
        "message.timestamp.before.max.ms", L, None, "Allowed timestamp age.", "log.message.timestamp.before.max.ms"
    ),
    ConfigDef(
        "message.timestamp.after.max.ms", L, None, "Allowed timestamp lead.", "log.message.timestamp.after.max.ms"
    ),
)
TOPIC_CONFIG_DEFS = {d.name: d for d in TOPIC_CONFIGS}


def _flush_ms(broker: Mapping[str, Any]) -> int:
    value = broker.get("log.flush.interval.ms")
    return LONG_MAX if value is None else value


_DERIVED = {"retention.ms": _retention_ms, "segment.ms": _segment_ms, "flush.ms": _flush_ms}
#: Broker settings that supply a topic setting's default, most specific first.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
}


def broker_synonyms(name: str) -> tuple[str, ...]:
    """The broker-level names behind topic setting ``name`` (none behind a plugin's)."""
    d = TOPIC_CONFIG_DEFS.get(name)
    return SYNONYMS.get(name, (d.synonym,) if d is not None else ())


#: Broker settings that change at run time (IncrementalAlterConfigs/AlterConfigs on a broker
#: resource), as Kafka's are: the log defaults behind topic settings, which every topic
#: without its own value then follows at once.
DYNAMIC_BROKER_CONFIGS = frozenset(s for name in TOPIC_CONFIG_DEFS for s in broker_synonyms(name) if s)


class NotDynamic(ConfigError):
    """A broker setting that cannot change at run time (Kafka: INVALID_REQUEST)."""


def check_dynamic(names: Iterable[str]) -> None:
    """Raise NotDynamic, as Kafka words it, unless every name is a dynamic broker setting."""
    fixed = sorted(set(names) - DYNAMIC_BROKER_CONFIGS)
    if fixed:
        raise NotDynamic(f"Cannot update these configs dynamically: {', '.join(fixed)}")


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a Java .properties file: ``key=value`` or ``key: value``, ``#``/``!`` comments,
    backslash line continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text().splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            out[line] = ""
            continue
        i = min(seps)
        out[line[:i].strip()] = line[i + 1 :].strip()
    return out


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override takes key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


LISTENER_PREFIX = "listener.name."
#: A JAAS configuration; Kafka's brokers read it only per listener and mechanism:
#: listener.name.<listener>.<mechanism>.sasl.jaas.config.
SASL_JAAS_CONFIG = ConfigDef("sasl.jaas.config", P, None, "JAAS login module options.", sensitive=True)


def listener_override_def(key: str, defs: Mapping[str, ConfigDef]) -> ConfigDef | None:
    """The definition of a per-listener setting: ``listener.name.<listener>.<setting>``, or
    ``listener.name.<listener>.<mechanism>.<setting>`` for SASL settings and
    ``connections.max.reauth.ms`` (Kafka's listener and mechanism prefixes)."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    _, _, setting = key[len(LISTENER_PREFIX) :].partition(".")
    d = defs.get(setting)
    if d is None:
        _, _, setting = setting.partition(".")
        if setting.startswith("sasl.") or setting == "connections.max.reauth.ms":
            d = SASL_JAAS_CONFIG if setting == SASL_JAAS_CONFIG.name else defs.get(setting)
    return None if d is None else attrs.evolve(d, name=key)


def listener_value(config: Mapping[str, Any], listener: str, name: str, mechanism: str | None = None) -> Any:
    """Setting ``name`` for one listener (and SASL mechanism): the most specific of
    ``listener.name.<listener>.<mechanism>.<name>``, ``listener.name.<listener>.<name>`` and
    ``name``, with the listener and mechanism names in lower case, as Kafka spells them."""
    prefix = f"{LISTENER_PREFIX}{listener.lower()}."
    if mechanism is not None and f"{prefix}{mechanism.lower()}.{name}" in config:
        return config[f"{prefix}{mechanism.lower()}.{name}"]
    return config.get(prefix + name, config.get(name))


def misspelt(name: str, known: Iterable[str]) -> str | None:
    """The known setting ``name`` is most likely a misspelling of: one or two letters
    off (added, dropped, changed or swapped; one for names under ten letters), else None."""
    allowed = 1 if len(name) < 10 else 2
    best = min(((_distance(name, k, allowed), k) for k in known), default=(allowed + 1, None))
    return best[1] if best[0] <= allowed else None


def _distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance between ``a`` and ``b``, or ``limit + 1`` once it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous, row = None, list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + (ca != cb))
            if previous is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous, row = row, current
    return row[-1]


class BrokerConfig(Mapping[str, Any]):
    """The broker's resolved settings: a read-only mapping of Kafka names to typed values."""

    def __init__(self, values: Mapping[str, Any] | None = None, defs: Iterable[ConfigDef] = ()):
        defs = tuple(defs)
        self.defs: dict[str, ConfigDef] = {d.name: d for d in (*BROKER_CONFIGS, *defs) if not d.topic}
        #: Topic settings: Kafka's, and those the plugins declare (``ConfigDef.topic``).
        self.topic_defs: dict[str, ConfigDef] = {**TOPIC_CONFIG_DEFS, **{d.name: d for d in defs if d.topic}}
        #: Told of every topic's settings as they are made (a topic created, loaded or altered,
        #: the broker defaults behind them changed) and of settings only being checked: a plugin
        #: whose work a topic setting turns on registers itself here (see ``ConfigDef.topic``).
        self.topic_config_watchers: list[Callable[[TopicConfig], None]] = []
        self.explicit: dict[str, Any] = {}
        for key, raw in (values or {}).items():
            d = self.definition(key)
            if d is None:
                meant = misspelt(key, [name for name, d in self.defs.items() if not d.prefix])
                if meant is not None:
                    raise ConfigError(f"Unknown configuration {key!r}: did you mean {meant!r}?")
                log.warning("The configuration %s was supplied but isn't a known config.", key)
                self.explicit[key] = raw
                continue
            self.explicit[key] = d.parse(raw)
        #: Set at run time (``set_dynamic``): the cluster-wide default ("") and this broker's (its id).
        self.dynamic: dict[str, dict[str, Any]] = {"": {}, "node": {}}
        self._resolve()

    def definition(self, name: str) -> ConfigDef | None:
        """The definition of setting ``name``: its own, the one of a per-listener setting
        (``listener.name.<listener>.<setting>``), or its family's; None for an unknown name."""
        return (
            self.defs.get(name)
            or listener_override_def(name, self.defs)
            or next(
                (attrs.evolve(d, name=name) for d in self.defs.values() if d.prefix and name.startswith(d.name)), None
            )
        )

    def sensitive(self, name: str) -> bool:
        """Whether the value of ``name`` is kept out of logs and tools (:func:`is_sensitive`)."""
        return is_sensitive(name, self.definition(name))

    def shown(self, name: str, value: Any) -> str | None:
        """``value`` of setting ``name`` as logs and tools print it: ``[hidden]`` when sensitive."""
        return HIDDEN if self.sensitive(name) else format_value(value)

    def _resolve(self) -> None:
        self._values = {name: d.default for name, d in self.defs.items()}
        self._values.update(self.explicit)
        self._values.update(self.dynamic[""])
        self._values.update(self.dynamic["node"])
        if self._values["log.dir"] is not None and "log.dirs" not in self.explicit:
            self._values["log.dirs"] = [self._values["log.dir"]]

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)  # Mapping.get's, without its Python-level try (asked per request)

    def set_dynamic(self, scope: str, settings: Mapping[str, str], validate_only: bool = False) -> None:
        """Replace the dynamic settings of ``scope`` ("" for the cluster-wide default, "node"
        for this broker's own) with ``settings`` (Kafka's strings), unless ``validate_only``.
        Raises NotDynamic for a setting that cannot change, ConfigError for a bad value;
        changes nothing then."""
        check_dynamic(settings)
        parsed = {name: self.defs[name].parse(value) for name, value in settings.items()}
        if not validate_only:
            self.dynamic[scope] = parsed
            self._resolve()

    def source(self, name: str) -> ConfigSource:
        if name in self.dynamic["node"]:
            return ConfigSource.DYNAMIC_BROKER_CONFIG
        if name in self.dynamic[""]:
            return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        return ConfigSource.STATIC_BROKER_CONFIG if name in self.explicit else ConfigSource.DEFAULT_CONFIG

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def topic_default(self, name: str) -> Any:
        derive = _DERIVED.get(name)
        if derive is not None:
            return derive(self)
        d = self.topic_defs[name]
        return d.default if d.topic else self._values[d.synonym]

    def topic_config(self, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        return TopicConfig(self, validate_topic_overrides(overrides or {}, self.topic_defs))


def validate_topic_overrides(
    overrides: Mapping[str, Any], defs: Mapping[str, ConfigDef] = TOPIC_CONFIG_DEFS
) -> dict[str, Any]:
    """Typed values for topic settings (``defs``: a broker's ``topic_defs``, plugins' included);
    ConfigError names an unknown key or bad value."""
    out = {}
    for key, raw in overrides.items():
        d = defs.get(key)
        if d is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        out[key] = d.parse(raw)
    return out


class TopicConfig(Mapping[str, Any]):
    """A topic's settings: its own overrides over the broker's defaults."""

    def __init__(self, broker: BrokerConfig, overrides: dict[str, Any]):
        self.broker = broker
        self.version = 0  # bumped by each replace(): readers that cache values check it
        self.replace(overrides)

    def replace(self, overrides: dict[str, Any]) -> None:
        """Make ``overrides`` (typed, validated) the topic's own settings, in place, so that
        everything holding this object (the topic, its partitions' logs) sees them at once."""
        values = {name: self.broker.topic_default(name) for name in self.broker.topic_defs}
        values.update(overrides)
        self.overrides, self._values = dict(overrides), values
        self.derived: dict[Any, Any] = {}  # what readers computed from these settings, by their key
        self.version += 1
        for watch in self.broker.topic_config_watchers:
            watch(self)

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def override_strings(self) -> dict[str, str]:
        """The topic's own settings as Kafka prints them (what a catalog stores)."""
        return {name: format_value(value) for name, value in self.overrides.items()}

    def source(self, name: str) -> ConfigSource:
        if name in self.overrides:
            return ConfigSource.TOPIC_CONFIG
        return min((self.broker.source(s) for s in broker_synonyms(name) if s), default=ConfigSource.DEFAULT_CONFIG)


def format_value(value: Any) -> str | None:
    """A typed value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)
