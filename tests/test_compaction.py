"""Log compaction on disk: a crash at each step of a cleaning recovers to a consistent
log (Kafka's LogLoader completes a ``.swap`` and drops ``.cleaned``); a SIGKILL of
``brokkr serve`` while it cleans; idempotent producer state; a key map that fills; compressed
batches filtered in C and recompressed; settings refused at start; produce latency while the
cleaner works."""

from __future__ import annotations

import os
import time

import pytest
from brokkr.core.broker import BrokerThread
from brokkr.core.errors import ConfigError
from brokkr.plugins.storage.segment import cleaner
from brokkr.plugins.storage.segment.segment import scan_batches
from serve import Served

from tests.integration.conftest import ck_consume, ck_create_topic, ck_flush, ck_producer
from tests.integration.test_compaction_clients import produce_history

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.cleanable.dirty.ratio": "0.01"}
TOTAL = 195  # records produce_history writes


def partition_log(broker, topic):
    return broker.topics[topic].partitions[0].log


def prepare_swap(broker, topic) -> cleaner.Cleaning:
    """Run a cleaning's thread part by hand: ``.swap`` files on disk, nothing installed."""
    plog = partition_log(broker, topic)
    settings = broker.storage.cleaner.settings
    return broker.call(lambda: cleaner.clean(plog, broker.storage.codecs, 0, int(time.time() * 1000), settings))


def check_latest(bootstrap, topic, expected):
    got = ck_consume(bootstrap, topic, TOTAL, timeout=4)
    latest = {r.key: (r.offset, r.value) for r in got}
    assert latest == expected
    return got


@pytest.mark.parametrize("step", ["cleaned", "swap", "swap-old-half-deleted"])
def test_a_crash_at_each_step_of_a_swap_recovers_a_consistent_log(brokkr_broker_factory, tmp_path, step):
    data = tmp_path / "data"
    conf = {"log.dirs": str(data), "log.cleaner.enable": "false"}
    broker = brokkr_broker_factory(conf)
    topic = "compacted"
    ck_create_topic(broker.bootstrap_servers, topic, config=COMPACT)
    expected = produce_history(broker.bootstrap_servers, topic)
    cleaning = prepare_swap(broker, topic)
    assert cleaning is not None and cleaning.bases
    broker.stop()
    d = data / f"{topic}-0"
    swaps = sorted(d.glob("*.swap"))
    assert swaps
    if step == "cleaned":  # killed before the rename to .swap
        for p in swaps:
            p.rename(p.with_name(p.name.replace(".swap", ".cleaned")))
    elif step == "swap-old-half-deleted":  # killed while the old segments were deleted
        for seg in cleaning.replaced[0][: max(len(cleaning.replaced[0]) // 2, 1)]:
            seg.path.unlink()
    (data / ".kafka_cleanshutdown").unlink()  # as after a SIGKILL
    restarted = brokkr_broker_factory(conf)
    got = check_latest(restarted.bootstrap_servers, topic, expected)
    assert not list(d.glob("*.swap")) and not list(d.glob("*.cleaned"))
    offsets = [r.offset for r in got]
    assert offsets == sorted(offsets)
    if step == "cleaned":
        assert len(got) == TOTAL, "the old segments are untouched"
    else:
        assert len(got) < TOTAL, "the swap was completed"


def test_the_last_batch_of_an_idempotent_producer_is_kept(brokkr_broker_factory, tmp_path):
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "d"), "log.cleaner.enable": "false"})
    topic = "idem"
    ck_create_topic(broker.bootstrap_servers, topic, config=COMPACT)
    producer = ck_producer(broker.bootstrap_servers, **{"enable.idempotence": True, "linger.ms": 0})
    for i in range(40):
        producer.produce(topic, key=b"same", value=b"v%d" % i)
        ck_flush(producer)
    other = ck_producer(broker.bootstrap_servers, **{"linger.ms": 0})
    for _ in range(60):  # roll the idempotent producer's last batch out of the active segment
        other.produce(topic, key=b"other", value=b"x" * 40)
        ck_flush(other)
    plog = partition_log(broker, topic)
    last_before = max(
        (h for s in plog._segments for _, h, _ in scan_batches(s.fd, 0, s.size) if h.producer_id >= 0),
        key=lambda h: h.base_offset,
    )
    cleaning = prepare_swap(broker, topic)
    assert broker.call(plog.install_cleaned, cleaning)
    kept = [h for s in plog._segments for _, h, _ in scan_batches(s.fd, 0, s.size) if h.producer_id >= 0]
    assert len(kept) == 1, "only the last record of the key and the producer's last batch stay"
    (h,) = kept
    assert (h.base_offset, h.base_sequence, h.producer_epoch) == (
        last_before.base_offset,
        last_before.base_sequence,
        last_before.producer_epoch,
    )
    producer.produce(topic, key=b"same", value=b"after")  # the producer's sequence still follows on
    ck_flush(producer)


