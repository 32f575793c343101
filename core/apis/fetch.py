"""Fetch (key 1), versions 4-18, for consumers (Kafka's ReplicaManager.fetchMessages).

Reads whole batches as the log stores them, bounded by the high watermark, by each
partition's ``partition_max_bytes`` and by the request's ``max_bytes``; the first batch
of the response is returned whole even when larger (KIP-74), so a consumer always makes
progress. When fewer than ``min_bytes`` are available the fetch waits in the purgatory,
without blocking the event loop, until enough bytes arrive or ``max_wait_ms`` passes.

With isolation_level 1 (read_committed) a consumer reads up to the last stable offset
instead of the high watermark, and each partition's answer lists the aborted transactions
that overlap the records returned (Kafka's ``collectAbortedTxns``), so the consumer drops
their records; a long poll then waits for the last stable offset to move.

A storage with files answers with regions of them (``read_region``, the storage capability
``READ_REGIONS`` of :mod:`brokkr.core.log`) instead of bytes; the response then leaves with sendfile
(:mod:`brokkr.core.responses`), and the batches are never copied into Python objects. A
read whose regions are not sent (the fetch waits and reads again, or fails) closes them.

A partition whose topic is deleted while the fetch waits ends the wait at once and is
answered UNKNOWN_TOPIC_ID (UNKNOWN_TOPIC_OR_PARTITION before v13, which names topics), its
log never read again; a read that finds its files gone (removed behind the broker's back)
answers KAFKA_STORAGE_ERROR for that partition alone. The other partitions get their data.

Fetch sessions (KIP-227) are not kept: every response has session id 0, which tells
clients to send full fetch requests, as Kafka does when its session cache is full.

Fetching from the closest replica (KIP-392): from v11 a consumer names its rack
(``rack_id``, the client's ``client.rack``) and may fetch from a follower, which serves it
up to its own high watermark (read_committed: its last stable offset), as a leader does;
before v11 only the leader serves consumers (NOT_LEADER_OR_FOLLOWER). With
``replica.selector.class`` set, the leader answers a consumer in another rack, where an
in-sync follower holds the offset, with that follower as ``preferred_read_replica`` and no
records, at once (``ReplicaManager.preferred_read_replica``, Kafka's
RackAwareReplicaSelector); the consumer then fetches from it. ListOffsets and
OffsetForLeaderEpoch stay with the leader, as in Kafka.
"""

from __future__ import annotations

import logging

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..delayed import DelayedOperation
from ..errors import ErrorCode
from ..file_region import FileRegion
from ..log import OffsetOutOfRange
from ..protocol.frames import response_spec
from ..protocol.records import next_offset_after
from ..replication import diverging_epoch
from . import Api
from .common import leader_epoch_error, partition_of, replica_of, resolve_topic

log = logging.getLogger("brokkr")

KEY = 1
TOPIC_IDS_VERSION = 13
STORAGE_ERROR_VERSION = 6  # KAFKA_STORAGE_ERROR from v6 (FetchResponse.json); before, NOT_LEADER_OR_FOLLOWER
REPLICA_STATE_VERSION = 15
CLIENT_METADATA_VERSION = 11  # rack_id and preferred_read_replica (KIP-392)
_R = response_spec(KEY)
FetchResponse = _R.cls
FetchableTopicResponse = _R.struct("FetchableTopicResponse")
PartitionData = _R.struct("PartitionData")
EpochEndOffset = _R.struct("EpochEndOffset")
AbortedTransaction = _R.struct("AbortedTransaction")
READ_COMMITTED = 1


def _error(index: int, code: ErrorCode) -> PartitionData:
    return PartitionData(partition_index=index, error_code=code, high_watermark=-1, records=b"")


def _aborted(partition, fetch_offset: int, data: bytes | FileRegion) -> list:
    """The aborted transactions overlapping the records read (read_committed), as Kafka's
    ``addAbortedTransactions``: up to the end of the last batch returned."""
    if not data:
        return []
    end = data.next_offset if isinstance(data, FileRegion) else next_offset_after(data, fetch_offset)
    found = partition.aborted.aborted_txns(fetch_offset, end)
    return [AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset) for t in found]


