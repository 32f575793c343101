"""DeleteTopics (key 20), versions 1-6 (v6 names topics by name or by id)."""

from __future__ import annotations

from ..authorization import AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..protocol.primitives import ZERO_UUID
from . import Api

KEY = 20
_R = response_spec(KEY)
DeleteTopicsResponse = _R.cls
DeletableTopicResult = _R.struct("DeletableTopicResult")


def _targets(request) -> list[tuple[str | None, object]]:
    """(name, id) pairs: v6 fills ``topics``, older versions ``topic_names``."""
    return [(t.name, t.topic_id) for t in request.topics] + [(n, ZERO_UUID) for n in request.topic_names]


async def handle(broker, ctx, request):
    results = []
    resolved = []
    for name, topic_id in _targets(request):
        res = DeletableTopicResult(name=name, topic_id=topic_id, error_code=ErrorCode.NONE)
        results.append(res)
        if name is not None and topic_id != ZERO_UUID:
            res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Only one of name or topic id may be set"
        elif name is None:
            topic = broker.topics_by_id.get(topic_id)
            if topic is None:
                res.error_code = ErrorCode.UNKNOWN_TOPIC_ID
            else:
                res.name = topic.name
                resolved.append(res)
        else:
            resolved.append(res)
    allowed = broker.authorize_topics(ctx, AclOperation.DELETE, (r.name for r in resolved))
    for res in resolved:
        await broker.growth_done(res.name)  # a CreatePartitions growing it ends first
        topic = broker.topics.get(res.name)
        if not allowed[res.name]:
            res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            res.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        elif not broker.config["delete.topic.enable"]:
            res.error_code, res.error_message = ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled."
        else:
            res.topic_id = topic.topic_id
            if broker.replicas is not None:  # every replica goes once the cluster drops the topic
                await broker.replicas.membership.delete_topic(res.name)
            else:
                broker.delete_topic(res.name)
    return DeleteTopicsResponse(responses=results)


def error_response(request, code):
    return DeleteTopicsResponse(
        responses=[DeletableTopicResult(name=n, topic_id=i, error_code=code) for n, i in _targets(request)]
    )


API = Api(KEY, 1, 6, handle, error_response)