def test_a_sigkill_while_cleaning_recovers_every_key(tmp_path):
    args = (
        "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", "log.cleaner.backoff.ms=1",
        "--override", "log.cleanup.policy=compact",
        "--override", "log.segment.bytes=4096",
        "--override", "log.cleaner.min.cleanable.ratio=0.01",
    )  # fmt: skip
    expected: dict = {}
    for round_ in range(3):  # a bounded number of kills, at different moments of the cleaning
        served = Served(*args, cwd=tmp_path)
        producer = ck_producer(served.address, **{"linger.ms": 5})
        offsets = {}

        def on_delivery(err, msg, offsets=offsets):
            assert err is None
            offsets[msg.key()] = (msg.offset(), msg.value())

        for i in range(3000):
            producer.produce("t", key=b"k%03d" % (i % 200), value=b"r%d-%d" % (round_, i), on_delivery=on_delivery)
            if i % 500 == 0:
                producer.poll(0)
        ck_flush(producer)
        expected.update(offsets)
        time.sleep(0.02 * round_)
        served.kill()
    restarted = Served(*args, cwd=tmp_path)
    try:
        got = ck_consume(restarted.address, "t", 9000, timeout=5)
        assert {r.key: (r.offset, r.value) for r in got} == expected
    finally:
        restarted.proc.terminate()
        restarted.proc.wait(timeout=10)
    assert "cleaned" in restarted.output() or len(got) < 9000


@pytest.mark.parametrize("walk", ["c", "python"])
def test_a_full_key_map_stops_at_the_first_key_it_cannot_hold(brokkr_broker_factory, tmp_path, monkeypatch, walk):
    """Kafka's buildOffsetMap: the key map holds at most its limit of keys (the share of
    ``log.cleaner.dedupe.buffer.size``); at the first key past it, mid-segment, the cleaning
    keeps every record from there on and checkpoints there, and the next cleanings go on
    from it until each key's last record alone is left. The C map and the Python one alike."""
    if walk == "python":
        monkeypatch.setattr(cleaner, "_cleaner", None)
    elif cleaner._cleaner is None:
        pytest.skip("brokkr.plugins.storage.segment._cleaner is not built")
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "d"), "log.cleaner.enable": "false"})
    topic = "full"
    ck_create_topic(broker.bootstrap_servers, topic, config=COMPACT)
    producer = ck_producer(broker.bootstrap_servers, **{"linger.ms": 20})
    expected = {}

    def on_delivery(err, msg):
        assert err is None
        expected[msg.key()] = (msg.offset(), msg.value())

    for round_ in range(3):
        for k in range(20):
            producer.produce(topic, key=b"k%02d" % k, value=b"r%d" % round_ + b"v" * 24, on_delivery=on_delivery)
        ck_flush(producer)
    plog = partition_log(broker, topic)
    settings = cleaner.CleanerSettings(240, broker.storage.cleaner.settings.io_buffer_size, float("inf"), 1)
    assert settings.map_slots == 9
    checkpoints = []
    while len(checkpoints) < 30:
        cleaning = broker.call(
            lambda: cleaner.clean(plog, broker.storage.codecs, plog.first_dirty, int(time.time() * 1000), settings)
        )
        if cleaning is None:
            break
        assert broker.call(plog.install_cleaned, cleaning)
        checkpoints.append(plog.first_dirty)
    assert checkpoints[0] == 9, "the tenth key (offset 9) did not fit"
    assert checkpoints == sorted(set(checkpoints)) and len(checkpoints) > 3
    left = sum(h.record_count for s in plog._segments for _, h, _ in scan_batches(s.fd, 0, s.size))
    got = ck_consume(broker.bootstrap_servers, topic, left)
    assert len(got) == left
    assert {r.key: (r.offset, r.value) for r in got} == expected
    below = [r.key for r in got if r.offset < checkpoints[-1]]
    assert below and len(below) == len(set(below)), "below the checkpoint each key's last record alone"


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_batches_are_filtered_by_the_c_walk_and_recompressed(
    brokkr_broker_factory, tmp_path, monkeypatch, codec
):
    """A compressed batch of which some records stay is decompressed, filtered by the C
    walk (the Python walk is never called) and recompressed with its codec, its header's
    offsets kept; one whose records all stay is copied byte for byte; a client reads the
    last value, tombstone and headers of every key."""
    if cleaner._cleaner is None:
        pytest.skip("brokkr.plugins.storage.segment._cleaner is not built")

    def python_walk(*args):
        raise AssertionError("the Python walk ran")

    monkeypatch.setattr(cleaner, "_walk", python_walk)
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "d"), "log.cleaner.enable": "false"})
    topic = "squeezed"
    ck_create_topic(broker.bootstrap_servers, topic, config=COMPACT)
    producer = ck_producer(broker.bootstrap_servers, **{"linger.ms": 20, "compression.type": codec})
    rounds = [  # one batch, and one segment, each: 0-4, 5-9, then the active segment
        [(b"k%d" % k, os.urandom(120)) for k in range(5)],
        [(b"k%d" % k, None if k == 3 else os.urandom(120)) for k in (0, 1, 2, 3, 5)],
        [(b"t%d" % k, os.urandom(120)) for k in range(5)],
    ]
    for i, batch in enumerate(rounds):
        for key, value in batch:
            producer.produce(topic, key=key, value=value, headers=[("round", b"%d" % i), ("k", key)])
        ck_flush(producer)
    plog = partition_log(broker, topic)

    def stored():
        segments = [scan_batches(s.fd, 0, s.size) for s in plog._segments]
        return {h.base_offset: (h, bytes(buf[h.position : h.end])) for batches in segments for _, h, buf in batches}

    before = stored()
    assert sorted(before) == [0, 5, 10] and len(plog._segments) == 3
    assert broker.call(plog.install_cleaned, prepare_swap(broker, topic))
    after = stored()
    first, copied = after[0][0], after[5][1]
    assert (first.record_count, first.last_offset_delta, first.codec) == (1, 4, before[0][0].codec) and first.codec
    assert copied == before[5][1]
    latest = {
        key: (value, [("round", b"%d" % i), ("k", key)]) for i, batch in enumerate(rounds) for key, value in batch
    }
    got = ck_consume(broker.bootstrap_servers, topic, len(latest))
    assert {r.key: (r.value, r.headers) for r in got} == latest
    assert [r.offset for r in got] == [4, *range(5, 15)]


