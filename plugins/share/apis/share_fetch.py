"""ShareFetch (key 78), versions 1-2 (Kafka 4.2's; KafkaApis.handleShareFetchRequest).

A share consumer's fetch in its share session (see :mod:`brokkr.plugins.share.manager`):
the acknowledgements it carries are applied first (and written to the share coordinator),
then records are acquired for the member from the session's partitions, at most
``MaxRecords`` in all (``ShareAcquireMode`` 0, batch_optimized: whole batches, which may
pass it; 1, record_limit: exactly; 0 or less: none, answered at once, as Kafka), within
``MaxBytes``, starting at the partition the session epoch rotates to (Kafka's round-robin
PartitionRotateStrategy: one busy partition does not take every fetch). The response
carries the batches holding them and the acquired ranges with their delivery counts
(batch_optimized, split by ``BatchSize`` where batches start, as Kafka's createBatches); the
consumer delivers only those. With nothing to acquire the fetch waits up to ``MaxWaitMs``
in the broker's purgatory, woken by appends (the high watermark, or the last stable offset,
moving) and by records becoming available again (released, timed out). Epoch -1 closes the
session after its acknowledgements; a renew request (v2 ``IsRenewAck``) only acknowledges.

Errors as Kafka: a null group id or a bad member id INVALID_REQUEST, no READ on the group
GROUP_AUTHORIZATION_FAILED (whole request); session errors (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED after waiting MaxWaitMs) for the
whole request; per partition UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED,
NOT_LEADER_OR_FOLLOWER (with the current leader), INVALID_REQUEST for malformed
acknowledgements or offsets past the in-flight records, INVALID_RECORD_STATE for
acknowledgements of records the member does not hold, UNKNOWN_TOPIC_OR_PARTITION for
acknowledgements of a partition no fetch made a share partition of (Kafka's
SharePartitionManager.acknowledge); offsets below the share partition's start are done and
skipped.
"""

from __future__ import annotations

import asyncio

from brokkr.core.apis import Api
from brokkr.core.apis.common import leadership
from brokkr.core.authorization import AclOperation
from brokkr.core.delayed import DelayedOperation
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import response_spec

from ..manager import FINAL_EPOCH, INITIAL_EPOCH, SessionError
from ..partition import group_setting
from . import acknowledge, check_ack_batches, refusal, share_partition_of

KEY = 78
_R = response_spec(KEY)
ShareFetchResponse = _R.cls
TopicResponse = _R.struct("ShareFetchableTopicResponse")
PartitionData = _R.struct("PartitionData")
LeaderIdAndEpoch = _R.struct("LeaderIdAndEpoch")
AcquiredRecords = _R.struct("AcquiredRecords")
NodeEndpoint = _R.struct("NodeEndpoint")
#: How long a fetch refused for the share-session limit waits first (Kafka waits MaxWaitMs).
MAX_LIMIT_WAIT_MS = 30_000


def _manager(broker):
    from .. import share_manager_of

    return share_manager_of(broker)


class _Answer:
    """One partition's answer, filled in as the request is handled."""

    __slots__ = ("error", "ack_error", "records", "acquired")

    def __init__(self):
        self.error = ErrorCode.NONE
        self.ack_error: ErrorCode | None = None
        self.records = b""
        self.acquired: list = []


async def handle(broker, ctx, request):
    version = ctx.api_version
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    refused = refusal(broker, ctx, request)
    if refused is not None:
        return error_response(request, refused)
    renew = version >= 2 and request.is_renew_ack
    if renew and (request.max_bytes or request.min_bytes or request.max_records or request.max_wait_ms):
        return error_response(request, ErrorCode.INVALID_REQUEST)
    manager = _manager(broker)
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    fetch = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forget = [(t.topic_id, index) for t in request.forgotten_topics_data or () for index in t.partitions]
    try:
        session = manager.session_for(group_id, member_id, epoch, fetch, forget, has_acks, ctx.connection.connection_id)
    except SessionError as exc:
        if exc.code == ErrorCode.SHARE_SESSION_LIMIT_REACHED:
            await asyncio.sleep(min(max(request.max_wait_ms, 0), MAX_LIMIT_WAIT_MS) / 1000)
        return error_response(request, exc.code)

    wanted = list(session.partitions) if epoch != FINAL_EPOCH and not renew else []
    topics = {tid: broker.topics_by_id.get(tid) for tid, _ in [*fetch, *wanted]}
    allowed = broker.authorize_topics(ctx, AclOperation.READ, [t.name for t in topics.values() if t is not None])
    answers: dict[tuple, _Answer] = {}

    def resolve(tid, index) -> ErrorCode:
        topic = topics.get(tid)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_ID
        if not allowed.get(topic.name, False):
            return ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return ErrorCode.NONE

    for t in request.topics:
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            tp = (t.topic_id, p.partition_index)
            answer = answers.setdefault(tp, _Answer())
            error = resolve(*tp) or check_ack_batches(p.acknowledgement_batches, version, renew)
            if not error:
                error = await acknowledge(
                    broker,
                    manager,
                    group_id,
                    member_id,
                    topics[t.topic_id],
                    p.partition_index,
                    p.acknowledgement_batches,
                )
            answer.ack_error = error

    if epoch == FINAL_EPOCH:
        manager.close_session(session)
    elif not renew:
        await _fetch(broker, manager, request, group_id, member_id, wanted, topics, resolve, answers)
        ctx.usage["fetch"] = sum(len(a.records) for a in answers.values())  # fetch quotas count these bytes
    return _response(broker, ctx, request, group_id, answers, full=epoch == INITIAL_EPOCH, wanted=wanted)


