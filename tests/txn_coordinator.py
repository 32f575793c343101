"""Helpers for the transaction coordinator's tests: raw requests of its APIs and a look
at its state and at a partition's transaction state."""

from __future__ import annotations

import time

from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.transactions import transaction_coordinator_of

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 10, 22, 24, 25, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
#: Settings that keep tests quick: fewer __transaction_state partitions, timers in ms.
FAST = {
    "transaction.state.log.num.partitions": 5,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
    "num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


def find_coordinator(broker, txn_id: str, version: int = 3):
    spec = request_spec(FIND_COORDINATOR)
    with RawClient(broker.bootstrap_servers) as c:
        if version >= 4:
            return c.request(FIND_COORDINATOR, version, spec.cls(key_type=1, coordinator_keys=[txn_id])).coordinators[0]
        return c.request(FIND_COORDINATOR, version, spec.cls(key=txn_id, key_type=1))


def ready(broker, txn_id: str = "t") -> None:
    """Create __transaction_state through FindCoordinator and wait until it is loaded."""
    for _ in range(100):
        if find_coordinator(broker, txn_id).error_code == 0:
            broker.call(transaction_coordinator_of(broker.broker).wait_loaded)
            return
        time.sleep(0.05)
    raise AssertionError("no transaction coordinator")


def init_producer_id(c, txn_id, timeout_ms=60000, producer_id=-1, epoch=-1, version=4):
    body = request_spec(INIT_PRODUCER_ID).cls(
        transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=producer_id, producer_epoch=epoch
    )
    return c.request(INIT_PRODUCER_ID, version, body)


def add_partitions(c, txn_id, pid, epoch, partitions, version=3):
    """AddPartitionsToTxn v0-3: {(topic, partition): error code}."""
    spec = request_spec(ADD_PARTITIONS)
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    body = spec.cls(
        v3_and_below_transactional_id=txn_id,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[spec.struct("AddPartitionsToTxnTopic")(name=t, partitions=ps) for t, ps in topics.items()],
    )
    response = c.request(ADD_PARTITIONS, version, body)
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def verify_only(c, txn_id, pid, epoch, partitions, version=4):
    """AddPartitionsToTxn v4 verify_only: (top-level error, {(topic, partition): error})."""
    spec = request_spec(ADD_PARTITIONS)
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    txn = spec.struct("AddPartitionsToTxnTransaction")(
        transactional_id=txn_id,
        producer_id=pid,
        producer_epoch=epoch,
        verify_only=True,
        topics=[spec.struct("AddPartitionsToTxnTopic")(name=t, partitions=ps) for t, ps in topics.items()],
    )
    response = c.request(ADD_PARTITIONS, version, spec.cls(transactions=[txn]))
    return response.error_code, {
        (t.name, p.partition_index): p.partition_error_code
        for r in response.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    }


def end_txn(c, txn_id, pid, epoch, committed, version=3):
    body = request_spec(END_TXN).cls(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=committed
    )
    return c.request(END_TXN, version, body).error_code


def describe(broker, *txn_ids):
    with RawClient(broker.bootstrap_servers) as c:
        body = request_spec(DESCRIBE_TRANSACTIONS).cls(transactional_ids=list(txn_ids))
        return c.request(DESCRIBE_TRANSACTIONS, 0, body).transaction_states


def list_transactions(broker, states=(), producer_ids=(), duration=-1, version=1):
    with RawClient(broker.bootstrap_servers) as c:
        body = request_spec(LIST_TRANSACTIONS).cls(
            state_filters=list(states), producer_id_filters=list(producer_ids), duration_filter=duration
        )
        return c.request(LIST_TRANSACTIONS, version, body)


def wait_state(broker, txn_id: str, state: str, timeout: float = 10.0):
    """The id's DescribeTransactions entry once it is in ``state``."""
    deadline = time.time() + timeout
    while True:
        (d,) = describe(broker, txn_id)
        if d.transaction_state == state or time.time() > deadline:
            assert d.transaction_state == state, d
            return d
        time.sleep(0.05)


def stable(broker, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of a partition."""
    p = broker.broker.partition(topic, partition)
    return broker.call(lambda: (p.last_stable_offset, p.high_watermark))
