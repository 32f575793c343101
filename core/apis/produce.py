"""Produce (key 0), versions 3-13: Kafka's KafkaApis.handleProduceRequest and
ReplicaManager.appendRecords, stage by stage (see brokkr.core.hookspecs).

Each partition's records go through :func:`brokkr.core.append.append` (origin CLIENT),
the one way into a log, and acks=-1 waits through :func:`brokkr.core.append.wait_acknowledged`:
until ``brokkr_produce_complete`` agrees for every partition or ``timeout_ms`` passes
(REQUEST_TIMED_OUT); a partition whose topic is deleted meanwhile stops waiting at once
and answers UNKNOWN_TOPIC_OR_PARTITION. acks=0 gets no response; if any partition failed,
the connection is closed instead so the producer notices.
"""

from __future__ import annotations

import asyncio
import logging
import struct

from ..append import Origin, append, error_of, wait_acknowledged
from ..authorization import AclOperation, Action, ResourceType
from ..errors import CloseConnection, CorruptRequest, ErrorCode
from ..protocol.frames import response_spec
from ..protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    iter_batches_untrusted,
)
from ..validation import RecordsError, ValidatedRecords
from . import Api
from .common import NoResponse, partition_of, resolve_topic

log = logging.getLogger("brokkr.produce")
_NONE = ErrorCode.NONE  # a module constant: an IntEnum member costs a class lookup each time
_BATCH_LENGTH = struct.Struct(">i")  # a record batch's length field, at offset 8
CLIENT = Origin.CLIENT

KEY = 0
TOPIC_IDS_VERSION = 13
_R = response_spec(KEY)
ProduceResponse = _R.cls
TopicProduceResponse = _R.struct("TopicProduceResponse")
PartitionProduceResponse = _R.struct("PartitionProduceResponse")
BatchIndexAndErrorMessage = _R.struct("BatchIndexAndErrorMessage")


def _result(index: int, code: ErrorCode, message: str | None = None) -> PartitionProduceResponse:
    return PartitionProduceResponse(index=index, error_code=code, base_offset=-1, error_message=message)


async def handle(broker, ctx, request):
    by_id = ctx.api_version >= TOPIC_IDS_VERSION
    acks = request.acks
    if acks not in (-1, 0, 1):
        return error_response(request, ErrorCode.INVALID_REQUIRED_ACKS)
    transactional = _transactional_headers(request)
    if transactional:
        # Kafka's KafkaApis: transactional batches need WRITE on the request's transactional
        # id, so a plain producer (no transactional id) setting the flag fails everything.
        txn_id = request.transactional_id
        authorized = (
            txn_id is not None
            and broker.authorize(ctx, [Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id)])[0]
        )
        if not authorized:
            return error_response(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)

    topics = []
    names = []  # to authorize: every topic found, and by name those not found
    for t in request.topic_data:
        topic, code = resolve_topic(broker, t.name, t.topic_id, by_id)
        topics.append((t, topic, code))
        if topic is not None:
            names.append(topic.name)
        elif not by_id:
            names.append(t.name)
    allowed = broker.authorize_topics(ctx, AclOperation.WRITE, names)

    verified = await _verify_transaction(broker, ctx, request, transactional, topics, allowed) if transactional else {}
    responses = []
    waiting = []  # (partition, required offset, its response)
    produced_bytes = 0
    failed = False
    for t, topic, code in topics:
        results = []
        denied = not allowed.get(topic.name if topic else t.name, True)
        internal = topic is not None and topic.name in broker.internal_topics
        for pd in t.partition_data:
            if denied:
                res = _result(pd.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            elif code:
                res = _result(pd.index, code)
            elif (found := partition_of(topic, pd.index))[0] is None:
                res = _result(pd.index, found[1])
            elif verified and verified.get(id(pd), _NONE):
                res = _unverified(pd.index, verified[id(pd)])
            elif internal:  # only its owner appends (Kafka's appendToLocalLog: "Cannot append to internal topic")
                res = _result(pd.index, ErrorCode.INVALID_TOPIC_EXCEPTION)
            else:
                partition = found[0]
                appended = _append(broker, ctx, partition, pd.records, acks)
                if type(appended) is not tuple:  # validated off the loop, or answered after an fsync
                    appended = await appended
                res, next_offset = appended
                if not res.error_code:
                    produced_bytes += len(pd.records)
                    if acks == -1:
                        waiting.append((partition, next_offset, res))
            if res.error_code:
                failed = True
            results.append(res)
        responses.append(TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=results))

    ctx.usage["produce"] = produced_bytes
    if acks == 0:
        if failed:
            raise CloseConnection()
        return NoResponse()  # no answer, but a bandwidth throttle still mutes the connection
    if waiting:
        await _await_replication(broker, request.timeout_ms, waiting)
    return ProduceResponse(responses=responses)


def _transactional_headers(request) -> dict[int, BatchHeader]:
    """Kafka's ``RequestUtils.hasTransactionalRecords``, keeping what it finds: the first
    transactional batch header of each partition's records, by ``id`` of its partition
    data. Record sets that do not parse are left to validation."""
    found = {}
    for t in request.topic_data:
        for pd in t.partition_data:
            records = pd.records
            if records is None or (
                (size := len(records)) >= HEADER_SIZE
                and records[MAGIC_OFFSET] == 2
                and not records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG
                and _BATCH_LENGTH.unpack_from(records, 8)[0] + LOG_OVERHEAD == size
            ):
                continue  # one plain batch, as Produce v3+ sends: known without decoding its header
            h = _first_transactional(records)
            if h is not None:
                found[id(pd)] = h
    return found


