"""The transaction coordinator's error paths on raw requests: unknown ids, wrong producer
ids and epochs (PRODUCER_FENCED or INVALID_PRODUCER_EPOCH by version), invalid states,
bad timeouts, authorization, unknown partitions, KIP-360 epoch bumps, KIP-890 part 1
verification (AddPartitionsToTxn v4 verify_only, and Produce refusing a partition never
added)."""

from __future__ import annotations

import time

import pytest
from brokkr.core.authorization import AclOperation, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import TRANSACTIONAL_FLAG, build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.groups import coordinator_of

from tests.authorizers import Deny
from tests.txn_coordinator import (
    ADD_OFFSETS,
    FAST,
    add_partitions,
    describe,
    end_txn,
    find_coordinator,
    init_producer_id,
    list_transactions,
    ready,
    verify_only,
    wait_state,
)
from tests.wire import PRODUCE, produce_body

INVALID_PRODUCER_ID_MAPPING = ErrorCode.INVALID_PRODUCER_ID_MAPPING
TXN_OFFSET_COMMIT = 28


@pytest.fixture
def broker(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    b.call(b.broker.create_topic, "a")
    ready(b)
    return b


@pytest.fixture
def client(broker):
    with RawClient(broker.bootstrap_servers) as c:
        yield c


def started(c, txn_id="t"):
    r = init_producer_id(c, txn_id)
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


@pytest.mark.parametrize("timeout_ms", [0, -5, 900_001])
def test_a_timeout_out_of_bounds_is_refused(client, timeout_ms):
    r = init_producer_id(client, "t", timeout_ms=timeout_ms)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)


def test_an_empty_transactional_id_is_an_invalid_request(client):
    assert init_producer_id(client, "").error_code == ErrorCode.INVALID_REQUEST


def test_each_init_bumps_the_epoch_of_one_producer_id(client):
    pid, epoch = started(client)
    again = init_producer_id(client, "t")
    assert (again.producer_id, again.producer_epoch) == (pid, epoch + 1)
    other = init_producer_id(client, "other")
    assert other.producer_id != pid and other.producer_epoch == 0


def test_kip_360_bump_with_the_current_epoch_and_fencing_of_an_older_one(client):
    pid, epoch = started(client)
    bumped = init_producer_id(client, "t", producer_id=pid, epoch=epoch)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, epoch + 1)
    retried = init_producer_id(client, "t", producer_id=pid, epoch=epoch)  # the response was lost: same answer
    assert (retried.error_code, retried.producer_epoch) == (0, epoch + 1)
    init_producer_id(client, "t")  # another producer takes over: epoch + 2
    assert init_producer_id(client, "t", producer_id=pid, epoch=epoch + 1).error_code == ErrorCode.PRODUCER_FENCED
    old = init_producer_id(client, "t", producer_id=pid, epoch=epoch + 1, version=3)
    assert old.error_code == ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is v4+


def test_unknown_id_and_wrong_producer_id_are_invalid_mappings(client):
    assert add_partitions(client, "nobody", 1, 0, [("a", 0)]) == {("a", 0): INVALID_PRODUCER_ID_MAPPING}
    pid, epoch = started(client)
    assert add_partitions(client, "t", pid + 1, epoch, [("a", 0)]) == {("a", 0): INVALID_PRODUCER_ID_MAPPING}
    assert end_txn(client, "nobody", 1, 0, True) == INVALID_PRODUCER_ID_MAPPING


@pytest.mark.parametrize("version, code", [(1, ErrorCode.INVALID_PRODUCER_EPOCH), (2, ErrorCode.PRODUCER_FENCED)])
def test_a_stale_epoch_is_fenced_by_version(client, version, code):
    pid, epoch = started(client)
    init_producer_id(client, "t")  # epoch + 1
    assert add_partitions(client, "t", pid, epoch, [("a", 0)], version=version) == {("a", 0): code}
    assert end_txn(client, "t", pid, epoch, True, version=version) == code


