"""Idempotent producers on raw sockets against a real broker: a retried batch is stored once
and answered with its original offsets (also after a restart), Kafka 4's sequence and epoch
errors, and InitProducerId."""

from __future__ import annotations

import json

import pytest
from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.producer_state import INT32_MAX
from brokkr.core.protocol.records import build_batch, iter_batches_untrusted
from brokkr.core.testing import RawClient
from wire import FETCH, INIT_PRODUCER_ID, PRODUCE, fetch_body, init_producer_id_body, produce_body

PID = 4000
T0 = 1_700_000_000_000


def idempotent(seq: int, n: int = 1, pid: int = PID, epoch: int = 0) -> bytes:
    """A batch of ``n`` records from producer ``pid`` at ``epoch``, sequences from ``seq``."""
    records = [(b"k%d" % i, b"seq %d" % (seq + i)) for i in range(n)]
    return build_batch(records, timestamp=T0, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def produce(broker, records: bytes, acks: int = 1):
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(PRODUCE, 9, produce_body("t", records, acks=acks)).responses[0].partition_responses[0]


def stored(broker) -> list[tuple[int, int, int]]:
    """(base offset, record count, base sequence) of every stored batch."""
    with RawClient(broker.bootstrap_servers) as c:
        records = c.request(FETCH, 12, fetch_body("t")).responses[0].partitions[0].records
    return [(h.base_offset, h.record_count, h.base_sequence) for h in iter_batches_untrusted(records or b"")]


def log_end(broker) -> int:
    return broker.broker.topics["t"].partitions[0].log.log_end_offset


def start(factory, config=None, plugins=()):
    broker = factory(config, plugins)
    if "t" not in broker.broker.topics:
        broker.call(broker.broker.create_topic, "t")
    return broker


class Observer:
    @hookimpl
    def brokkr_after_log_append(self, info):
        self.appended.append(info.first_offset)

    @hookimpl
    def brokkr_high_watermark_advanced(self, new):
        self.high_watermarks.append(new)

    def __init__(self):
        self.appended: list[int] = []
        self.high_watermarks: list[int] = []


# -- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize("acks", [1, -1])
def test_a_retried_batch_is_stored_once_and_answered_with_its_original_offsets(brokkr_broker_factory, acks):
    observer = Observer()
    broker = start(brokkr_broker_factory, plugins=[observer])
    first, second = idempotent(0, n=3), idempotent(3, n=2)

    responses = [produce(broker, b, acks) for b in (first, second, first, second, first)]

    assert [(r.error_code, r.base_offset) for r in responses] == [(0, 0), (0, 3), (0, 0), (0, 3), (0, 0)]
    assert stored(broker) == [(0, 3, 0), (3, 2, 3)]
    assert observer.appended == [0, 3], "a retry fires no brokkr_after_log_append"
    assert observer.high_watermarks == [3, 5]


def test_retries_of_the_last_five_batches_are_recognised_older_ones_are_out_of_order(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    batches = [idempotent(seq) for seq in range(6)]
    for b in batches:
        produce(broker, b)

    assert [produce(broker, b).base_offset for b in batches[1:]] == [1, 2, 3, 4, 5]
    oldest = produce(broker, batches[0])
    assert oldest.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert oldest.error_message == (
        "Out of order sequence number for producer 4000 at offset 6 in partition t-0: 0 (incoming seq. number), "
        "5 (current end sequence number)"
    )
    assert log_end(broker) == 6


def test_batches_without_a_producer_id_are_never_deduplicated(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    plain = build_batch([(b"k", b"v")], timestamp=T0)
    assert [produce(broker, plain).base_offset for _ in range(2)] == [0, 1]


# -- rejections -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, batch, code, message",
    [
        (
            idempotent(0, n=2),
            idempotent(3),
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            "Out of order sequence number for producer 4000 at offset 2 in partition t-0: 3 (incoming seq. number), "
            "1 (current end sequence number)",
        ),
        (
            idempotent(0, epoch=1),
            idempotent(1, epoch=0),
            ErrorCode.INVALID_PRODUCER_EPOCH,
            "Epoch of producer 4000 at offset 1 in t-0 is 0, which is smaller than the last seen epoch 1",
        ),
        (
            idempotent(0, epoch=0),
            idempotent(1, epoch=1),
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            "Invalid sequence number for new epoch of producer 4000 at offset 1 in partition t-0: 1 (request epoch), "
            "1 (seq. number), 0 (current producer epoch)",
        ),
    ],
    ids=["sequence-gap", "fenced-epoch", "new-epoch-not-at-zero"],
)
def test_rejections_have_kafkas_codes_and_messages_and_store_nothing(
    brokkr_broker_factory, before, batch, code, message
):
    broker = start(brokkr_broker_factory)
    assert produce(broker, before).error_code == ErrorCode.NONE
    end = log_end(broker)
    for acks in (1, -1):
        response = produce(broker, batch, acks)
        assert (response.error_code, response.error_message, response.base_offset) == (code, message, -1)
    assert log_end(broker) == end


def test_a_rejection_with_acks_0_closes_the_connection(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    produce(broker, idempotent(0))
    with RawClient(broker.bootstrap_servers) as c:
        c.send(PRODUCE, 9, produce_body("t", idempotent(5), acks=0))
        assert c.is_closed_by_peer()
    assert log_end(broker) == 1


def test_an_unknown_producer_may_start_at_any_sequence_which_wraps_at_int32_max(brokkr_broker_factory):
    """Kafka 2.5+ (KIP-360) no longer answers UNKNOWN_PRODUCER_ID: a producer the partition
    has no state for (new, or whose records retention deleted) is accepted as it comes."""
    broker = start(brokkr_broker_factory)
    wrapping = idempotent(INT32_MAX - 1, n=3)  # sequences MAX-1, MAX, 0
    assert [produce(broker, b).error_code for b in (wrapping, idempotent(1), wrapping)] == [0, 0, 0]
    assert stored(broker) == [(0, 3, INT32_MAX - 1), (3, 1, 1)]


def test_a_bumped_epoch_starts_at_sequence_zero_and_fences_the_old_one(brokkr_broker_factory):
    broker = start(brokkr_broker_factory)
    produce(broker, idempotent(0, n=2, epoch=0))
    assert produce(broker, idempotent(0, epoch=1)).base_offset == 2
    assert produce(broker, idempotent(2, epoch=0)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert produce(broker, idempotent(0, n=2, epoch=0)).error_code == ErrorCode.INVALID_PRODUCER_EPOCH, (
        "a retry from the old epoch is fenced, not deduplicated"
    )


# -- restarts -------------------------------------------------------------------------------


def test_the_last_batch_is_still_recognised_after_a_restart(brokkr_broker_factory, tmp_path):
    config = {"log.dirs": str(tmp_path)}
    broker = start(brokkr_broker_factory, config)
    first, last = idempotent(0, n=2), idempotent(2, n=2)
    produce(broker, first)
    produce(broker, last)
    broker.stop()
    assert (tmp_path / "t-0" / "00000000000000000004.snapshot").exists(), "written at the log end when stopping"

    broker = start(brokkr_broker_factory, config)
    assert (produce(broker, last).error_code, produce(broker, last).base_offset) == (0, 2)
    # A snapshot keeps each producer's last batch only, as Kafka's does.
    assert produce(broker, first).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(broker, idempotent(4)).base_offset == 4
    assert stored(broker) == [(0, 2, 0), (2, 2, 2), (4, 1, 4)]


def test_without_a_snapshot_the_state_is_rebuilt_from_the_log(brokkr_broker_factory, tmp_path):
    config = {"log.dirs": str(tmp_path)}
    broker = start(brokkr_broker_factory, config)
    batches = [idempotent(seq, n=2) for seq in (0, 2, 4)]
    for b in batches:
        produce(broker, b)
    broker.stop()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()

    broker = start(brokkr_broker_factory, config)
    assert [produce(broker, b).base_offset for b in batches] == [0, 2, 4]
    assert log_end(broker) == 6


def test_a_roll_snapshot_and_the_batches_after_it_rebuild_the_state(brokkr_broker_factory, tmp_path):
    """A crash leaves no snapshot at the log end: the one written when a segment rolled
    is loaded and the batch headers after it are replayed."""
    config = {"log.dirs": str(tmp_path), "log.segment.bytes": "300"}
    broker = start(brokkr_broker_factory, config)
    batches = [idempotent(seq, n=2) for seq in range(0, 12, 2)]
    for b in batches:
        produce(broker, b)
    broker.stop()
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    # The append of offsets 6-7 rolled a segment; the newest two are kept.
    assert [p.name for p in snapshots] == ["00000000000000000008.snapshot", "00000000000000000012.snapshot"]
    snapshots[-1].unlink()  # as if the broker had crashed instead of stopping

    broker = start(brokkr_broker_factory, config)
    # 6-7 from the snapshot, 8-9 and 10-11 replayed from the log.
    assert [produce(broker, b).base_offset for b in batches[-3:]] == [6, 8, 10]
    assert produce(broker, batches[-4]).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(broker, idempotent(12)).base_offset == 12


# -- InitProducerId -------------------------------------------------------------------------


def init_producer_id(broker, version: int = 4, **kwargs):
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(INIT_PRODUCER_ID, version, init_producer_id_body(**kwargs))


@pytest.mark.parametrize("version", [0, 2, 5])
def test_producer_ids_are_new_at_epoch_0_and_unique_across_restarts(brokkr_broker_factory, tmp_path, version):
    config = {"log.dirs": str(tmp_path)}
    broker = brokkr_broker_factory(config)
    first = [init_producer_id(broker, version) for _ in range(3)]
    assert [(r.error_code, r.producer_id, r.producer_epoch) for r in first] == [(0, 0, 0), (0, 1, 0), (0, 2, 0)]
    block = json.loads((tmp_path / "brokkr-producer-ids.json").read_text())
    assert block == {"version": 0, "next_producer_id": 1000}, "the block is persisted before its ids are used"
    broker.stop()

    broker = brokkr_broker_factory(config)
    assert init_producer_id(broker, version).producer_id == 1000, "the rest of the old block is skipped, as in Kafka"


def test_kip_360_a_producer_naming_its_id_and_epoch_gets_a_new_id(brokkr_broker):
    """Kafka's transaction coordinator answers a request without a transactional id with a
    new producer id at epoch 0, whatever id and epoch it names."""
    first = init_producer_id(brokkr_broker)
    again = init_producer_id(brokkr_broker, producer_id=first.producer_id, producer_epoch=first.producer_epoch)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id + 1, 0)
    half = init_producer_id(brokkr_broker, producer_id=first.producer_id)
    assert (half.error_code, half.producer_id, half.producer_epoch) == (ErrorCode.INVALID_REQUEST, -1, -1)


def test_new_producer_ids_skip_the_ids_the_logs_hold(brokkr_broker_factory, tmp_path):
    """Partition directories written elsewhere (a Kafka broker's) hold producer ids this
    broker never handed out; they are not handed out again."""
    config = {"log.dirs": str(tmp_path)}
    broker = start(brokkr_broker_factory, config)
    produce(broker, idempotent(0, pid=4321))
    broker.stop()
    broker = brokkr_broker_factory(config)
    assert init_producer_id(broker).producer_id == 4322


@pytest.mark.parametrize(
    "transactional_id, timeout_ms, code",
    [
        ("tx", 60000, ErrorCode.NOT_COORDINATOR),
        ("", 60000, ErrorCode.INVALID_REQUEST),
        ("tx", 0, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
        ("tx", 900001, ErrorCode.INVALID_TRANSACTION_TIMEOUT),
    ],
    ids=["no-coordinator", "empty-id", "zero-timeout", "above-transaction.max.timeout.ms"],
)
def test_transactional_ids_are_answered_as_by_a_broker_that_is_not_their_coordinator(
    brokkr_broker, transactional_id, timeout_ms, code
):
    response = init_producer_id(brokkr_broker, transactional_id=transactional_id, timeout_ms=timeout_ms)
    assert (response.error_code, response.producer_id, response.producer_epoch) == (code, -1, -1)


class WritesOnlyTopics:
    """Allows WRITE on topic ``t`` and nothing else."""

    @hookimpl
    def brokkr_authorize(self, actions):
        return [
            AuthorizationResult.ALLOWED
            if (a.operation, a.resource_type, a.resource_name) == (AclOperation.WRITE, ResourceType.TOPIC, "t")
            else AuthorizationResult.DENIED
            for a in actions
        ]


def test_init_producer_id_authorization(brokkr_broker_factory):
    broker = brokkr_broker_factory(plugins=[WritesOnlyTopics()])
    assert init_producer_id(broker).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    broker.call(broker.broker.create_topic, "t")
    assert init_producer_id(broker).error_code == ErrorCode.NONE, "WRITE on a topic is enough (KIP-679)"
    denied = init_producer_id(broker, transactional_id="tx")
    assert denied.error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