def _first_transactional(records: memoryview) -> BatchHeader | None:
    try:
        return next((h for h in iter_batches_untrusted(records) if h.is_transactional), None)
    except CorruptRequest:
        return None


async def _verify_transaction(broker, ctx, request, transactional, topics, allowed) -> dict[int, ErrorCode]:
    """KIP-890 part 1: ask ``brokkr_transaction_verify`` (once) about the partitions whose
    transactional batch would start a transaction (no open one of that producer and epoch
    there). Returns the error code per partition data id; empty when nothing was asked."""
    asked: dict[tuple[str, int], int] = {}
    first = None
    for t, topic, code in topics:
        if topic is None or code or not allowed.get(topic.name, True):
            continue
        for pd in t.partition_data:
            h = transactional.get(id(pd))
            partition = partition_of(topic, pd.index)[0] if h is not None else None
            if partition is None:
                continue
            entry = partition.producers.producers.get(h.producer_id)
            if entry is not None and h.producer_epoch < entry.producer_epoch:
                continue  # fenced: the append answers INVALID_PRODUCER_EPOCH (KAFKA-18042: no need to ask)
            if entry is None or entry.current_txn_first_offset < 0 or entry.producer_epoch != h.producer_epoch:
                asked[(topic.name, pd.index)] = id(pd)
                first = first or h
    if not asked:
        return {}
    answer = broker.hook.brokkr_transaction_verify(
        transactional_id=request.transactional_id,
        producer_id=first.producer_id,
        producer_epoch=first.producer_epoch,
        partitions=list(asked),
        broker=broker,
        produce_version=ctx.api_version,
    )
    if answer is None:
        return {}
    try:
        errors = await answer
    except Exception:  # the coordinator could not be asked: retriable, as Kafka's lost connection
        log.exception("verifying the transaction of %r failed", request.transactional_id)
        errors = dict.fromkeys(asked, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return {pd_id: errors.get(key, ErrorCode.INVALID_TXN_STATE) for key, pd_id in asked.items()}


#: Coordinator answers that say "try again" become NOT_ENOUGH_REPLICAS, which producers
#: retry (Kafka 3.6+'s ReplicaManager does the same).
_RETRIABLE_VERIFY = {
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
}


def _unverified(index: int, code: ErrorCode) -> PartitionProduceResponse:
    if code == ErrorCode.INVALID_TXN_STATE:
        return _result(index, code, "Partition was not added to the transaction")
    if code in _RETRIABLE_VERIFY:
        return _result(
            index,
            ErrorCode.NOT_ENOUGH_REPLICAS,
            f"Unable to verify the partition has been added to the transaction. Underlying error: {code.name}",
        )
    return _result(index, code)


def _append(broker, ctx, partition, records, acks):
    """Validate and append one partition's records: (its response, the next offset), or
    where validation runs off the event loop or the append waits for its fsync, an
    awaitable of them. The common append, validated and written here, creates no coroutine."""
    try:
        validated = broker.hot.brokkr_validate_records(partition=partition, records=records, context=ctx, broker=broker)
        if not isinstance(validated, ValidatedRecords):  # a walk off the event loop
            return _append_later(broker, ctx, partition, acks, validated)
        info = append(broker, partition, validated, CLIENT, acks)
        if info.flushed is not None:  # flush.messages reached: answered once the fsync (off the loop) is done
            return _append_later(broker, ctx, partition, acks, None, validated, info)
    except Exception as exc:
        return _failed(broker, ctx, partition, exc)
    return _appended(partition, validated, info)


async def _append_later(broker, ctx, partition, acks, validating, validated=None, info=None):
    """The rest of :func:`_append` where it waits: for the walk ``validating`` (then the
    append), or for the fsync of ``info``."""
    try:
        if validating is not None:
            validated = await validating
            if broker.partition(partition.topic.name, partition.index) is not partition:  # deleted meanwhile
                return _result(partition.index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), -1
            info = append(broker, partition, validated, CLIENT, acks)
        if info.flushed is not None:
            await asyncio.wrap_future(info.flushed)
    except Exception as exc:
        return _failed(broker, ctx, partition, exc)
    return _appended(partition, validated, info)


def _appended(partition, validated, info) -> tuple[PartitionProduceResponse, int]:
    res = PartitionProduceResponse(
        index=partition.index,
        error_code=_NONE,
        base_offset=info.first_offset,
        log_append_time_ms=validated.log_append_time,
        log_start_offset=partition.log.log_start_offset,
    )
    return res, info.last_offset + 1


def _failed(broker, ctx, partition, exc: Exception) -> tuple[PartitionProduceResponse, int]:
    """The answer to an append that raised ``exc`` (called in its ``except`` clause)."""
    code, message = error_of(exc, partition)
    res = _result(partition.index, code, message)
    if isinstance(exc, RecordsError):
        if code != ErrorCode.NOT_ENOUGH_REPLICAS:  # the partition's state, not the producer's batch
            broker.refusals.refused(partition.name, ctx, code, message)
        res.record_errors = [
            BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m) for i, m in exc.record_errors
        ]
    return res, -1


async def _await_replication(broker, timeout_ms, waiting) -> None:
    required: dict = {}
    for partition, offset, _ in waiting:
        required[partition] = max(offset, required.get(partition, offset))
    errors = await wait_acknowledged(broker, required, timeout_ms, min_insync=True)
    for partition, _, res in waiting:
        if partition in errors:
            res.error_code, res.error_message = errors[partition]
            res.base_offset = -1


def error_response(request, code):
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,
                partition_responses=[_result(pd.index, code) for pd in t.partition_data],
            )
            for t in request.topic_data
        ]
    )


API = Api(KEY, 3, 13, handle, error_response, advertised_min_version=0)
