"""CreateTopics (key 19), versions 2-7, with Kafka's validation and error codes.

An internal topic (``broker.internal_topics``: ``__consumer_offsets``, ...) is created only
by its owner, with its own settings: a client's request answers INVALID_REQUEST in the
words Kafka refuses ``__cluster_metadata`` with. (Kafka itself creates ``__consumer_offsets``
for a client with the partition count asked, which its coordinator then has to live with.)
"""

from __future__ import annotations

from collections import Counter

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..config import format_value, validate_topic_overrides
from ..errors import BrokkrError, ConfigError, ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 19
_R = response_spec(KEY)
CreateTopicsResponse = _R.cls
CreatableTopicResult = _R.struct("CreatableTopicResult")
CreatableTopicConfigs = _R.struct("CreatableTopicConfigs")


def _check(broker, t) -> tuple[int, dict, int, dict[int, tuple[int, ...]] | None]:
    """Validate one creatable topic; returns (partitions, config overrides, replication
    factor, explicit replica assignment or None) or raises."""
    if t.name in broker.internal_topics:  # its owner creates it, with its own settings (core/internal_topics.py)
        raise BrokkrError(f"Creation of internal topic {t.name} is prohibited.", ErrorCode.INVALID_REQUEST)
    broker.check_new_topic_name(t.name)
    live = set(broker.replicas.membership.brokers()) if broker.replicas is not None else {broker.node_id}
    assignment = None
    if t.assignments:
        if t.num_partitions != -1 or t.replication_factor != -1:
            raise BrokkrError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at "
                "the same time.",
                ErrorCode.INVALID_REQUEST,
            )
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            raise BrokkrError(
                "Partitions should be a consecutive 0-based integer sequence", ErrorCode.INVALID_REPLICA_ASSIGNMENT
            )
        assignment = {}
        for a in t.assignments:
            if not a.broker_ids or len(set(a.broker_ids)) != len(a.broker_ids) or not set(a.broker_ids) <= live:
                raise BrokkrError(
                    f"Replica assignment {a.broker_ids} for partition {a.partition_index} is empty, repeats a broker "
                    f"or names brokers other than those registered ({sorted(live)})",
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
            assignment[a.partition_index] = tuple(a.broker_ids)
        if len({len(r) for r in assignment.values()}) != 1:
            raise BrokkrError(
                "All partitions should have the same number of replicas", ErrorCode.INVALID_REPLICA_ASSIGNMENT
            )
        partitions, rf = len(indexes), len(assignment[0])
    else:
        partitions = broker.config["num.partitions"] if t.num_partitions == -1 else t.num_partitions
        if partitions <= 0:
            raise BrokkrError(
                "Number of partitions was set to an invalid non-positive value.", ErrorCode.INVALID_PARTITIONS
            )
        rf = broker.config["default.replication.factor"] if t.replication_factor == -1 else t.replication_factor
        if rf <= 0:
            raise BrokkrError("Replication factor must be larger than 0.", ErrorCode.INVALID_REPLICATION_FACTOR)
        if rf > len(live):
            raise BrokkrError(
                f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be "
                f"reached because only {len(live)} broker(s) are registered.",
                ErrorCode.INVALID_REPLICATION_FACTOR,
            )
    try:
        overrides = validate_topic_overrides(
            {c.name: c.value for c in t.configs if c.value is not None}, broker.config.topic_defs
        )
    except ConfigError as exc:
        raise BrokkrError(str(exc), ErrorCode.INVALID_CONFIG) from None
    return partitions, overrides, rf, assignment


async def handle(broker, ctx, request):
    counts = Counter(t.name for t in request.topics)
    cluster_ok = broker.authorize(
        ctx, [Action(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False)]
    )[0]
    names = sorted(counts)
    topic_ok = dict(
        zip(
            names,
            [True] * len(names)
            if cluster_ok
            else broker.authorize(ctx, [Action(AclOperation.CREATE, ResourceType.TOPIC, n) for n in names]),
        )
    )
    results = []
    for t in request.topics:
        res = CreatableTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(res)
        if counts[t.name] > 1:
            res.error_code, res.error_message = (
                ErrorCode.INVALID_REQUEST,
                "Create topics request from client contains a duplicate topic",
            )
            continue
        if not topic_ok[t.name]:
            res.error_code, res.error_message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
            continue
        try:
            partitions, overrides, rf, assignment = _check(broker, t)
            if request.validate_only:
                config = broker.config.topic_config(overrides)
                topic_id = None
            elif broker.replicas is not None:
                created = await broker.replicas.create_topic(t.name, partitions, rf, overrides, assignment)
                config, topic_id = broker.config.topic_config(created.configs), created.topic_id
            else:
                topic = await broker.create_topic_in_turns(t.name, partitions, overrides)
                config, topic_id = topic.config, topic.topic_id
        except BrokkrError as exc:
            res.error_code, res.error_message = exc.code, str(exc)
            continue
        if topic_id is not None:
            res.topic_id = topic_id
        res.num_partitions = partitions
        res.replication_factor = rf
        res.configs = [
            CreatableTopicConfigs(
                name=name,
                value=format_value(config[name]),
                read_only=False,
                config_source=config.source(name),
                is_sensitive=False,
            )
            for name in sorted(config)
        ]
    return CreateTopicsResponse(topics=results)


def error_response(request, code):
    return CreateTopicsResponse(topics=[CreatableTopicResult(name=t.name, error_code=code) for t in request.topics])


API = Api(KEY, 2, 7, handle, error_response)