@pytest.mark.parametrize(
    "setting",
    [
        {"log.cleaner.dedupe.buffer.size": "1000"},
        {"log.cleaner.io.max.bytes.per.second": "0"},
        {"log.cleaner.min.cleanable.ratio": "1.5"},
    ],
)
def test_settings_the_cleaner_cannot_honour_are_refused_at_start(tmp_path, setting):
    with pytest.raises(ConfigError, match=next(iter(setting))):
        BrokerThread({"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0", **setting}).start()


def test_produce_latency_stays_low_while_the_cleaner_works(brokkr_broker_factory, tmp_path):
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "d"), "log.cleaner.enable": "false"})
    ck_create_topic(broker.bootstrap_servers, "big", config={**COMPACT, "segment.bytes": "262144"})
    ck_create_topic(broker.bootstrap_servers, "live")
    producer = ck_producer(broker.bootstrap_servers, **{"linger.ms": 20, "batch.num.messages": 2000})
    for i in range(60_000):
        producer.produce("big", key=b"k%04d" % (i % 5000), value=b"v" * 100)
        if i % 5000 == 0:
            producer.poll(0)
    ck_flush(producer, timeout=60)
    plog = partition_log(broker, "big")
    settings = broker.storage.cleaner.settings
    pool = broker.storage.cleaner.pool or __import__("concurrent.futures").futures.ThreadPoolExecutor(1)
    job = pool.submit(cleaner.clean, plog, broker.storage.codecs, 0, int(time.time() * 1000), settings)
    live = ck_producer(broker.bootstrap_servers, **{"linger.ms": 0})
    latencies = []
    while not job.done():
        start = time.perf_counter()
        live.produce("live", value=b"x")
        ck_flush(live)
        latencies.append(time.perf_counter() - start)
    cleaning = job.result()
    assert cleaning is not None and cleaning.read > 5_000_000
    assert len(latencies) >= 10, "the cleaning was too short to measure"
    latencies.sort()
    p99, worst = latencies[int(len(latencies) * 0.99)], latencies[-1]
    print(
        f"produce round trips during cleaning: n={len(latencies)} p50={latencies[len(latencies) // 2] * 1000:.1f}ms "
        f"p99={p99 * 1000:.1f}ms max={worst * 1000:.1f}ms"
    )
    assert p99 < 0.1, f"p99 produce round trip {p99 * 1000:.0f} ms while cleaning"
