"""read_committed on raw requests: a hand-driven log of aborted, committed and open
transactions; Fetch isolation levels 0 and 1 (the aborted transactions listed, the last
stable offset as bound), a long poll waiting on the last stable offset, ListOffsets."""

from __future__ import annotations

import threading
import time

import pytest
from brokkr.core.protocol.records import iter_batches_untrusted, read_all_records
from brokkr.core.testing import RawClient
from txn_wire import COMMITTED, UNVERIFIED, A, B, build_log, end_txn, txn_batch, txn_produce
from wire import FETCH, LIST_OFFSETS, fetch_body, list_offsets_body


def fetch(broker, isolation: int, offset: int = 0, topic="rc", **kwargs):
    body = fetch_body(topic, offset, **kwargs)
    body.isolation_level = isolation
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(FETCH, 12, body).responses[0].partitions[0]


def visible(part) -> list[bytes]:
    """What a read_committed consumer keeps of a fetch, as Kafka's consumers decide it: an
    aborted transaction listed becomes active at its first offset, its producer's batches
    are dropped until its marker; control batches are never returned."""
    pending = sorted(part.aborted_transactions or [], key=lambda t: t.first_offset)
    active: set[int] = set()
    data, out = part.records or b"", []
    for h in iter_batches_untrusted(data):
        while pending and pending[0].first_offset <= h.last_offset:
            active.add(pending.pop(0).producer_id)
        if h.is_control:
            active.discard(h.producer_id)
        elif h.producer_id not in active:
            out.extend(r.value for r in read_all_records(data[h.position : h.end]))
    return out


@pytest.mark.parametrize("storage", ["segment", "memory"])
def test_fetch_isolation_levels(brokkr_broker_factory, storage):
    broker = brokkr_broker_factory({"brokkr.storage": storage, **UNVERIFIED})
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    uncommitted = fetch(broker, 0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (13, 12)
    assert uncommitted.aborted_transactions is None
    assert [r.value for r in read_all_records(uncommitted.records)][-1] == b"b2"

    committed = fetch(broker, 1)
    assert (committed.high_watermark, committed.last_stable_offset) == (13, 12)
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(A, 1), (A, 9)]
    assert b"b2" not in [r.value for r in read_all_records(committed.records)]
    assert visible(committed) == COMMITTED

    # From offset 4 the first aborted transaction (which ended at 3) is not listed.
    later = fetch(broker, 1, offset=4)
    assert [(t.producer_id, t.first_offset) for t in later.aborted_transactions] == [(A, 9)]
    # Between the last stable offset and the high watermark: nothing yet, and no error.
    beyond = fetch(broker, 1, offset=12)
    assert (beyond.error_code, beyond.records or b"", beyond.aborted_transactions) == (0, b"", [])


def list_latest(broker, isolation: int) -> int:
    body = list_offsets_body("rc", -1)
    body.isolation_level = isolation
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(LIST_OFFSETS, 7, body).topics[0].partitions[0].offset


def test_list_offsets_read_committed_answers_the_last_stable_offset(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "rc")
    build_log(broker)
    assert (list_latest(broker, 0), list_latest(broker, 1)) == (13, 12)
    end_txn(broker, B, True, [("rc", 0)])
    assert (list_latest(broker, 0), list_latest(broker, 1)) == (14, 14)


def test_a_read_committed_long_poll_wakes_when_the_transaction_ends(brokkr_broker_factory):
    broker = brokkr_broker_factory(UNVERIFIED)
    broker.call(broker.broker.create_topic, "rc")
    txn_produce(broker, "rc", txn_batch([b"x"], A))
    ender = threading.Timer(0.5, lambda: end_txn(broker, A, True, [("rc", 0)]))
    ender.start()
    started = time.monotonic()
    part = fetch(broker, 1, max_wait_ms=5000, min_bytes=1)
    waited = time.monotonic() - started
    ender.join()
    assert 0.4 < waited < 4, waited
    assert visible(part) == [b"x"] and part.last_stable_offset == 2
