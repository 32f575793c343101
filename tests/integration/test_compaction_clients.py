"""Log compaction read back by real clients: overwritten keys and tombstones in small
segments, read by confluent-kafka and kafka-python before and after the cleaner ran."""

from __future__ import annotations

import time

import pytest

from .conftest import ck_consume, ck_create_topic, ck_flush, ck_producer, kp_consume

pytestmark = pytest.mark.brokkr_config(**{"log.cleaner.backoff.ms": 50})

KEYS, ROUNDS, DELETED = 20, 8, 5


def produce_history(bootstrap: str, topic: str) -> dict:
    """Produce the history; returns key -> (offset, value) of each key's last record."""
    producer = ck_producer(bootstrap, **{"linger.ms": 0})
    for r in range(ROUNDS):
        for k in range(KEYS):
            producer.produce(topic, key=b"k%02d" % k, value=b"v%02d-%d" % (k, r))
        ck_flush(producer)
    for k in range(DELETED):
        producer.produce(topic, key=b"k%02d" % k, value=None)
    ck_flush(producer)
    for i in range(30):  # fills the active segment so the history above is all rolled
        producer.produce(topic, key=b"tail", value=b"t%d" % i)
        ck_flush(producer)
    order = [(b"k%02d" % k, b"v%02d-%d" % (k, r)) for r in range(ROUNDS) for k in range(KEYS)]
    order += [(b"k%02d" % k, None) for k in range(DELETED)] + [(b"tail", b"t%d" % i) for i in range(30)]
    return {key: (offset, value) for offset, (key, value) in enumerate(order)}


def latest(records) -> dict:
    out = {}
    for r in records:
        out[r.key] = (r.offset, r.value)
    return out


def wait_cleaned(broker, cleanings: int = 1, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while broker.storage.cleaner.stats["cleanings"] < cleanings:
        assert time.monotonic() < deadline, "the cleaner did not run"
        time.sleep(0.05)


def active_base(broker, topic: str) -> int:
    return broker.call(lambda: broker.topics[topic].partitions[0].log.segments()[-1].base_offset)


@pytest.mark.parametrize("delete_retention_ms", ["0", "3600000"])
def test_compacted_topic_keeps_latest_value_per_key_at_original_offsets(brokkr_broker, topic_name, delete_retention_ms):
    bootstrap = brokkr_broker.bootstrap_servers
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": delete_retention_ms,
    }
    ck_create_topic(bootstrap, topic_name, config=config)
    expected = produce_history(bootstrap, topic_name)
    total = KEYS * ROUNDS + DELETED + 30
    wait_cleaned(brokkr_broker)
    end = total
    cleaned_below = active_base(brokkr_broker, topic_name)
    for read in (ck_consume, kp_consume):
        after = read(bootstrap, topic_name, total, timeout=3)
        assert after and after[-1].offset == end - 1
        assert latest(after) | {} == {
            k: v for k, v in expected.items() if not (v[1] is None and delete_retention_ms == "0")
        }, read.__name__
        below = [r for r in after if r.offset < cleaned_below]
        assert len({r.key for r in below}) == len(below), "a key twice in the cleaned segments"
        assert len(after) < total
        tombstones = [r for r in after if r.value is None]
        assert len(tombstones) == (0 if delete_retention_ms == "0" else DELETED)
