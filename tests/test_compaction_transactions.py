"""Compaction of a log with transactions, as Kafka's cleaner does it: an aborted
transaction's records go (and never hide an older committed value of their key), committed
ones are compacted like any record, a marker goes once no record of its transaction is left
and delete.retention.ms has passed (its .txnindex entry with it), nothing at or past the
last stable offset is touched."""

from __future__ import annotations

import time

import pytest
from brokkr.core.protocol.control import read_end_txn_marker
from brokkr.core.protocol.records import TRANSACTIONAL_FLAG, build_batch, iter_batches_untrusted, read_all_records
from brokkr.plugins.storage.segment import cleaner
from txn_wire import T0, UNVERIFIED, end_txn, txn_produce

A, B = 9500, 9600
FILLER = b"f" * 600


def records(pid, seq, *pairs):
    return build_batch(
        list(pairs), timestamp=T0, attributes=TRANSACTIONAL_FLAG, producer_id=pid, producer_epoch=0, base_sequence=seq
    )


def plain(key, value):
    return build_batch([(key, value)], timestamp=T0)


def write(broker, topic):
    """0 k1=v1 | 1-2 A: k1, k2 (aborted) | 3 ABORT A | 4 B: k3 | 5 COMMIT B | 6 A: k4 |
    7 COMMIT A | 8.. fillers (rolling segments) | last: B open with k5."""
    one = [(topic, 0)]
    txn_produce(broker, topic, plain(b"k1", b"v1"), txn_id=None)
    txn_produce(broker, topic, records(A, 0, (b"k1", b"aborted"), (b"k2", b"aborted")))
    end_txn(broker, A, False, one)
    txn_produce(broker, topic, records(B, 0, (b"k3", b"b3")))
    end_txn(broker, B, True, one)
    txn_produce(broker, topic, records(A, 2, (b"k4", b"a4")))
    end_txn(broker, A, True, one)
    for _ in range(4):
        txn_produce(broker, topic, plain(b"f", FILLER), txn_id=None)
    txn_produce(broker, topic, records(B, 1, (b"k5", b"open")))


def clean(broker, topic):
    plog = broker.broker.partition(topic, 0).log
    settings = broker.broker.storage.cleaner.settings
    now = int(time.time() * 1000)
    cleaning = broker.call(lambda: cleaner.clean(plog, broker.broker.storage.codecs, 0, now, settings))
    assert cleaning is not None
    assert broker.call(plog.install_cleaned, cleaning)


def stored(broker, topic):
    """(offset, what) per batch: 'ABORT'/'COMMIT' for markers, else the values."""
    plog = broker.broker.partition(topic, 0).log
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20, plog.log_end_offset, True)
        for h in iter_batches_untrusted(data):
            if h.is_control:
                out.append((h.base_offset, "COMMIT" if read_end_txn_marker(data, h).committed else "ABORT"))
            else:
                out.append((h.base_offset, [r.value for r in read_all_records(data[h.position : h.end])]))
            offset = h.last_offset + 1
    return out


@pytest.mark.parametrize("retention", ["86400000", "0"])
def test_aborted_records_and_obsolete_markers_are_compacted_away(brokkr_broker_factory, retention):
    broker = brokkr_broker_factory({"log.cleaner.enable": "false", **UNVERIFIED})
    config = {"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": retention}
    broker.call(broker.broker.create_topic, "c", 1, config)
    write(broker, "c")
    partition = broker.broker.partition("c", 0)
    lso = partition.last_stable_offset
    if retention == "0":
        time.sleep(0.01)  # the segments' modification times are now past the horizon
    clean(broker, "c")
    got = stored(broker, "c")
    assert (0, [b"v1"]) in got, "the aborted k1 hides nothing"
    assert not any(isinstance(w, list) and b"aborted" in w for _, w in got)
    assert (4, [b"b3"]) in got and (5, "COMMIT") in got and (6, [b"a4"]) in got and (7, "COMMIT") in got
    assert (3, "ABORT") in got if retention != "0" else (3, "ABORT") not in got
    assert [w for _, w in got if isinstance(w, list) and w == [FILLER]] != []
    assert got[-1][1] == [b"open"] and got[-1][0] >= lso, "nothing past the last stable offset is cleaned"
    # The aborted-transaction index keeps an entry exactly as long as its marker.
    assert bool(partition.aborted.aborted_txns(0, lso)) == (retention != "0")
