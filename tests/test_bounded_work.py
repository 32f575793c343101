"""Bounded work per Produce request: a tiny compressed batch of a huge number of empty
records is walked and rebuilt away from the event loop, in the broker's offload workers,
so other connections keep their latency and the broker's own memory stays flat; a record
count the bytes cannot hold is refused before anything is decompressed or walked."""

from __future__ import annotations

import os
import threading
import time

import pytest
import zstandard
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.records import C_WALK, HEADER_SIZE, BatchHeader, build_batch
from brokkr.core.testing import RawClient
from wire import (
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    ZSTD,
    batch,
    compressed_batch,
    empty_records_batch,
    fetch_body,
    list_offsets_body,
    metadata_body,
    produce_body,
)


def part_of(response):
    return response.responses[0].partition_responses[0]


def test_a_tiny_batch_of_half_a_million_records_does_not_stall_other_clients(served):
    bomb = empty_records_batch(500_000)
    assert len(bomb) < 1000
    with RawClient(served.address, timeout=60) as attacker, RawClient(served.address) as other:
        for t in ("bomb", "plain"):
            assert attacker.request(METADATA, 12, metadata_body(t)).topics[0].error_code == 0
        for _ in range(20):  # warm up the well-behaved client's path
            assert part_of(other.request(PRODUCE, 9, produce_body("plain", batch(10)))).error_code == 0
        baseline_rss = served.rss_mb()

        answer: dict = {}
        attack = threading.Thread(
            target=lambda: answer.update(part=part_of(attacker.request(PRODUCE, 9, produce_body("bomb", bomb))))
        )
        attack.start()
        latencies, peak_rss = [], baseline_rss
        while attack.is_alive():
            start = time.perf_counter()
            assert part_of(other.request(PRODUCE, 9, produce_body("plain", batch(10)))).error_code == 0
            latencies.append(time.perf_counter() - start)
            peak_rss = max(peak_rss, served.rss_mb())
            time.sleep(0.01)
        attack.join()

    assert answer["part"].error_code == ErrorCode.NONE, answer
    assert len(latencies) > 20, "the other client was served all along"
    assert max(latencies) < 0.5, f"slowest produce while the batch was walked: {max(latencies):.3f} s"
    assert peak_rss - baseline_rss < 100, f"the broker's own memory grew by {peak_rss - baseline_rss:.0f} MB"
    with RawClient(served.address) as c:
        [latest] = c.request(LIST_OFFSETS, 7, list_offsets_body("bomb", -1)).topics[0].partitions
        assert latest.offset == 500_000


def test_a_record_count_the_bytes_cannot_hold_is_refused_before_any_work(brokkr_broker_factory):
    broker = brokkr_broker_factory({"socket.request.max.bytes": "1000000"})
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        # 200,000 records of at least 7 bytes cannot decompress within socket.request.max.bytes.
        claimed = empty_records_batch(10, declared=200_000)
        start = time.perf_counter()
        part = part_of(c.request(PRODUCE, 9, produce_body("t", claimed)))
        assert time.perf_counter() - start < 1
        assert part.error_code == ErrorCode.INVALID_RECORD
        assert "200000 records cannot fit in 1000000 bytes" in part.error_message
        # And one whose records decompress to fewer bytes than its count needs.
        part = part_of(c.request(PRODUCE, 9, produce_body("t", empty_records_batch(10, declared=5000))))
        assert part.error_code == ErrorCode.INVALID_RECORD
        assert "5000 records cannot fit in 70 bytes" in part.error_message


def test_a_topic_deleted_while_its_batch_is_walked_elsewhere_is_not_written(brokkr_broker_factory, caplog):
    broker = brokkr_broker_factory()
    answer: dict = {}
    with RawClient(broker.bootstrap_servers, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("doomed")).topics[0].error_code == 0
        produce = threading.Thread(
            target=lambda: answer.update(
                part=part_of(c.request(PRODUCE, 9, produce_body("doomed", empty_records_batch(300_000))))
            )
        )
        produce.start()
        time.sleep(0.3)  # the walk is under way in a worker
        broker.call(broker.delete_topic, "doomed")
        broker.call(broker.create_topic, "doomed")
        produce.join(timeout=60)
    assert answer["part"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert broker.partition("doomed", 0).log.log_end_offset == 0, "nothing reached the new topic"
    assert "Traceback" not in caplog.text and "appends fail" not in caplog.text


def children_of(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def test_walk_workers_end_when_their_broker_is_killed(served):
    with RawClient(served.address, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        assert part_of(c.request(PRODUCE, 9, produce_body("t", empty_records_batch(5000)))).error_code == 0
    workers = children_of(served.proc.pid)
    assert workers, "the walk ran in worker processes"
    served.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{w}") for w in workers):
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{w}") for w in workers), "no worker outlives its broker"


def test_a_compressed_batch_kept_as_it_came_is_walked_in_a_thread_not_a_process(served):
    """With the C record walk built, a batch with nothing to rebuild is decompressed and
    walked in one of the broker's worker threads, in the request's own buffer: no worker
    process starts, and what is stored is the batch as it came."""
    if not C_WALK:
        pytest.skip("the C record walk is not built")
    records = [(None, b"%05d" % i) for i in range(5000)]
    section = build_batch(records)[HEADER_SIZE:]
    sent = compressed_batch(zstandard.ZstdCompressor().compress(section), len(records), ZSTD)
    with RawClient(served.address, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        assert part_of(c.request(PRODUCE, 9, produce_body("t", sent))).error_code == 0
        fetched = c.request(FETCH, 12, fetch_body("t")).responses[0].partitions[0].records
    assert not children_of(served.proc.pid), "no worker process started"
    assert BatchHeader.unpack(fetched).codec == ZSTD
    assert bytes(fetched[HEADER_SIZE:]) == sent[HEADER_SIZE:], "the compressed records are stored as they came"


def test_a_compressed_batch_too_large_to_store_uncompressed_is_refused_before_its_walk(brokkr_broker_factory):
    # Stored uncompressed, a million records take at least 7 MB: more than max.message.bytes
    # allows, known from the header alone (today's main walked and rebuilt it first).
    broker = brokkr_broker_factory({"compression.type": "uncompressed"})
    bomb = empty_records_batch(1_000_000)
    with RawClient(broker.bootstrap_servers, timeout=60) as c:
        assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        start = time.perf_counter()
        part = part_of(c.request(PRODUCE, 9, produce_body("t", bomb)))
        elapsed = time.perf_counter() - start
    assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert "at least 7000061 bytes" in part.error_message and "1048588" in part.error_message
    assert elapsed < 1, f"answered after {elapsed:.2f} s: the batch was walked"
    assert broker.partition("t", 0).log.log_end_offset == 0
