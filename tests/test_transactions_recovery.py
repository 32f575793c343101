"""What survives: the coordinator's state in __transaction_state across restarts; a
transaction in PrepareCommit when the broker is SIGKILLed is completed by the next start
(markers written, last stable offset moved on); a transaction left open by a SIGKILLed
producer is aborted after its timeout; a partition Kafka wrote loads and its records
re-encode byte for byte."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import read_all_records
from brokkr.core.testing import RawClient
from brokkr.plugins.transactions.records import (
    decode_record,
    encode_key,
    encode_value,
    partitions_struct,
    record_spec,
    value_struct,
)

from tests.txn_coordinator import DESCRIBE_TRANSACTIONS, FAST, describe, init_producer_id, ready, stable, wait_state

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PROCESSES = Path(__file__).parent / "txn_processes.py"
KAFKA_LOGS = Path(__file__).parent / "fixtures" / "kafka-logs"


def test_kafka_written_transaction_records_reencode_byte_for_byte():
    records = read_all_records((KAFKA_LOGS / "__transaction_state-44" / "00000000000000000000.log").read_bytes())
    decoded = [decode_record(r.key, r.value) for r in records]
    for record, d in zip(records, decoded, strict=True):
        assert encode_key(d.transactional_id) == record.key
        assert encode_value(d.value, d.value_version) == record.value
    # Empty, Ongoing, PrepareCommit, CompleteCommit of one ksqlDB transaction
    assert [d.value.transaction_status for d in decoded] == [0, 1, 2, 4]
    assert {d.transactional_id for d in decoded} == {"default_"}


def test_transaction_records_are_written_as_the_generic_encoder_writes_them():
    """Every state change's record is packed by hand (plugins/transactions/records.py): the
    same bytes as the codec compiled from Kafka's JSON, partitions null or listed."""
    rng = random.Random(5)
    spec = record_spec("TransactionLogValue")
    for _ in range(200):
        partitions = rng.choice(
            [None, [], [partitions_struct(f"tópic-{t}", rng.sample(range(50), rng.randint(0, 4))) for t in range(3)]]
        )
        value = value_struct(
            producer_id=rng.randint(-1, 1 << 50),
            producer_epoch=rng.randint(-1, 32766),
            transaction_timeout_ms=rng.randint(1, 900_000),
            transaction_status=rng.randint(0, 6),
            transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=rng.randint(-1, 1 << 42),
            transaction_start_timestamp_ms=rng.randint(-1, 1 << 42),
        )
        assert encode_value(value) == b"\x00\x00" + bytes(spec.encode(0, value).buf)
        transactional_id = rng.choice(["", "txn", "trånsaction"])
        key_spec = record_spec("TransactionLogKey")
        assert encode_key(transactional_id) == b"\x00\x00" + bytes(
            key_spec.encode(0, key_spec.cls(transactional_id=transactional_id)).buf
        )


def test_the_partition_kafka_wrote_loads(tmp_path, brokkr_broker_factory):
    log_dir = tmp_path / "kafka-data"
    log_dir.mkdir()
    for name in ("__cluster_metadata-0", "__transaction_state-44", "_confluent-ksql-default__command_topic-0"):
        shutil.copytree(KAFKA_LOGS / name, log_dir / name)
    b = brokkr_broker_factory({"log.dirs": str(log_dir)})
    ready(b, "default_")
    (d,) = describe(b, "default_")
    assert (d.error_code, d.transaction_state, d.producer_id, d.producer_epoch, d.transaction_timeout_ms) == (
        0,
        "CompleteCommit",
        0,
        0,
        60000,
    )
    assert d.transaction_start_time_ms == 1728561475379
    with RawClient(b.bootstrap_servers) as c:
        r = init_producer_id(c, "default_")
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 0, 1)  # Kafka's producer id, its epoch bumped


def test_state_survives_a_restart(tmp_path, brokkr_broker_factory):
    config = {**FAST, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "a")
    ready(b)
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": "kept"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("a", b"v", partition=2)
    p.commit_transaction(10)
    before = wait_state(b, "kept", "CompleteCommit")
    b.stop()
    again = brokkr_broker_factory(config)
    ready(again, "kept")
    after = wait_state(again, "kept", "CompleteCommit")
    assert (after.producer_id, after.producer_epoch, after.transaction_start_time_ms) == (
        before.producer_id,
        before.producer_epoch,
        before.transaction_start_time_ms,
    )
    with RawClient(again.bootstrap_servers) as c:
        r = init_producer_id(c, "kept")
    assert (r.producer_id, r.producer_epoch) == (before.producer_id, before.producer_epoch + 1)


def test_prepare_commit_is_completed_after_the_broker_is_killed(tmp_path, brokkr_broker_factory):
    log_dir = tmp_path / "data"
    child = subprocess.Popen(
        [sys.executable, str(PROCESSES), "broker", str(log_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = child.stdout.readline().split()
        assert line[0] == "listening", line
        bootstrap = line[1]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("a", 3)])["a"].result(10)
        p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": "dies"})
        p.init_transactions(20)
        p.begin_transaction()
        for i in range(6):
            p.produce("a", b"committed-%d" % i, partition=i % 2)
        p.commit_transaction(10)  # answered once PrepareCommit is written; the markers never come
        with RawClient(bootstrap) as c:
            body = request_spec(DESCRIBE_TRANSACTIONS).cls(transactional_ids=["dies"])
            state = c.request(DESCRIBE_TRANSACTIONS, 0, body).transaction_states[0].transaction_state
        assert state == "PrepareCommit"
    finally:
        child.kill()
        child.wait(10)
    b = brokkr_broker_factory({**FAST, "log.dirs": str(log_dir)})
    wait_state(b, "dies", "CompleteCommit")
    for partition in (0, 1):
        lso, hw = stable(b, "a", partition)
        assert lso == hw == 4  # 3 records, then the COMMIT marker the new start wrote


def test_an_open_transaction_of_a_killed_producer_is_aborted_after_its_timeout(brokkr_broker_factory):
    b = brokkr_broker_factory(FAST)
    b.call(b.broker.create_topic, "a")
    ready(b)
    child = subprocess.run(
        [sys.executable, str(PROCESSES), "producer", b.bootstrap_servers, "abandoned", "1500"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9 and "produced" in child.stdout, child.stderr
    (d,) = describe(b, "abandoned")
    assert d.transaction_state == "Ongoing"
    assert stable(b, "a", 0) == (0, 5)  # the open transaction holds the last stable offset
    aborted = wait_state(b, "abandoned", "CompleteAbort", timeout=10)
    assert aborted.producer_epoch == 1  # the abort fenced the producer's epoch
    assert stable(b, "a", 0) == (6, 6)  # 5 records and the ABORT marker