async def _fetch(broker, manager, request, group_id, member_id, wanted, topics, resolve, answers) -> None:
    ready = []
    for tp in wanted:
        error = resolve(*tp)
        sp = None
        if not error:
            sp, error = share_partition_of(broker, manager, group_id, topics[tp[0]], tp[1])
        if not error:
            error = await sp.ready()
        if error:
            answers.setdefault(tp, _Answer()).error = error
        else:
            ready.append((tp, sp))
    if not ready or request.max_records <= 0 or request.max_bytes <= 0:
        return  # Kafka's processShareFetch: nothing asked for, nothing acquired, no wait
    ready = _rotated(ready, request.share_session_epoch)
    if not _acquire(broker, request, member_id, ready, answers) and request.max_wait_ms > 0:
        sps = [sp for _, sp in ready]
        keys = [sp.partition for sp in sps] + [sp.wake_key for sp in sps]
        await broker.purgatory.wait(
            DelayedOperation(request.max_wait_ms, lambda: any(sp.acquirable() for sp in sps)), keys
        )
        _acquire(broker, request, member_id, ready, answers)


def _rotated(ready: list, epoch: int) -> list:
    """The session's partitions rotated left by its epoch (Kafka's PartitionRotateStrategy,
    round robin): each fetch starts at another one, so MaxRecords is not always spent on the first."""
    at = epoch % len(ready) if epoch > 0 else 0
    return ready[at:] + ready[:at]


def _acquire(broker, request, member_id, ready, answers) -> int:
    """Acquire records from the ready share partitions, within MaxRecords and MaxBytes; how many."""
    budget_records = request.max_records
    budget_bytes = min(request.max_bytes, broker.config["fetch.max.bytes"])
    total = 0
    for tp, sp in ready:
        if budget_records <= 0 or budget_bytes <= 0:
            break
        data, acquired, n = sp.acquire(
            member_id, budget_records, request.share_acquire_mode, budget_bytes, request.batch_size
        )
        if n:
            answer = answers.setdefault(tp, _Answer())
            answer.records, answer.acquired = data, acquired
            budget_records -= n
            budget_bytes -= len(data)
            total += n
    return total


def _response(broker, ctx, request, group_id: str, answers: dict, full: bool, wanted: list):
    """The answered partitions (a full session's: every one it fetches), by topic."""
    order = list(dict.fromkeys([*wanted, *answers]))
    by_topic: dict = {}
    endpoints: dict[int, NodeEndpoint] = {}
    for tp in order:
        answer = answers.get(tp)
        if answer is None and not full:
            continue
        answer = answer or _Answer()
        leader = _leader(broker, ctx, tp, answer.error, endpoints)
        by_topic.setdefault(tp[0], []).append(
            PartitionData(
                partition_index=tp[1],
                error_code=answer.error,
                acknowledge_error_code=answer.ack_error or ErrorCode.NONE,
                current_leader=leader,
                records=answer.records,
                acquired_records=[
                    AcquiredRecords(first_offset=f, last_offset=last, delivery_count=c)
                    for f, last, c in answer.acquired
                ],
            )
        )
    return ShareFetchResponse(
        error_code=ErrorCode.NONE,
        acquisition_lock_timeout_ms=group_setting(broker, group_id, "share.record.lock.duration.ms"),
        responses=[TopicResponse(topic_id=tid, partitions=parts) for tid, parts in by_topic.items()],
        node_endpoints=list(endpoints.values()),
    )


def _leader(broker, ctx, tp, error: ErrorCode, endpoints: dict) -> LeaderIdAndEpoch:
    """The partition's current leader; for NOT_LEADER_OR_FOLLOWER also its endpoint, so the
    consumer can move without a metadata round trip (as Kafka)."""
    topic = broker.topics_by_id.get(tp[0])
    if topic is None or not 0 <= tp[1] < len(topic.partitions):
        return LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    info = leadership(broker, topic, tp[1])
    if error == ErrorCode.NOT_LEADER_OR_FOLLOWER and info["leader_id"] >= 0 and broker.replicas is not None:
        b = broker.replicas.membership.brokers().get(info["leader_id"])
        if b is not None:
            host, port = b.endpoint(ctx.listener)
            endpoints[b.node_id] = NodeEndpoint(node_id=b.node_id, host=host, port=port, rack=b.rack)
    return LeaderIdAndEpoch(leader_id=info["leader_id"], leader_epoch=info["leader_epoch"])


def error_response(request, code):
    return ShareFetchResponse(error_code=code, responses=[], node_endpoints=[])


API = Api(KEY, 1, 2, handle, error_response)
