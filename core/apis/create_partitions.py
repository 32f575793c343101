"""CreatePartitions (key 37), versions 0-3: grow a topic, with Kafka's checks and errors.
New partitions are open for produce and fetch at once; clients find them at their next
metadata refresh. Manual assignments may name only this broker (one replica each)."""

from __future__ import annotations

from collections import Counter

from ..authorization import AclOperation, Action, ResourceType
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 37
_R = response_spec(KEY)
CreatePartitionsResponse = _R.cls
CreatePartitionsTopicResult = _R.struct("CreatePartitionsTopicResult")


def _check_assignments(broker, t) -> dict[int, tuple[int, ...]] | None:
    """The replicas of each new partition the request assigns (None: the broker chooses)."""
    if t.assignments is None:
        return None
    current = len(broker.topics[t.name].partitions)
    if len(t.assignments) != t.count - current:
        raise BrokkrError(
            f"Increasing the number of partitions by {t.count - current} but {len(t.assignments)} assignments "
            "provided.",
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        )
    if broker.replicas is None:
        live, replicas = {broker.node_id}, 1
    else:
        membership = broker.replicas.membership
        live, replicas = set(membership.brokers()), len(membership.topics()[t.name].replicas[0])
    for a in t.assignments:
        for broker_id in a.broker_ids:
            if broker_id not in live:
                raise BrokkrError(
                    f"The manual partition assignment includes broker {broker_id}, but no such broker is registered.",
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                )
        if len(a.broker_ids) != replicas or len(set(a.broker_ids)) != replicas:
            raise BrokkrError(
                f"The manual partition assignment includes a partition with {len(a.broker_ids)} replica(s), but "
                f"this is not consistent with previous partitions, which have {replicas} replica(s).",
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            )
    return {current + i: tuple(a.broker_ids) for i, a in enumerate(t.assignments)}


async def handle(broker, ctx, request):
    counts = Counter(t.name for t in request.topics)
    names = sorted(counts)
    allowed = dict(
        zip(names, broker.authorize(ctx, [Action(AclOperation.ALTER, ResourceType.TOPIC, n) for n in names]))
    )
    results = []
    for t in request.topics:
        res = CreatePartitionsTopicResult(name=t.name, error_code=ErrorCode.NONE, error_message=None)
        results.append(res)
        try:
            if counts[t.name] > 1:
                raise BrokkrError("Duplicate topic in request.", ErrorCode.INVALID_REQUEST)
            if not allowed[t.name]:
                raise BrokkrError("Authorization failed.", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            if t.name not in broker.topics:
                raise BrokkrError(f"The topic '{t.name}' does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            assignment = _check_assignments(broker, t) if t.count > len(broker.topics[t.name].partitions) else None
            broker.check_partition_count(t.name, t.count)
            if request.validate_only:
                continue
            if broker.replicas is not None:
                await broker.replicas.add_partitions(t.name, t.count, assignment)
            else:
                await broker.add_partitions(t.name, t.count)
        except BrokkrError as exc:
            res.error_code, res.error_message = exc.code, str(exc)
    return CreatePartitionsResponse(results=results)


def error_response(request, code):
    return CreatePartitionsResponse(
        results=[CreatePartitionsTopicResult(name=t.name, error_code=code) for t in request.topics]
    )


API = Api(KEY, 0, 3, handle, error_response)