def _read(partition, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes | FileRegion:
    """A region of the log's file where the storage offers them (``Capability.READ_REGIONS``), else the bytes."""
    if partition.capabilities.read_regions:
        return partition.log.read_region(offset, max_bytes, max_offset, min_one) or b""
    return partition.log.read(offset, max_bytes, max_offset, min_one)


def close_regions(responses: list) -> None:
    """Close the file regions of topic responses that will not be sent."""
    for t in responses:
        for p in t.partitions:
            if isinstance(p.records, FileRegion):
                p.records.close()


def _gone(version: int) -> ErrorCode:
    """What a partition whose topic was deleted is answered: the topic is unknown."""
    return ErrorCode.UNKNOWN_TOPIC_ID if version >= TOPIC_IDS_VERSION else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _unreadable(partition, offset: int, exc: OSError, version: int) -> ErrorCode:
    """A read of a live partition found its files gone or failing: that partition is
    answered Kafka's storage error, the rest of the fetch as usual."""
    log.error("%s: the read at offset %d failed: %s; answering a storage error", partition.name, offset, exc)
    return ErrorCode.KAFKA_STORAGE_ERROR if version >= STORAGE_ERROR_VERSION else ErrorCode.NOT_LEADER_OR_FOLLOWER


def _read_all(
    broker, plan, max_bytes: int, follower: bool = False, read_committed: bool = False, version: int = TOPIC_IDS_VERSION
) -> tuple[list, int]:
    """Read every readable partition of ``plan`` (up to the high watermark, or the last
    stable offset for read_committed; for a follower, up to the log end); returns the topic
    responses and bytes read. A partition deleted since the plan was made is not read
    (answered as an unknown topic); one whose read fails on its files is answered
    KAFKA_STORAGE_ERROR. Any other failure closes the regions read before it."""
    budget = max_bytes
    min_one = True
    total = 0
    responses = []
    opened: list[FileRegion] = []
    try:
        for t, _topic, items in plan:
            parts = []
            for fp, partition, code in items:
                if not code and partition.deleted:  # while the fetch waited
                    code = _gone(version)
                if code:
                    parts.append(_error(fp.partition, code))
                    continue
                hw = partition.high_watermark
                lso = partition.last_stable_offset
                data: bytes | FileRegion = b""
                aborted = None
                try:
                    limit = min(fp.partition_max_bytes, max(budget, 0))
                    end = partition.log.log_end_offset if follower else lso if read_committed else hw
                    data = _read(partition, fp.fetch_offset, limit, end, min_one)
                    if isinstance(data, FileRegion):
                        opened.append(data)
                    if read_committed:
                        aborted = _aborted(partition, fp.fetch_offset, data)
                except OffsetOutOfRange:
                    code = ErrorCode.OFFSET_OUT_OF_RANGE
                except OSError as exc:  # e.g. a segment's file gone under the read
                    if isinstance(data, FileRegion):
                        opened.pop().close()  # this read's region, the last one opened
                    parts.append(_error(fp.partition, _unreadable(partition, fp.fetch_offset, exc, version)))
                    continue
                if data:
                    min_one = False
                    budget -= len(data)
                    total += len(data)
                parts.append(
                    PartitionData(
                        partition_index=fp.partition,
                        error_code=code,
                        high_watermark=hw,
                        last_stable_offset=lso,
                        log_start_offset=partition.log.log_start_offset,
                        aborted_transactions=aborted,
                        records=data,
                    )
                )
            responses.append(FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=parts))
    except BaseException:
        for region in opened:
            region.close()
        raise
    return responses, total


