"""Hook specifications: every stage of brokkr's produce path is a hook.

A plugin is any object or module with functions named after these hooks and marked
with :data:`brokkr.core.plugins.hookimpl`. As with pluggy everywhere, an implementation
may accept any subset of a hook's arguments, so new arguments can be added to a
hookspec without breaking existing plugins.

The produce path, as :mod:`brokkr.core.apis.produce` drives it for one Produce
request (compare ``pytest_runtest_protocol``)::

    brokkr_decode_request                    once per request (every API)
    brokkr_authorize                         once, with a WRITE action per topic
    brokkr_transaction_verify                at most once, for the partitions where a
                                             transactional batch would start a transaction
    for each authorized partition:
        brokkr_validate_records              once per partition batch
        (producer state check)               a retried batch ends here: its original
                                             offsets are answered, no hook below runs
        PartitionLog.append                  (a log of the brokkr_open_storage storage)
        brokkr_after_log_append              once per partition batch
        brokkr_high_watermark_advanced       when the high watermark moves
        brokkr_segment_rolled                when the append rolled a segment
    if acks == -1:
        brokkr_produce_complete              per waiting partition, per check, until
                                             all agree or timeout_ms expires
    brokkr_quota_throttle_ms                 once, with the produced bytes and the time the
                                             broker spent on the request (every API takes
                                             this call; acks=0 without the time)

``brokkr_authenticate`` runs once per PLAINTEXT or SSL connection, before its first
request; a SASL connection's principal comes from its exchange with one of the
``brokkr_sasl_mechanisms``. A response with a throttle time (the largest
``brokkr_quota_throttle_ms`` result) is sent at once and its connection is then not read
for that long (KIP-219).
Start-up hooks (``brokkr_config_definitions``, ``brokkr_apis``, ``brokkr_internal_topics``,
``brokkr_codecs``, ``brokkr_open_storage``, ``brokkr_broker_starting``,
``brokkr_sasl_mechanisms``) run once per broker start; plugins with per-broker work
register their objects in ``brokkr_broker_starting``. Retention asks
``brokkr_sink_mirrored_offset`` per partition, so that no sink loses a segment it has not
mirrored. ``brokkr_request_completed`` observes every answered request, only when
implemented.

Decisions and observers: a *decision* hook's answer, or its exception, is part of what
the broker does (it refuses a start, fails a request, picks a codec, holds retention
back). An *observer* (:data:`OBSERVERS`) is told what has already happened; its failure
never changes an answer or what is readable: the exception is logged (once a minute per
hook and plugin, with the traceback the first time), counted (``broker.observer_failures``,
exported as ``brokkr_observer_failures_total{hook,plugin}``) and swallowed, and the other
implementations are still called. :class:`brokkr.core.plugins.HotHooks` is the one place
that calls observers: call them through ``broker.hot``, never ``broker.hook``.

======================================  =========  ======================================
hook                                    kind       what its exception does
======================================  =========  ======================================
``brokkr_config_definitions``           decision   the broker is not built
``brokkr_broker_starting``              decision   the start fails (ConfigError: refused)
``brokkr_broker_started``               decision   the broker stops again
``brokkr_broker_stopping``              observer   logged; the stop goes on
``brokkr_decode_request``               decision   the request fails (CorruptRequest: closed)
``brokkr_authenticate``                 decision   the connection is closed
``brokkr_sasl_mechanisms``              decision   the start fails
``brokkr_authorize``                    decision   the request fails (UNKNOWN_SERVER_ERROR)
``brokkr_acl_store``                    decision   the request fails
``brokkr_quota_throttle_ms``            decision   the connection is closed
``brokkr_client_quota_store``           decision   the request fails
``brokkr_apis``                         decision   the broker is not built
``brokkr_internal_topics``              decision   the broker is not built
``brokkr_codecs``                       decision   the start fails
``brokkr_validate_records``             decision   the partition's batch fails (UNKNOWN_SERVER_ERROR)
``brokkr_open_storage``                 decision   the start fails
``brokkr_cluster_membership``           decision   the start fails
``brokkr_became_leader``                observer   logged; the partition is led
``brokkr_became_follower``              observer   logged; the partition is followed
``brokkr_topic_deleted``                observer   logged; the topic stays deleted
``brokkr_transaction_verify``           decision   the Produce request fails
``brokkr_txn_marker_written``           observer   logged; the marker stands
``brokkr_produce_complete``             decision   the Produce request fails
``brokkr_after_log_append``             observer   logged; the batch is stored and visible
``brokkr_high_watermark_advanced``      observer   logged; the records are visible
``brokkr_segment_rolled``               observer   logged; the roll stands
``brokkr_request_completed``            observer   logged; the response is sent
``brokkr_connection_closed``            observer   logged; the connection is closed
``brokkr_metrics_collectors``           decision   the start fails (metrics on)
``brokkr_sink_mirrored_offset``         decision   retention skips this round
======================================  =========  ======================================

Rule for every hook: never called once per record. Implementations that pick an
implementation (codecs, storage) return objects the core keeps and calls directly.

Hot hooks: the hooks called for every request (decoding, authorization, validation, the
append observers, quotas, acks=-1 completion, ``brokkr_request_completed``) are resolved
once, not looked up through pluggy on each call (``broker.hot``,
:class:`brokkr.core.plugins.HotHooks`): a hook nobody implements is not called at all, a
hook with one plain implementation calls it directly. Registering or unregistering a
plugin at any time resolves them again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .apis import Api
    from .authorization import AclStore, Action, AuthorizationResult
    from .broker import Broker
    from .cluster import ClusterMembership
    from .config import ConfigDef
    from .context import ConnectionInfo, Principal, RequestContext
    from .errors import ErrorCode
    from .internal_topics import InternalTopic
    from .log import AppendInfo, SegmentInfo, Storage
    from .partition import Partition, Topic
    from .protocol.frames import RequestHeader
    from .protocol.primitives import Reader
    from .quotas import ClientQuotaStore
    from .sasl import SaslMechanism
    from .txn_markers import TxnMarker
    from .validation import Codec, ValidatedRecords

hookspec = pluggy.HookspecMarker("brokkr")

#: The hooks that only observe (see "Decisions and observers" above): an implementation's
#: exception is logged, counted and swallowed. Every other hook is a decision.
OBSERVERS = frozenset(
    {
        "brokkr_broker_stopping",
        "brokkr_became_leader",
        "brokkr_became_follower",
        "brokkr_topic_deleted",
        "brokkr_txn_marker_written",
        "brokkr_after_log_append",
        "brokkr_high_watermark_advanced",
        "brokkr_segment_rolled",
        "brokkr_request_completed",
        "brokkr_connection_closed",
    }
)


# -------------------------------------------------------------------------
# Start-up and lifecycle
# -------------------------------------------------------------------------


@hookspec
def brokkr_config_definitions() -> list[ConfigDef]:
    """Declare the settings a plugin reads, with their Kafka-style names and defaults.

    Called once when a broker's configuration is resolved, before any other hook.
    Values for these names from ``server.properties`` or ``--override`` are parsed and
    validated with the returned definitions and are then available as
    ``broker.config[name]``.
    A definition with ``topic=True`` declares a topic setting instead (CreateTopics,
    AlterConfigs and DescribeConfigs take it; ``partition.config[name]``, its ``default``
    where the topic has no value); ``broker.config.topic_config_watchers`` tells a plugin
    of each topic's settings as they are made.

    :return: A list of :class:`brokkr.core.config.ConfigDef`. All results are used.
    """


@hookspec
def brokkr_broker_starting(broker: Broker) -> None:
    """The broker's storage is open and its topics loaded; it does not listen yet.

    Called once per broker start, on the broker's event loop. A plugin whose work depends
    on the broker's settings registers its per-broker object here
    (``broker.pm.register(obj, name=...)``): its hooks then run for this broker only, and
    a plugin with nothing to do registers nothing, so it costs nothing per request. Raise
    :class:`brokkr.core.errors.ConfigError` to refuse to start (a missing extra, say): the
    broker closes its storage and the error reaches ``brokkr serve``.

    :param broker: The broker.
    """


@hookspec
def brokkr_broker_started(broker: Broker) -> None:
    """The broker is listening; ``broker.listeners`` holds the bound addresses.

    Called once per broker start, on the broker's event loop. A plugin that runs
    background work (a sink, a metrics reporter) starts it here.

    :param broker: The running broker.
    """


@hookspec
def brokkr_broker_stopping(broker: Broker) -> None:
    """The broker is shutting down and has stopped accepting connections.

    Called once, before logs are closed. Stop background work here.

    :param broker: The broker.
    """


# -------------------------------------------------------------------------
# Request decoding
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def brokkr_decode_request(header: RequestHeader, body: Reader, broker: Broker) -> Any | None:
    """Decode the body of one request whose header has already been parsed.

    Called once per request, for every API. The built-in implementation (trylast)
    decodes with the codecs built from Kafka's JSON message definitions; a plugin may
    return a faster or instrumented decoding of some APIs and ``None`` for the rest.
    The returned object must have the attributes of the built-in message classes,
    since the API handlers read them.

    Stops at first non-None result.

    :param header: The parsed request header (API key, version, correlation id, client id).
    :param body: A reader positioned at the first byte of the body; it must be consumed
        to its end.
    :param broker: The broker.
    :return: The decoded request, or ``None`` to let the next implementation decode it.
        Raise :class:`brokkr.core.errors.CorruptRequest` for bytes that do not parse:
        the connection is then closed, as Kafka closes it.
    """


# -------------------------------------------------------------------------
# Authentication and authorization
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def brokkr_authenticate(connection: ConnectionInfo, broker: Broker) -> Principal | None:
    """Give a new PLAINTEXT or SSL connection its principal (Kafka's ``KafkaPrincipalBuilder``).

    Called once per accepted connection on a PLAINTEXT or SSL listener, after the TLS
    handshake and before its first request is read. Connections on SASL listeners are
    not passed here: their principal is ``User:<authorization id>`` of the SASL exchange
    (see ``brokkr_sasl_mechanisms``). The built-in implementations (trylast) return
    ``User:ANONYMOUS`` on PLAINTEXT listeners and, on SSL listeners, ``User:`` and the
    client certificate's distinguished name (``User:CN=alice,O=example``), or
    ``User:ANONYMOUS`` without a client certificate, as Kafka's default builder does.
    A connection no plugin authenticates is closed.

    Stops at first non-None result.

    :param connection: The listener, security protocol and client address, and on SSL
        listeners the verified client certificate (``peer_certificate``).
    :param broker: The broker.
    :return: A :class:`brokkr.core.context.Principal`, or ``None`` to defer.
    """


@hookspec
def brokkr_sasl_mechanisms(broker: Broker) -> list[SaslMechanism]:
    """Provide SASL mechanisms for the listeners whose ``sasl.enabled.mechanisms`` name them.

    Called once per broker start, after the storage is open and before the broker
    listens, whatever its listeners. When two plugins provide a mechanism of the same
    name, the one registered last wins, so a plugin can replace a built-in mechanism.
    The built-in plugins provide ``PLAIN`` (``brokkr.plugins.auth.sasl_plain``, users
    from ``listener.name.<listener>.plain.sasl.jaas.config``) and ``SCRAM-SHA-256`` and
    ``SCRAM-SHA-512`` (``brokkr.plugins.auth.scram``, credentials kept in the storage).
    A listener enabling a mechanism that no plugin provides stops the broker from
    starting.

    Each mechanism's ``server(connection)`` is then called once per connection that picks
    it in SaslHandshake, and the returned exchange's ``step(token)`` once per
    SaslAuthenticate, on the event loop: keep it short. A step that raises
    :class:`brokkr.core.sasl.SaslAuthenticationException` (message shown to the client)
    or :class:`brokkr.core.sasl.SaslException` (message logged; the client reads Kafka's
    generic one) fails the authentication with SASL_AUTHENTICATION_FAILED.

    :param broker: The broker (``broker.config`` holds the per-listener settings).
    :return: A list of objects satisfying :class:`brokkr.core.sasl.SaslMechanism`.
    """


@hookspec
def brokkr_authorize(
    context: RequestContext, actions: list[Action], broker: Broker
) -> list[AuthorizationResult | None] | None:
    """Say, in one call, whether a request may perform each of its actions.

    Called once per request that needs authorization, with every action it needs (for a
    Produce request: WRITE on each topic named; for Metadata: DESCRIBE on each topic),
    except that some APIs ask again for what they learn while handling it. Semantics
    follow Kafka's ``Authorizer.authorize``.

    Every implementation is called, and their answers compose, per action: DENIED from
    any plugin wins; otherwise ALLOWED from any plugin allows; an action no plugin
    allows is denied. So a plugin can only narrow what the others allow, or allow what
    no other plugin has an opinion on; it never silently overrides another plugin's
    DENIED, in whatever order plugins are registered. The built-in implementations:
    with no ``authorizer.class.name``, ``allow_all`` allows everything (as a Kafka broker
    without an authorizer); with ``authorizer.class.name=acl`` the ACL authorizer answers
    every action (and ``allow_all`` has no opinion).

    :param context: Principal, client address, listener, client id and API of the request.
    :param actions: The actions, each an operation on a resource.
    :param broker: The broker.
    :return: One :class:`brokkr.core.authorization.AuthorizationResult` (or ``None``: no
        opinion) per action, in order; or ``None``: no opinion on any of them.
    """


@hookspec(firstresult=True)
def brokkr_acl_store(broker: Broker) -> AclStore | None:
    """The ACLs that CreateAcls, DescribeAcls and DeleteAcls manage.

    Called once per such request, after the request passed its own authorization (ALTER
    or DESCRIBE on the cluster) and validation. The built-in ACL authorizer
    (``authorizer.class.name=acl``) returns its store; with no answer the requests fail
    with SECURITY_DISABLED ("No Authorizer is configured."), as in Kafka. An authorizer
    that keeps no ACLs does not implement this hook.

    Stops at first non-None result.

    :param broker: The broker.
    :return: An object satisfying :class:`brokkr.core.authorization.AclStore`, or ``None``.
    """


# -------------------------------------------------------------------------
# Quotas
# -------------------------------------------------------------------------


@hookspec
def brokkr_quota_throttle_ms(context: RequestContext, usage: Mapping[str, float], broker: Broker) -> int | None:
    """Record a request's usage against quotas and say how long the client must be throttled.

    Called once per request, after it has been handled, with what it used by quota type:
    ``"produce"`` (bytes appended; Produce only), ``"fetch"`` (bytes returned; Fetch only)
    and ``"request"`` (milliseconds the broker spent on the request, waits excluded; every
    request but acks=0 Produce, which Kafka exempts). Record each type the plugin keeps a
    quota for and answer the largest throttle time among them, as Kafka throttles by the
    most violated quota.

    All results are used: the largest becomes the response's ``throttle_time_ms``, and the
    connection is not read for that long after the response is sent (KIP-219). Without
    any implementation nothing is throttled and nothing is called.

    :param context: The request's principal, client id and listener.
    :param usage: The amount used, by quota type.
    :param broker: The broker.
    :return: Throttle time in milliseconds (0 or ``None`` for none).
    """


@hookspec(firstresult=True)
def brokkr_client_quota_store(broker: Broker) -> ClientQuotaStore | None:
    """The client quota settings that AlterClientQuotas and DescribeClientQuotas manage.

    Called once per such request, after the request was authorized (ALTER_CONFIGS or
    DESCRIBE_CONFIGS on the cluster) and its entities and keys validated. The built-in
    quota plugin (Kafka's ``ClientQuotaManager``) returns its store, whose settings it
    enforces through ``brokkr_quota_throttle_ms``.

    Stops at first non-None result.

    :param broker: The broker.
    :return: An object satisfying :class:`brokkr.core.quotas.ClientQuotaStore`, or ``None``.
    """


# -------------------------------------------------------------------------
# Kafka APIs
# -------------------------------------------------------------------------


@hookspec
def brokkr_apis(broker: Broker) -> list[Api]:
    """Contribute Kafka APIs: the broker serves, and advertises in ApiVersions, exactly
    the APIs contributed here.

    Called once per broker, at construction; requests then look their API up in that
    table, so serving an API costs no hook call per request. When two plugins contribute
    the same key, the one registered last wins: core's own APIs come from the built-in
    plugin ``brokkr.core.apis.builtin``, so any plugin can replace one of them or add an
    API core does not serve, without touching core. Requests are decoded by
    ``brokkr_decode_request`` (the built-in decoder knows every API in Kafka's message
    definitions).

    :param broker: The broker.
    :return: A list of :class:`brokkr.core.apis.Api`: the key, the versions served, an
        async ``handle(broker, ctx, request)`` returning the response body (``None``: no
        response) and ``error_response(request, code)`` answering the whole request with
        one error code (UNSUPPORTED_VERSION, failures of the handler).
    """


@hookspec
def brokkr_internal_topics(broker: Broker) -> list[InternalTopic]:
    """Declare the internal topics a plugin owns (Kafka's ``Topic.isInternal``): the
    compacted topics a coordinator keeps its state in, with the broker settings they are
    created from (:class:`brokkr.core.internal_topics.InternalTopic`).

    Called once per broker, at construction (before its storage opens, which adopts their
    unlisted partition directories with their own settings); the broker keeps the answers
    as ``broker.internal_topics``. A declared topic is created only by its owner (the
    object registered under ``owner``, through its ``create_topic()``), with its own
    settings; clients may neither create it (CreateTopics: INVALID_REQUEST) nor produce to
    it (INVALID_TOPIC_EXCEPTION). All results are used.

    :param broker: The broker.
    :return: A list of :class:`brokkr.core.internal_topics.InternalTopic`.
    """


# -------------------------------------------------------------------------
# Record validation and conversion
# -------------------------------------------------------------------------


@hookspec
def brokkr_codecs(broker: Broker) -> list[Codec]:
    """Provide compression codecs, keyed by Kafka's compression id (0 none, 1 gzip, ...).

    Called once at broker start. When two plugins provide the same id, the one
    registered last wins, so a third-party plugin can replace a built-in codec. Return
    new objects on each call: each broker calls its codecs from its own event loop.

    :param broker: The broker.
    :return: A list of objects satisfying :class:`brokkr.core.compression.Codec`, whose
        ``decompress`` faces producers' bytes: it keeps to a size bound and raises only
        :class:`brokkr.core.compression.DecompressionError`.
    """


@hookspec(firstresult=True)
def brokkr_validate_records(
    partition: Partition, records: memoryview, context: RequestContext, broker: Broker
) -> ValidatedRecords | Awaitable[ValidatedRecords] | None:
    """Validate (and possibly convert) the record set produced to one partition.

    Called once per partition per Produce request, before offsets are assigned, on the
    event loop. The built-in validator (trylast, :mod:`brokkr.core.validation`) checks
    what Kafka checks before an append (one batch of magic 2, sizes, CRC-32C, the offset
    range, no control batch, keys on compacted topics, timestamp bounds) and converts the
    batch to the topic's ``compression.type`` and ``message.timestamp.type``. What reads
    only the header runs at once; walking the records of a large or compressed batch is
    returned as an awaitable that runs in the broker's worker processes
    (:mod:`brokkr.core.offload`), so that other connections are not held up. A plugin
    doing heavy work should do the same (e.g. ``loop.run_in_executor``); the append
    follows once the awaitable is done, and is dropped if the partition was deleted
    meanwhile.

    Stops at first non-None result.

    :param partition: The partition being written (its ``config`` is the topic's).
    :param records: The bytes the producer sent for this partition.
    :param context: The request context.
    :param broker: The broker.
    :return: :class:`brokkr.core.validation.ValidatedRecords`: bytes ready for offset
        assignment, or an awaitable of them. Raise (or let the awaitable raise)
        :class:`brokkr.core.validation.RecordsError` to reject the partition's records
        with a Kafka error code.
    """


# -------------------------------------------------------------------------
# Log append (storage)
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def brokkr_open_storage(broker: Broker) -> Storage | None:
    """Open the storage that keeps the broker's topics and partition logs.

    Called once, when the broker starts, before any topic is loaded or created. The
    returned :class:`brokkr.core.log.Storage` lists the topics it kept
    (``load_topics``) and opens one :class:`brokkr.core.log.PartitionLog` per partition;
    the core then calls those logs' ``append``/``read`` directly on the hot path.
    Storage plugins check ``broker.config["brokkr.storage"]`` and return ``None`` when
    another backend is selected. A durable backend that remembers the cluster id may
    restore ``broker.cluster_id`` here.

    Stops at first non-None result.

    :param broker: The broker (its ``config`` holds ``log.dirs`` and the log defaults).
    :return: An object satisfying :class:`brokkr.core.log.Storage`, or ``None``.
    """


# -------------------------------------------------------------------------
# Cluster membership and partition leadership (replication)
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def brokkr_cluster_membership(broker: Broker) -> ClusterMembership | None:
    """Provide the membership through which this broker joins a cluster.

    Called once, when the broker starts listening. The built-in ZooKeeper plugin answers
    when ``zookeeper.connect`` is set; with no answer the broker runs alone, leading every
    partition. See :mod:`brokkr.core.cluster` for what a membership must do.

    Stops at first non-None result.

    :param broker: The broker.
    :return: An object satisfying :class:`brokkr.core.cluster.ClusterMembership`, or ``None``.
    """


@hookspec
def brokkr_became_leader(partition: Partition, broker: Broker) -> None:
    """This broker now leads ``partition`` (at ``partition.leader_epoch``).

    Called on the broker's event loop when the cluster makes this broker the partition's
    leader, or leader again at a new epoch; alone, for every partition the broker opens
    (at start, once the plugins' objects exist: after ``brokkr_broker_starting``; when a
    topic is created or grows, once its new partitions are open). Coordinators that keep
    their state in a partition (the group coordinator, ``__consumer_offsets``) load it here.

    :param partition: The partition.
    :param broker: The broker.
    """


@hookspec
def brokkr_became_follower(partition: Partition, broker: Broker) -> None:
    """This broker led ``partition`` and now follows another leader: drop what was served
    from it (coordinators unload their groups).

    Called on the broker's event loop, once per loss of leadership, after the local log
    was truncated to the high watermark.

    :param partition: The partition.
    :param broker: The broker.
    """


@hookspec
def brokkr_topic_deleted(topic: Topic, broker: Broker) -> None:
    """``topic`` was deleted here: its partitions' logs are gone and it is no longer in
    ``broker.topics``. Called on the broker's event loop, once per deletion: alone, by
    DeleteTopics; on a cluster, when this broker applies the cluster's deletion (also of a
    topic recreated under the same name: the old topic id goes). Plugins drop what they
    keep of it (share groups delete its share-partition state, as Kafka's coordinators
    do when a metadata update deletes a topic id).

    :param topic: The deleted topic (its ``topic_id`` and ``partitions``, now deleted).
    :param broker: The broker.
    """


# -------------------------------------------------------------------------
# Transactions (the partition side)
# -------------------------------------------------------------------------


@hookspec(firstresult=True)
def brokkr_transaction_verify(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
    broker: Broker,
    produce_version: int,
) -> Awaitable[dict[tuple[str, int], ErrorCode]] | None:
    """Ask the transaction coordinator whether a transaction holds these partitions
    (KIP-890 part 1: transactional batches for a partition never added are refused).

    Called at most once per Produce request, after authorization, with the partitions
    of the request whose transactional batch would *start* a transaction there (the
    partition's producer state has no open transaction for ``producer_id``); a request
    whose batches all continue open transactions makes no call.

    Stops at the first non-None result. No implementation: no verification (the
    batches are appended as they are).

    :param transactional_id: The Produce request's transactional id.
    :param producer_id: The producer id of the transactional batches.
    :param producer_epoch: Their producer epoch.
    :param partitions: ``(topic, partition)`` pairs to verify.
    :param broker: The broker (a coordinator elsewhere is asked through its client).
    :param produce_version: The Produce request's version: from v12 (transaction version
        2, KIP-890 part 2) Kafka's leader asks the coordinator to *add* the partitions
        rather than only verify them; an implementation that only verifies may ignore it.
    :return: An awaitable of, per partition, ``ErrorCode.NONE`` (the transaction holds
        it) or the error that partition is answered with (Kafka: INVALID_TXN_STATE for a
        partition not added, or the coordinator's error such as NOT_COORDINATOR); a
        partition missing from the answer is refused with INVALID_TXN_STATE.
    """


@hookspec
def brokkr_txn_marker_written(partition: Partition, marker: TxnMarker, offset: int, broker: Broker) -> None:
    """A COMMIT or ABORT marker was appended to a partition this broker leads.

    Called once per partition per marker, on the event loop, right after the append and
    before its replication is awaited (the group coordinator makes a transaction's
    offset commits visible on ``__consumer_offsets`` here, as Kafka's
    ``onTransactionCompleted``). Followers do not call it.

    :param partition: The partition written.
    :param marker: The transaction's outcome (:class:`brokkr.core.txn_markers.TxnMarker`).
    :param offset: The marker's offset.
    :param broker: The broker.
    """


# -------------------------------------------------------------------------
# Delayed-operation completion (acks=-1)
# -------------------------------------------------------------------------


@hookspec
def brokkr_produce_complete(partition: Partition, required_offset: int, broker: Broker) -> bool | None:
    """Say whether an acks=-1 write to ``partition`` is acknowledged enough to answer.

    Called for each partition of a delayed produce when the operation is checked: once
    right after the append, and again whenever that partition's high watermark moves,
    until all partitions are complete or ``timeout_ms`` expires (the partitions still
    waiting then answer REQUEST_TIMED_OUT). The built-in check (Kafka's
    ``DelayedProduce``) is: the high watermark has reached ``required_offset``.

    All results are used: the partition is complete only when every non-None result
    is true. A partition whose topic is deleted while it waits is complete without
    asking (answered UNKNOWN_TOPIC_OR_PARTITION, as Kafka's DelayedProduce does).

    :param partition: The partition written.
    :param required_offset: One past the last offset of the appended batch.
    :param broker: The broker.
    :return: ``True`` when complete, ``False`` to keep waiting, ``None`` for no opinion.
    """


# -------------------------------------------------------------------------
# Observers (then two decisions: metrics' collectors, sinks' progress)
# -------------------------------------------------------------------------


@hookspec
def brokkr_after_log_append(partition: Partition, info: AppendInfo, broker: Broker) -> None:
    """A batch was appended to a partition's log.

    Called once per appended partition batch, on the event loop, before the response
    is sent. Keep it cheap: it is on the produce path. Not called for an idempotent
    producer's retry of a batch already in the log, which is answered with the original
    offsets and not appended again.

    :param partition: The partition written.
    :param info: First and last offset, record count, max timestamp and size.
    :param broker: The broker.
    """


@hookspec
def brokkr_high_watermark_advanced(partition: Partition, old: int, new: int, broker: Broker) -> None:
    """A partition's high watermark moved from ``old`` to ``new``.

    Called each time it advances (with one replica, after every append). Records
    below ``new`` are now visible to consumers.
    """


@hookspec
def brokkr_segment_rolled(partition: Partition, segment: SegmentInfo, broker: Broker) -> None:
    """A partition's active segment was closed and a new one started.

    Called once per roll. ``segment`` describes the closed segment, which will not
    change again (until retention deletes it); sinks mirror closed segments from here.
    """


@hookspec
def brokkr_request_completed(
    context: RequestContext, header: RequestHeader, response: Any, elapsed_ms: float, broker: Broker
) -> None:
    """A request was answered (metrics, request logs, audits).

    Called once per answered request (not for acks=0 produce), on the event loop, after
    the response is encoded. Without an implementation the request path pays nothing for
    it (see "Hot hooks" above). Keep it cheap.

    :param context: The request context (principal, listener, client id, API version).
    :param header: The request header (API key and name, version, correlation id).
    :param response: The response object, as encoded (its ``error_code`` fields tell how
        it went).
    :param elapsed_ms: The time from the frame's arrival at the handler to its encoded
        response, waits in the purgatory included (Kafka's TotalTimeMs).
    :param broker: The broker.
    """


@hookspec
def brokkr_connection_closed(connection: ConnectionInfo, broker: Broker) -> None:
    """A client's connection closed (the client went away, the broker closed it, or the
    broker is stopping): what a plugin keeps per connection goes with it (share sessions
    release their records, as Kafka's ConnectionDisconnectListener makes them).

    Called once per accepted connection, on the event loop, after it is closed.

    :param connection: The connection (its ``connection_id`` as request contexts carry it).
    :param broker: The broker.
    """


@hookspec
def brokkr_metrics_collectors(broker: Broker) -> list[Any]:
    """Provide Prometheus collectors to export beside the broker's metrics.

    Called once, when the metrics endpoint starts (``brokkr.metrics.port`` set). Each
    collector is registered in the broker's own registry (``prometheus_client``
    collectors: objects with ``collect()``, or metrics created with ``registry=None``).

    :param broker: The broker.
    :return: A list of collectors. All results are used.
    """


@hookspec
def brokkr_sink_mirrored_offset(partition: Partition, broker: Broker) -> int | None:
    """How far a sink has mirrored ``partition``: every offset below the result is stored
    durably at the sink's destination (see :mod:`brokkr.core.sinks`).

    Called by retention (every ``log.retention.check.interval.ms``) for each partition.
    Retention never drops a segment holding an offset at or above the smallest result, so
    a segment is not deleted before every sink has mirrored it. Answer quickly, from what
    the sink already knows (no I/O to the destination).

    :param partition: The partition retention is looking at.
    :param broker: The broker.
    :return: The offset mirrored up to (exclusive), or ``None`` when the sink does not
        mirror this partition or lets retention proceed regardless. All results are used.

    Example, a sink that has mirrored everything below offset 100 of ``orders-0``::

        @hookimpl
        def brokkr_sink_mirrored_offset(partition, broker):
            if (partition.topic.name, partition.index) == ("orders", 0):
                return 100
            return None
    """
