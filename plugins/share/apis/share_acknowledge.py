"""ShareAcknowledge (key 79), versions 1-2 (Kafka 4.2's; KafkaApis.handleShareAcknowledgeRequest).

Acknowledgements of records a member acquired, in its share session (which it never opens:
epoch 0 answers INVALID_SHARE_SESSION_EPOCH; epoch -1 closes it afterwards, releasing what
the member still holds): Accept (1), Release (2), Reject (3), Renew (4, v2 with
``IsRenewAck``), Gap (0) for offsets without a record, one type for a whole batch or one per
offset. Each partition's new state is written to the share coordinator before it is
answered. Errors as ShareFetch's (:mod:`.share_fetch`).
"""

from __future__ import annotations

from brokkr.core.apis import Api
from brokkr.core.authorization import AclOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..manager import FINAL_EPOCH, SessionError
from ..partition import group_setting
from . import acknowledge, check_ack_batches, refusal
from .share_fetch import _leader, _manager

KEY = 79
_R = response_spec(KEY)
ShareAcknowledgeResponse = _R.cls
TopicResponse = _R.struct("ShareAcknowledgeTopicResponse")
PartitionData = _R.struct("PartitionData")


async def handle(broker, ctx, request):
    version = ctx.api_version
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    refused = refusal(broker, ctx, request)
    if refused is not None:
        return error_response(request, refused)
    renew = version >= 2 and request.is_renew_ack
    manager = _manager(broker)
    try:
        session = manager.acknowledge_session(group_id, member_id, epoch)
    except SessionError as exc:
        return error_response(request, exc.code)
    topics = {t.topic_id: broker.topics_by_id.get(t.topic_id) for t in request.topics}
    allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.name for t in topics.values() if t is not None])
    endpoints: dict = {}
    responses = []
    for t in request.topics:
        topic = topics[t.topic_id]
        parts = []
        for p in t.partitions:
            if topic is None:
                error = ErrorCode.UNKNOWN_TOPIC_ID
            elif not allowed.get(topic.name, False):
                error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                error = check_ack_batches(p.acknowledgement_batches, version, renew)
            if not error:
                error = await acknowledge(
                    broker, manager, group_id, member_id, topic, p.partition_index, p.acknowledgement_batches
                )
            leader = _leader(broker, ctx, (t.topic_id, p.partition_index), error, endpoints)
            parts.append(PartitionData(partition_index=p.partition_index, error_code=error, current_leader=leader))
        responses.append(TopicResponse(topic_id=t.topic_id, partitions=parts))
    if epoch == FINAL_EPOCH:
        manager.close_session(session)
    return ShareAcknowledgeResponse(
        error_code=ErrorCode.NONE,
        acquisition_lock_timeout_ms=group_setting(broker, group_id, "share.record.lock.duration.ms"),
        responses=responses,
        node_endpoints=list(endpoints.values()),
    )


def error_response(request, code):
    return ShareAcknowledgeResponse(error_code=code, responses=[], node_endpoints=[])


API = Api(KEY, 1, 2, handle, error_response)