async def handle(broker, ctx, request):
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    if request.session_id != 0:
        return FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    if request.session_epoch not in (-1, 0):
        return FetchResponse(error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=0)

    resolved = [(t, *resolve_topic(broker, t.topic, t.topic_id, by_id)) for t in request.topics]
    names = sorted(
        {topic.name for _, topic, _ in resolved if topic} | {t.topic for t, topic, _ in resolved if not by_id}
    )
    replica = _replica_id(request, ctx.api_version) if broker.replicas is not None else -1
    if replica >= 0:  # a follower: ClusterAction on the cluster instead of READ on each topic
        ok = broker.authorize(ctx, [Action(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)])[0]
        allowed = dict.fromkeys(names, ok)
    else:
        allowed = broker.authorize_topics(ctx, AclOperation.READ, names)

    follower = replica >= 0
    # KIP-392: a consumer naming its rack may fetch from a follower; a leader may send it to one.
    any_replica = not follower and ctx.api_version >= CLIENT_METADATA_VERSION
    client_rack = request.rack_id if any_replica and broker.replicas is not None else ""
    plan = []  # (request topic, topic, [(request partition, partition, error)])
    divergent: dict[int, EpochEndOffset] = {}  # a follower's log parts from ours (by id of its FetchPartition)
    redirected: dict[int, PartitionData] = {}  # sent to their preferred read replica (by id of its FetchPartition)
    has_error = False
    for t, topic, code in resolved:
        name = topic.name if topic else t.topic
        items = []
        for fp in t.partitions:
            partition = None
            err = code
            if not allowed.get(name, True):
                err = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not err:
                partition, err = (replica_of if any_replica else partition_of)(topic, fp.partition)
                if partition is not None:
                    err = leader_epoch_error(partition, fp.current_leader_epoch)
                if not err and replica >= 0:
                    diverging = diverging_epoch(partition, fp.last_fetched_epoch, fp.fetch_offset)
                    if diverging is not None:
                        divergent[id(fp)] = EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
                    else:
                        broker.replicas.follower_fetched(partition, replica, fp.fetch_offset, fp.log_start_offset)
                elif not err and client_rack and partition.is_leader:
                    preferred = broker.replicas.preferred_read_replica(partition, client_rack, fp.fetch_offset)
                    if preferred is not None:
                        redirected[id(fp)] = _redirect(partition, fp.partition, preferred)
            has_error = has_error or bool(err)
            items.append((fp, partition, err))
        plan.append((t, topic, items))

    answered = divergent.keys() | redirected.keys()  # without records, at once
    if answered:  # a follower told where to truncate to, a consumer where to fetch
        plan = [(t, topic, [(fp, p, e) for fp, p, e in items if id(fp) not in answered]) for t, topic, items in plan]
    committed = not follower and request.isolation_level == READ_COMMITTED
    max_bytes = min(request.max_bytes, broker.config["fetch.max.bytes"])
    responses, total = _read_all(broker, plan, max_bytes, follower, committed, ctx.api_version)
    watched = {p for _, _, items in plan for _, p, err in items if p is not None and not err}
    # A follower told to truncate, or a consumer sent to another replica, is answered at
    # once (as Kafka's fetch completes immediately on a diverging epoch or a preferred read
    # replica), not after waiting for its other partitions' bytes.
    if total < request.min_bytes and request.max_wait_ms > 0 and watched and not has_error and not answered:
        # A consumer's new bytes count once the high watermark (read_committed: the last
        # stable offset, which only moves when the high watermark or a marker does) passes
        # some of them.
        visible = (lambda p: p.last_stable_offset) if committed else (lambda p: p.high_watermark)
        start = {p: (p.bytes_appended, visible(p)) for p in watched}

        def enough() -> bool:
            new = 0
            for p, (n, seen) in start.items():
                if p.deleted:  # answered at once (Kafka's DelayedFetch: a partition no longer known)
                    return True
                if follower or visible(p) > seen:
                    new += p.bytes_appended - n
            return total + new >= request.min_bytes

        close_regions(responses)  # not sent: the fetch reads again once it has waited
        await broker.purgatory.wait(DelayedOperation(request.max_wait_ms, enough), watched)
        responses, total = _read_all(broker, plan, max_bytes, follower, committed, ctx.api_version)
    if divergent:
        _add_divergent(request, responses, divergent, broker)
    if redirected:
        _add_answered(request, responses, redirected)
    ctx.usage["fetch"] = total
    return FetchResponse(error_code=ErrorCode.NONE, session_id=0, responses=responses)


def _add_divergent(request, responses, divergent: dict, broker) -> None:
    answers = {}
    for t in request.topics:
        for fp in t.partitions:
            if id(fp) in divergent:
                partition = broker.partition(t.topic, fp.partition) if t.topic else None
                answers[id(fp)] = PartitionData(
                    partition_index=fp.partition,
                    error_code=ErrorCode.NONE,
                    high_watermark=partition.high_watermark if partition else -1,
                    log_start_offset=partition.log.log_start_offset if partition else -1,
                    diverging_epoch=divergent[id(fp)],
                    records=b"",
                )
    _add_answered(request, responses, answers)


def _add_answered(request, responses, answers: dict[int, PartitionData]) -> None:
    """Add the answers given without reading (by id of the request's FetchPartition) to
    their topics' responses."""
    by_topic = {(r.topic, r.topic_id): r for r in responses}
    for t in request.topics:
        for fp in t.partitions:
            if id(fp) in answers:
                by_topic[(t.topic, t.topic_id)].partitions.append(answers[id(fp)])


def _redirect(partition, index: int, preferred: int) -> PartitionData:
    """A consumer sent to its preferred read replica: the offsets as a read answers them,
    no records (Kafka's leader skips the read)."""
    return PartitionData(
        partition_index=index,
        error_code=ErrorCode.NONE,
        high_watermark=partition.high_watermark,
        last_stable_offset=partition.last_stable_offset,
        log_start_offset=partition.log.log_start_offset,
        preferred_read_replica=preferred,
        records=b"",
    )


def _replica_id(request, version: int) -> int:
    """The follower's broker id (-1 for a consumer): a field until v14, ReplicaState from v15."""
    if version < REPLICA_STATE_VERSION:
        return request.replica_id
    return request.replica_state.replica_id if request.replica_state is not None else -1


def error_response(request, code):
    return FetchResponse(
        error_code=code,
        responses=[
            FetchableTopicResponse(
                topic=t.topic, topic_id=t.topic_id, partitions=[_error(fp.partition, code) for fp in t.partitions]
            )
            for t in request.topics
        ],
    )


API = Api(KEY, 4, 18, handle, error_response)