def test_end_txn_without_a_transaction_is_an_invalid_state(client):
    pid, epoch = started(client)
    assert end_txn(client, "t", pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
    assert end_txn(client, "t", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE


def test_end_txn_retries_and_the_other_outcome(broker, client):
    pid, epoch = started(client)
    assert add_partitions(client, "t", pid, epoch, [("a", 0), ("a", 2)]) == {("a", 0): 0, ("a", 2): 0}
    assert add_partitions(client, "t", pid, epoch, [("a", 0)]) == {("a", 0): 0}  # already there: nothing written
    (d,) = describe(broker, "t")
    assert (d.transaction_state, [(t.topic, t.partitions) for t in d.topics]) == ("Ongoing", [("a", [0, 2])])
    assert d.transaction_start_time_ms > 0
    assert end_txn(client, "t", pid, epoch, True) == 0
    wait_state(broker, "t", "CompleteCommit")
    assert end_txn(client, "t", pid, epoch, True) == 0  # a retry of the commit
    assert end_txn(client, "t", pid, epoch, False) == ErrorCode.INVALID_TXN_STATE


def test_unknown_partitions_and_the_ones_not_attempted(client):
    pid, epoch = started(client)
    answer = add_partitions(client, "t", pid, epoch, [("a", 0), ("a", 9), ("missing", 0)])
    assert answer == {
        ("a", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
        ("a", 9): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("missing", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }


def test_describe_an_unknown_id(broker):
    (d,) = describe(broker, "never-seen")
    assert (d.error_code, d.transaction_state) == (ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "")


def test_verify_only_answers_per_partition_without_adding(broker, client):
    pid, epoch = started(client)
    add_partitions(client, "t", pid, epoch, [("a", 0)])
    error, results = verify_only(client, "t", pid, epoch, [("a", 0), ("a", 1)])
    assert (error, results) == (0, {("a", 0): 0, ("a", 1): ErrorCode.INVALID_TXN_STATE})
    (d,) = describe(broker, "t")
    assert [(t.topic, t.partitions) for t in d.topics] == [("a", [0])]  # nothing was added
    _, stale = verify_only(client, "t", pid, epoch + 1, [("a", 0)])
    assert stale == {("a", 0): ErrorCode.PRODUCER_FENCED}


def test_produce_refuses_a_transactional_batch_for_a_partition_never_added(broker, client):
    """KIP-890 part 1: the leader asks the coordinator (brokkr_transaction_verify)."""
    pid, epoch = started(client)
    add_partitions(client, "t", pid, epoch, [("a", 0)])

    def produce(partition):
        records = build_batch(
            [(b"k", b"v")],
            timestamp=1_700_000_000_000,
            attributes=TRANSACTIONAL_FLAG,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
        body = produce_body("a", records, acks=-1, partition=partition)
        body.transactional_id = "t"
        return client.request(PRODUCE, 9, body).responses[0].partition_responses[0].error_code

    assert produce(0) == 0
    assert produce(1) == ErrorCode.INVALID_TXN_STATE
    assert broker.broker.partition("a", 1).high_watermark == 0


def deny_secrets(a) -> bool:
    """Denies WRITE on transactional id "secret", READ on group "g-secret" and CLUSTER_ACTION."""
    return (
        (a.resource_type == ResourceType.TRANSACTIONAL_ID and a.resource_name == "secret")
        or (a.resource_type == ResourceType.GROUP and a.resource_name == "g-secret")
        or (a.resource_type == ResourceType.CLUSTER and a.operation == AclOperation.CLUSTER_ACTION)
    )


def test_authorization_of_ids_groups_and_broker_requests(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST, plugins=(Deny(deny_secrets),))
    b.call(b.broker.create_topic, "a")
    ready(b)
    with RawClient(b.bootstrap_servers) as c:
        assert init_producer_id(c, "secret").error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert add_partitions(c, "secret", 0, 0, [("a", 0)]) == {
            ("a", 0): ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        }
        assert end_txn(c, "secret", 0, 0, True) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert describe(b, "secret")[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert find_coordinator(b, "secret").error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        pid, epoch = started(c, "open")
        body = request_spec(ADD_OFFSETS).cls(
            transactional_id="open", producer_id=pid, producer_epoch=epoch, group_id="g-secret"
        )
        assert c.request(ADD_OFFSETS, 3, body).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        error, _ = verify_only(c, "open", pid, epoch, [("a", 0)])
        assert error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED  # v4+ is for brokers only


def test_verification_can_be_turned_off(brokkr_broker_factory):
    b = brokkr_broker_factory({**FAST, "transaction.partition.verification.enable": False})
    b.call(b.broker.create_topic, "a")
    ready(b)
    with RawClient(b.bootstrap_servers) as c:
        pid, epoch = started(c)
        records = build_batch(
            [(b"k", b"v")],
            timestamp=1,
            attributes=TRANSACTIONAL_FLAG,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
        body = produce_body("a", records, acks=-1, partition=2)
        body.transactional_id = "t"
        assert c.request(PRODUCE, 9, body).responses[0].partition_responses[0].error_code == 0


def txn_offset_commit(c, txn_id, pid, epoch, group="g", offset=5, version=3):
    spec = request_spec(TXN_OFFSET_COMMIT)
    partition = spec.struct("TxnOffsetCommitRequestPartition")(
        partition_index=0, committed_offset=offset, committed_metadata=""
    )
    body = spec.cls(
        transactional_id=txn_id,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        topics=[spec.struct("TxnOffsetCommitRequestTopic")(name="a", partitions=[partition])],
    )
    return c.request(TXN_OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


def test_txn_offset_commit_needs_add_offsets_to_txn_first(broker, client):
    """KIP-890 part 1 for offsets: the group's partition must be in the transaction."""
    groups = coordinator_of(broker.broker)
    broker.call(groups.create_offsets_topic)
    broker.call(groups.wait_loaded)
    pid, epoch = started(client)
    add_partitions(client, "t", pid, epoch, [("a", 0)])
    assert txn_offset_commit(client, "t", pid, epoch) == ErrorCode.INVALID_TXN_STATE
    body = request_spec(ADD_OFFSETS).cls(transactional_id="t", producer_id=pid, producer_epoch=epoch, group_id="g")
    assert client.request(ADD_OFFSETS, 3, body).error_code == 0
    assert txn_offset_commit(client, "t", pid, epoch) == 0
    assert txn_offset_commit(client, "t", pid, epoch, offset=6) == 0  # the transaction is open there now
    assert end_txn(client, "t", pid, epoch, True) == 0
    wait_state(broker, "t", "CompleteCommit")
    offsets = broker.call(lambda: dict(coordinator_of(broker.broker).offsets.get("g")))
    assert offsets[("a", 0)].offset == 6


def test_idle_transactional_ids_expire(brokkr_broker_factory):
    b = brokkr_broker_factory(
        {
            **FAST,
            "transactional.id.expiration.ms": 300,
            "transaction.remove.expired.transactional.id.cleanup.interval.ms": 100,
        }
    )
    ready(b)
    with RawClient(b.bootstrap_servers) as c:
        first = init_producer_id(c, "short-lived")
    deadline = time.time() + 10
    while describe(b, "short-lived")[0].error_code == 0 and time.time() < deadline:
        time.sleep(0.05)
    assert describe(b, "short-lived")[0].error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    with RawClient(b.bootstrap_servers) as c:
        again = init_producer_id(c, "short-lived")  # a new life: a new producer id
    assert (again.error_code, again.producer_epoch) == (0, 0) and again.producer_id != first.producer_id


def test_a_lone_broker_refuses_a_replicated_state_topic(brokkr_broker_factory):
    with pytest.raises(Exception, match="transaction.state.log.replication.factor"):
        brokkr_broker_factory({"transaction.state.log.replication.factor": 3})


def test_without_the_coordinator_init_producer_id_is_not_coordinator(brokkr_broker_factory):
    b = brokkr_broker_factory({"brokkr.plugins.disabled": "brokkr.plugins.transactions"})
    with RawClient(b.bootstrap_servers) as c:
        assert init_producer_id(c, "t").error_code == ErrorCode.NOT_COORDINATOR
        assert init_producer_id(c, None).error_code == 0  # idempotent producers are core's


def hide_one(a) -> bool:
    """Denies DESCRIBE (only) on transactional id "hidden"."""
    return (
        a.resource_type == ResourceType.TRANSACTIONAL_ID
        and a.resource_name == "hidden"
        and a.operation == AclOperation.DESCRIBE
    )


def test_list_transactions_leaves_out_ids_the_principal_may_not_describe(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST, plugins=(Deny(hide_one),))
    ready(b)
    with RawClient(b.bootstrap_servers) as c:
        started(c, "hidden")
        started(c, "shown")
    assert [t.transactional_id for t in list_transactions(b).transaction_states] == ["shown"]
    assert describe(b, "hidden")[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
