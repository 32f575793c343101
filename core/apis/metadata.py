"""Metadata (key 3), versions 0-13: brokers, topics (with topic ids from v10), partitions.

Requesting an unknown topic creates it when both the request (v4+) and
``auto.create.topics.enable`` allow it and the principal may CREATE it, with
``num.partitions`` partitions; an internal topic (``broker.internal_topics``) is created
by its owner instead, with its own settings, as Kafka's AutoTopicCreationManager creates
it, and answers LEADER_NOT_AVAILABLE meanwhile. Topics the principal may not DESCRIBE are
left out of an all-topics answer, and answer TOPIC_AUTHORIZATION_FAILED when named. The broker is
given as the client reached it: the listener it connected on, as ``advertised.listeners``
names it.
"""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import cluster_authorized_operations, cluster_brokers, leadership, topic_authorized_operations

KEY = 3
_R = response_spec(KEY)
MetadataResponse = _R.cls
MetadataResponseBroker = _R.struct("MetadataResponseBroker")
MetadataResponseTopic = _R.struct("MetadataResponseTopic")
MetadataResponsePartition = _R.struct("MetadataResponsePartition")


def _topic_response(broker, topic) -> MetadataResponseTopic:
    return MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.name in broker.internal_topics,
        partitions=[MetadataResponsePartition(**leadership(broker, topic, i)) for i in range(len(topic.partitions))],
    )


async def handle(broker, ctx, request):
    v = ctx.api_version
    requested = request.topics
    all_topics = requested is None or (v == 0 and not requested)
    brokers, controller = cluster_brokers(broker, ctx.listener)
    response = MetadataResponse(
        brokers=[MetadataResponseBroker(node_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers],
        cluster_id=broker.cluster_id,
        controller_id=controller,
    )
    if all_topics:
        names = sorted(broker.topics)
        allowed = broker.authorize(
            ctx, [Action(AclOperation.DESCRIBE, ResourceType.TOPIC, n, log_if_denied=False) for n in names]
        )
        response.topics = [_topic_response(broker, broker.topics[n]) for n, ok in zip(names, allowed) if ok]
    else:
        response.topics = await _requested_topics(broker, ctx, request)
    if v >= 8 and v <= 10 and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = cluster_authorized_operations(broker, ctx)
    if request.include_topic_authorized_operations:
        ops = topic_authorized_operations(broker, ctx, [t.name for t in response.topics if not t.error_code])
        for t in response.topics:
            if t.name in ops:
                t.topic_authorized_operations = ops[t.name]
    return response


async def _requested_topics(broker, ctx, request) -> list:
    out = []
    by_name = []
    ids = {}  # names of the topics requested by id (v12+), and their ids
    for rt in request.topics:
        if rt.name is None:
            topic = broker.topics_by_id.get(rt.topic_id)
            if topic is None:
                out.append(
                    MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=rt.topic_id)
                )
            else:
                by_name.append(topic.name)
                ids[topic.name] = topic.topic_id
        else:
            by_name.append(rt.name)
    by_name = list(dict.fromkeys(by_name))
    describe = broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.TOPIC, n) for n in by_name])
    missing = [n for n, ok in zip(by_name, describe) if ok and n not in broker.topics]
    may_create = {}
    if missing and request.allow_auto_topic_creation and broker.config["auto.create.topics.enable"]:
        cluster_ok = broker.authorize(
            ctx, [Action(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=False)]
        )[0]
        per_topic = (
            [True] * len(missing)
            if cluster_ok
            else broker.authorize(ctx, [Action(AclOperation.CREATE, ResourceType.TOPIC, n) for n in missing])
        )
        may_create = dict(zip(missing, per_topic))
    for name, ok in zip(by_name, describe):
        if not ok:  # a topic asked for by id is answered by id, its name withheld (as in Kafka)
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if name in ids:
                out.append(MetadataResponseTopic(error_code=code, name=None, topic_id=ids[name]))
            else:
                out.append(MetadataResponseTopic(error_code=code, name=name))
            continue
        topic = broker.topics.get(name)
        if topic is None:
            if name not in may_create:
                out.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            if not may_create[name]:
                out.append(MetadataResponseTopic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
                continue
            internal = broker.internal_topics.get(name)
            if internal is not None:  # created by its owner, with its own settings
                internal.start_creation(broker)
                created = MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name, is_internal=True)
                out.append(created)
                continue
            if name in broker.creating_topics:  # another request is creating it: its leader comes next
                out.append(MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name))
                continue
            try:
                if broker.replicas is not None:  # created on the cluster; its leaders come next
                    await broker.replicas.create_topic(name)
                    out.append(MetadataResponseTopic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name))
                    continue
                topic = await broker.create_topic_in_turns(name)
            except BrokkrError as exc:
                out.append(MetadataResponseTopic(error_code=exc.code, name=name))
                continue
        out.append(_topic_response(broker, topic))
    return out


def error_response(request, code):
    return MetadataResponse(
        error_code=code,
        topics=[MetadataResponseTopic(error_code=code, name=t.name, topic_id=t.topic_id) for t in request.topics or []],
    )


API = Api(KEY, 0, 13, handle, error_response)
