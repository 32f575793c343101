"""KIP-890 part 1: before a transactional batch starts a transaction on a partition, the
partition's leader asks the transaction coordinator whether the partition was added to the
producer's ongoing transaction (``brokkr_transaction_verify``, called by Produce).

This broker coordinating the id: answered from memory. Otherwise: one AddPartitionsToTxn
v4 request with ``verify_only`` to the coordinator (the leader of the id's
``__transaction_state`` partition), on the coordinator's kept client to that broker.
PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH, which Produce knows (Kafka's
AddPartitionsToTxnManager does the same); Produce turns the coordinator's "try again"
answers into NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import logging

from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec

from .errors import error_code

log = logging.getLogger("brokkr.transactions")

ADD_PARTITIONS_TO_TXN, VERIFY_VERSION = 24, 4


def produce_error(code: int) -> ErrorCode:
    return ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else error_code(code)


async def verify(broker, coordinator, transactional_id, producer_id, producer_epoch, partitions):
    """Per partition, NONE or the error to answer (``brokkr_transaction_verify``'s awaitable)."""
    partitions = list(partitions)
    if not coordinator.check_coordinator(transactional_id) or broker.replicas is None:
        results = coordinator.verify(transactional_id, producer_id, producer_epoch, partitions)
    else:
        results = await _ask(broker, coordinator, transactional_id, producer_id, producer_epoch, partitions)
    return {tp: produce_error(code) for tp, code in results.items()}


async def _ask(broker, coordinator, transactional_id, producer_id, producer_epoch, partitions):
    """AddPartitionsToTxn v4 verify_only to the id's coordinator on another broker."""
    retry = dict.fromkeys(partitions, ErrorCode.NOT_COORDINATOR)
    membership = broker.replicas.membership
    state = membership.partition_state(coordinator.topic, coordinator.partition_for(transactional_id))
    client = coordinator.verify_clients.get(state.leader) if state is not None else None
    if client is None:
        return retry
    spec = request_spec(ADD_PARTITIONS_TO_TXN)
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    txn = spec.struct("AddPartitionsToTxnTransaction")(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        verify_only=True,
        topics=[spec.struct("AddPartitionsToTxnTopic")(name=t, partitions=ps) for t, ps in topics.items()],
    )
    try:
        response = await client.request(
            ADD_PARTITIONS_TO_TXN,
            VERIFY_VERSION,
            spec.cls(transactions=[txn]),
            broker.config["request.timeout.ms"] / 1000,
        )
    except Exception as exc:
        log.debug("verifying %r with broker %d failed: %r", transactional_id, state.leader, exc)
        return retry
    if response.error_code:
        return dict.fromkeys(partitions, response.error_code)
    results = dict(retry)
    for result in response.results_by_transaction:
        for topic in result.topic_results:
            for p in topic.results_by_partition:
                if (topic.name, p.partition_index) in results:
                    results[(topic.name, p.partition_index)] = p.partition_error_code
    return results
