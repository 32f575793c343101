"""Record validation and conversion on raw Produce requests against a real broker: each
rejection with Kafka's error code, message and (Produce v8+) KIP-467 record errors, and
each conversion as the stored batch shows it."""

from __future__ import annotations

import os
import random
import re
import struct
import time
import types
import zlib

import crc32c
import pytest
from authorizers import Deny
from brokkr.core import validation
from brokkr.core.authorization import ResourceType
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol import records as batch_format
from brokkr.core.protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_FLAG,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    build_batch,
    crc_ok,
    decode_records,
    encode_batch,
    encode_record,
    iter_batches_untrusted,
    read_all_records,
)
from brokkr.core.testing import RawClient
from brokkr.plugins.codecs.gzip import GzipCodec
from brokkr.plugins.codecs.lz4 import Lz4Codec
from brokkr.plugins.codecs.snappy import SnappyCodec
from brokkr.plugins.codecs.zstd import ZstdCodec
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from wire import FETCH, LIST_OFFSETS, PRODUCE, fetch_body, list_offsets_body, produce_body, records_section

GZIP = 1
HOUR = 3_600_000
RECORDS = [(b"k0", b"v0", [("h", b"x")]), (b"k1", None), (b"k2", b"v2", [("a", None), ("a", b"dup")])]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def gzip_batch(records, attributes: int = 0, **kwargs) -> bytes:
    """A gzip batch of ``records``, as a producer builds it (records section compressed)."""
    section = build_batch(records, **kwargs)[HEADER_SIZE:]
    return build_batch(
        records, attributes=attributes | GZIP, compressed_payload=GzipCodec().compress(section), **kwargs
    )


def rewrite(batch: bytes, **fields) -> bytes:
    """``batch`` with some header fields changed and its CRC made valid again."""
    header = BatchHeader.unpack(batch)._replace(**fields)
    out = bytearray(HEADER.pack(*header[1:]) + batch[HEADER_SIZE:])  # header[0]: position
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(out[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def produce(broker, topic: str, records: bytes, version: int = 9, **kwargs):
    with RawClient(broker.bootstrap_servers) as c:
        return c.request(PRODUCE, version, produce_body(topic, records, **kwargs)).responses[0].partition_responses[0]


def stored(broker, topic: str) -> bytes:
    with RawClient(broker.bootstrap_servers) as c:
        return bytes(c.request(FETCH, 12, fetch_body(topic)).responses[0].partitions[0].records)


def log_end(broker, topic: str) -> int:
    return broker.broker.topics[topic].partitions[0].log.log_end_offset


def topic(broker, name: str = "t", **configs) -> str:
    broker.call(broker.broker.create_topic, name, 1, {k.replace("_", "."): str(v) for k, v in configs.items()})
    return name


# -- rejections of the batch as a whole (no record errors, as in Kafka) ------------------------


def legacy_message_set(magic: int) -> bytes:
    """One message in message format v0 or v1 (what Produce v0-v2 carried)."""
    body = bytes([magic, 0]) + (struct.pack(">q", 1_700_000_000_000) if magic else b"")
    body += struct.pack(">i", 1) + b"k" + struct.pack(">i", 1) + b"v"
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def batch_cases():
    plain = build_batch([(b"k", b"v")] * 3)
    yield "message format v0", legacy_message_set(0), ErrorCode.INVALID_RECORD, "with magic version 2"
    yield "message format v1", legacy_message_set(1), ErrorCode.INVALID_RECORD, "with magic version 2"
    yield "base offset", rewrite(plain, base_offset=5), ErrorCode.INVALID_RECORD, "should be 0, but it is 5"
    yield "unknown codec", rewrite(plain, attributes=5), ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "not supported"
    yield "negative offset range", rewrite(plain, last_offset_delta=-1), ErrorCode.INVALID_RECORD, "invalid offset"
    yield "no records", rewrite(plain, record_count=0, last_offset_delta=0), ErrorCode.INVALID_RECORD, "count"
    yield "count", rewrite(plain, last_offset_delta=1), ErrorCode.INVALID_RECORD, "Inconsistent batch offset range"
    yield "control batch", rewrite(plain, attributes=CONTROL_FLAG), ErrorCode.INVALID_RECORD, "control records"
    yield "no sequence", rewrite(plain, producer_id=7, producer_epoch=0), ErrorCode.INVALID_RECORD, "sequence"
    broken_gzip = build_batch([(b"k", b"v")], attributes=GZIP, compressed_payload=b"\x1f\x8b not really gzip")
    yield "corrupt gzip", broken_gzip, ErrorCode.CORRUPT_MESSAGE, "cannot be decompressed"
    short = gzip_batch([(b"k", b"v")] * 3)
    yield (
        "fewer records than counted",
        rewrite(short, record_count=4, last_offset_delta=3),
        ErrorCode.INVALID_RECORD,
        "Invalid record in topic partition t-0",
    )
    extra = build_batch(
        [(b"k", b"v")], attributes=GZIP, compressed_payload=GzipCodec().compress(encode_record(0, 0, b"k", b"v") * 2)
    )
    yield "more records than counted", extra, ErrorCode.INVALID_RECORD, "records still remaining"


@pytest.mark.parametrize("records, code, fragment", [pytest.param(*c[1:], id=c[0]) for c in batch_cases()])
def test_batch_rejections(brokkr_broker, records, code, fragment):
    t = topic(brokkr_broker)
    part = produce(brokkr_broker, t, records)
    assert (part.error_code, part.record_errors) == (code, [])
    assert fragment in part.error_message
    assert log_end(brokkr_broker, t) == 0


@pytest.mark.parametrize(
    "version, code",
    [(3, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), (6, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE), (7, ErrorCode.NONE)],
)
def test_zstd_needs_produce_v7(brokkr_broker, version, code):
    t = topic(brokkr_broker)
    section = build_batch([(b"k", b"v")])[HEADER_SIZE:]
    records = build_batch([(b"k", b"v")], attributes=4, compressed_payload=ZstdCodec().compress(section))
    assert produce(brokkr_broker, t, records, version=version).error_code == code


def test_a_codec_whose_plugin_is_disabled_is_unsupported(brokkr_broker_factory):
    broker = brokkr_broker_factory({"brokkr.plugins.disabled": "brokkr.plugins.codecs.gzip"})
    t, to_gzip = topic(broker), topic(broker, "to-gzip", compression_type="gzip")
    sent = produce(broker, t, gzip_batch([(b"k", b"v")]))
    assert (sent.error_code, sent.error_message) == (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        "Compression type 1 is not supported",
    )
    stored_as = produce(broker, to_gzip, build_batch([(b"k", b"v")]))
    assert stored_as.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert stored_as.error_message == "Compression type 1 of topic to-gzip is not available on this broker"


def test_decompression_is_bounded_by_socket_request_max_bytes(brokkr_broker_factory):
    broker = brokkr_broker_factory({"socket.request.max.bytes": "200000"})
    t = topic(broker)
    bomb = gzip_batch([(b"k%d" % i, bytes(100_000)) for i in range(10)])  # 1 MB of zeros, 1 KiB of gzip
    assert len(bomb) < 5000
    part = produce(broker, t, bomb)
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert part.error_message == "Record batch decompresses to more than 200000 bytes"
    assert log_end(broker, t) == 0


def test_a_rebuilt_batch_must_still_fit_max_message_bytes(brokkr_broker):
    t = topic(brokkr_broker, compression_type="uncompressed", max_message_bytes=5000)
    part = produce(brokkr_broker, t, gzip_batch([(b"k", bytes(20_000))]))
    assert part.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert re.fullmatch(
        r"Message batch size is \d+ bytes in append to partition t-0 which exceeds the maximum configured size of 5000\.",
        part.error_message,
    )


# -- uncompressed batches that lie about their records ----------------------------------------
# Kafka's record iterator reads exactly the records a batch counts (DefaultRecordBatch's
# RecordIterator: InvalidRecordException, so INVALID_RECORD). brokkr walks them in C
# (core/protocol/_recordscan.c's check) or, where it is not built, in Python.

PREMATURE_EOF = "Incorrect declared batch size, premature EOF reached"
RECORDS_REMAINING = "Incorrect declared batch size, records still remaining in file"


def with_offset_deltas(*deltas: int, after: bytes = b"") -> bytes:
    """An uncompressed batch of a record per offset delta (``k0``, ``k1``, ...), its header
    honest about their number, and ``after`` its records."""
    return bytes(encode_batch(records_section(*deltas) + after, record_count=len(deltas)))


def record_lies():
    """(name, batch, what Kafka's iterator or brokkr's walk says): three records (33 bytes)
    and a header that counts others (its offset range agreeing, as validateBatch checks),
    offset deltas other than 0..n-1, bytes after the last record."""
    three = with_offset_deltas(0, 1, 2)
    for count in (2**31 - 1, 1000):  # more than 33 bytes can hold: refused before the walk
        words = f"{count} records cannot fit in 33 bytes"
        yield f"counts {count}", rewrite(three, record_count=count, last_offset_delta=count - 1), words
    yield "counts 4", rewrite(three, record_count=4, last_offset_delta=3), PREMATURE_EOF
    for count in (2, 1):
        yield f"counts {count}", rewrite(three, record_count=count, last_offset_delta=count - 1), RECORDS_REMAINING
    yield (
        "offset deltas out of order",
        with_offset_deltas(0, 2, 1),
        "record 1 has offset delta 2; the offset deltas of a batch of 3 records must be 0 to 2",
    )
    yield (
        "a record past the last offset delta",
        with_offset_deltas(0, 1, 2**31 - 2),
        "record 2 has offset delta 2147483646; the offset deltas of a batch of 3 records must be 0 to 2",
    )
    yield "trailing bytes", with_offset_deltas(0, 1, 2, after=b"\x00"), RECORDS_REMAINING


@pytest.fixture(params=["C", "Python"])
def record_walk(request, monkeypatch) -> str:
    """Validation with its C parts (core/protocol/_produce.c, _recordscan.c), or without
    them, as where brokkr was installed without a C compiler."""
    if request.param == "Python":
        monkeypatch.setattr(validation, "_produce", None)
        monkeypatch.setattr(batch_format, "_recordscan", None)
    elif validation._produce is None or batch_format._recordscan is None:
        pytest.skip("brokkr's C modules are not built")
    return request.param


@pytest.mark.parametrize("records, words", [pytest.param(*c[1:], id=c[0]) for c in record_lies()])
def test_an_uncompressed_batch_lying_about_its_records_is_refused(brokkr_broker, record_walk, records, words):
    t = topic(brokkr_broker)
    assert produce(brokkr_broker, t, with_offset_deltas(0, 1, 2)).error_code == ErrorCode.NONE
    part = produce(brokkr_broker, t, records)
    assert (part.error_code, part.record_errors) == (ErrorCode.INVALID_RECORD, [])
    assert part.error_message == f"Invalid record in topic partition {t}-0: {words}"
    assert log_end(brokkr_broker, t) == 3
    kept = read_all_records(stored(brokkr_broker, t))
    assert [(r.offset, r.key) for r in kept] == [(0, b"k0"), (1, b"k1"), (2, b"k2")]


def test_a_batch_too_large_for_the_event_loop_is_walked_elsewhere_and_refused(brokkr_broker, record_walk):
    t = topic(brokkr_broker)
    n = validation.INLINE_RECORDS + 1000
    deltas = [*range(n - 2), n - 1, n - 2]  # the last two swapped
    part = produce(brokkr_broker, t, with_offset_deltas(*deltas))
    assert (part.error_code, part.error_message) == (
        ErrorCode.INVALID_RECORD,
        f"Invalid record in topic partition {t}-0: record {n - 2} has offset delta {n - 1}; the offset deltas of a "
        f"batch of {n} records must be 0 to {n - 1}",
    )
    assert log_end(brokkr_broker, t) == 0


def test_a_consumer_reads_the_honest_batches_around_the_lies(brokkr_broker, record_walk):
    t = topic(brokkr_broker)
    assert produce(brokkr_broker, t, with_offset_deltas(0, 1)).error_code == ErrorCode.NONE
    for name, lie, _ in record_lies():
        assert produce(brokkr_broker, t, lie).error_code == ErrorCode.INVALID_RECORD, name
    assert produce(brokkr_broker, t, with_offset_deltas(0, 1, 2)).error_code == ErrorCode.NONE
    consumer = Consumer(
        {
            "bootstrap.servers": brokkr_broker.bootstrap_servers,
            "group.id": "lies",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # an offset past the log end shows, rather than a silent reset
        }
    )
    got, deadline = [], time.monotonic() + 20
    try:
        consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING)])
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                break
            got.append((message.offset(), message.key()))
    finally:
        consumer.close()
    assert got == [(0, b"k0"), (1, b"k1"), (2, b"k0"), (3, b"k1"), (4, b"k2")]


# -- transactional batches ---------------------------------------------------------------------


def test_a_transactional_batch_without_transactional_id_fails_the_whole_request(brokkr_broker):
    a, b = topic(brokkr_broker, "a"), topic(brokkr_broker, "b")
    txn = build_batch([(b"k", b"v")], attributes=TRANSACTIONAL_FLAG, producer_id=1, producer_epoch=0, base_sequence=0)
    body = produce_body(a, txn)
    body.topic_data.append(produce_body(b, build_batch([(b"k", b"v")])).topic_data[0])
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(PRODUCE, 9, body)
    codes = [p.error_code for t in response.responses for p in t.partition_responses]
    assert codes == [ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
    assert (log_end(brokkr_broker, a), log_end(brokkr_broker, b)) == (0, 0)


def deny_transactional_ids(a) -> bool:
    return a.resource_type == ResourceType.TRANSACTIONAL_ID


@pytest.mark.parametrize(
    "transactional, code", [(False, ErrorCode.NONE), (True, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)]
)
def test_the_transactional_id_is_authorized_only_for_transactional_batches(brokkr_broker_factory, transactional, code):
    broker = brokkr_broker_factory(plugins=[Deny(deny_transactional_ids)])
    t = topic(broker)
    attributes = TRANSACTIONAL_FLAG if transactional else 0
    records = build_batch([(b"k", b"v")], attributes=attributes, producer_id=1, producer_epoch=0, base_sequence=0)
    body = produce_body(t, records)
    body.transactional_id = "txn"
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(PRODUCE, 9, body).responses[0].partition_responses[0].error_code == code


# -- record errors (KIP-467) -----------------------------------------------------------------


def compacted_message(n: int) -> str:
    return f"RecordError(batchIndex={n}, message='Compacted topic cannot accept message without key in topic partition t-0')"


@pytest.mark.parametrize("compress", [False, True], ids=["uncompressed", "gzip"])
def test_compacted_topic_refuses_records_without_key(brokkr_broker, compress):
    t = topic(brokkr_broker, cleanup_policy="compact")
    records = [(b"k0", b"v"), (None, b"v"), (b"k2", b"v"), (None, None)]
    part = produce(brokkr_broker, t, gzip_batch(records) if compress else build_batch(records))
    message = "Compacted topic cannot accept message without key in topic partition t-0"
    assert part.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, message), (3, message)]
    assert part.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three "
        f"errors at most: [{compacted_message(1)}, {compacted_message(3)}]"
    )
    assert log_end(brokkr_broker, t) == 0
    assert produce(brokkr_broker, t, build_batch([(b"k", None)])).error_code == 0  # tombstones have keys


def test_before_produce_v8_only_the_error_code_is_answered(brokkr_broker):
    t = topic(brokkr_broker, cleanup_policy="compact")
    part = produce(brokkr_broker, t, build_batch([(None, b"v")]), version=7)
    assert (part.error_code, part.record_errors, part.error_message) == (ErrorCode.INVALID_RECORD, [], None)


@pytest.mark.parametrize("compress", [False, True], ids=["uncompressed", "gzip"])
@pytest.mark.parametrize("side", ["after", "before"])
def test_timestamps_out_of_bounds_are_invalid_timestamp(brokkr_broker, compress, side):
    t = topic(brokkr_broker, message_timestamp_after_max_ms=HOUR, message_timestamp_before_max_ms=HOUR)
    now = now_ms()
    bad = now + 2 * HOUR if side == "after" else now - 2 * HOUR
    stamps = [now, bad, now + 1000, bad]
    records = [(b"k%d" % i, b"v") for i in range(4)]
    batch = gzip_batch(records, timestamps=stamps) if compress else build_batch(records, timestamps=stamps)
    before = now_ms()
    part = produce(brokkr_broker, t, batch)
    after = now_ms()
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert part.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in part.record_errors] == [1, 3]
    for error in part.record_errors:
        match = re.fullmatch(
            rf"Timestamp {bad} of message with offset {error.batch_index} is out of range\. "
            r"The timestamp should be within \[(-?\d+), (\d+)\]",
            error.batch_index_error_message,
        )
        assert match, error.batch_index_error_message
        low, high = int(match[1]), int(match[2])
        assert before <= low + HOUR == high - HOUR <= after  # [broker now - before.max.ms, now + after.max.ms]
    assert log_end(brokkr_broker, t) == 0
    assert produce(brokkr_broker, t, build_batch(records, timestamps=[now] * 4)).error_code == ErrorCode.NONE


def test_a_missing_key_is_reported_before_a_bad_timestamp(brokkr_broker):
    t = topic(brokkr_broker, cleanup_policy="compact", message_timestamp_after_max_ms=HOUR)
    future = now_ms() + 2 * HOUR
    part = produce(brokkr_broker, t, build_batch([(None, b"v"), (b"k", b"v")], timestamps=[future, future]))
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert part.record_errors[0].batch_index_error_message.startswith("Compacted topic cannot accept")
    assert part.record_errors[1].batch_index_error_message.startswith(f"Timestamp {future} of message with offset 1")


def test_a_producer_must_not_claim_log_append_time_on_a_log_append_time_topic(brokkr_broker):
    t = topic(brokkr_broker, message_timestamp_type="LogAppendTime")
    batch = build_batch([(b"k0", b"v0"), (b"key1", b"")], timestamp=1234, attributes=TIMESTAMP_TYPE_MASK)
    part = produce(brokkr_broker, t, batch)
    assert part.error_code == ErrorCode.INVALID_TIMESTAMP
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
        (
            i,
            f"Invalid timestamp type in message DefaultRecord(offset={i}, timestamp=1234, key={k} bytes, "
            f"value={v} bytes). Producer should not set timestamp type to LogAppendTime.",
        )
        for i, k, v in ((0, 2, 2), (1, 4, 0))
    ]


def test_a_producers_log_append_time_flag_is_cleared_on_a_create_time_topic(brokkr_broker):
    t = topic(brokkr_broker)
    now = now_ms()
    claimed = build_batch([(b"k", b"v")], timestamp=now, attributes=TIMESTAMP_TYPE_MASK)
    assert produce(brokkr_broker, t, claimed).error_code == ErrorCode.NONE
    [header] = iter_batches_untrusted(stored(brokkr_broker, t))
    assert not header.log_append_time and header.max_timestamp == now


# -- conversion --------------------------------------------------------------------------------


def records_of(broker, data: bytes):
    """The header and records of the one batch in ``data``, decompressed with the broker's codecs."""
    [header] = iter_batches_untrusted(data)
    section = memoryview(data)[HEADER_SIZE : header.end]
    if header.codec:
        section = broker.broker.codecs[header.codec].decompress(section)
    return header, decode_records(header, section)


def test_recompression_keeps_the_producer_fields_timestamps_headers_and_order(brokkr_broker):
    t = topic(brokkr_broker, compression_type="gzip")
    now = now_ms()
    sent = build_batch(RECORDS, timestamps=[now, now - 5, now + 7], producer_id=42, producer_epoch=3, base_sequence=9)
    assert produce(brokkr_broker, t, sent).error_code == 0
    header, records = records_of(brokkr_broker, stored(brokkr_broker, t))
    original = BatchHeader.unpack(sent)
    assert header.codec == GZIP
    for field in ("base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence", "record_count"):
        assert getattr(header, field) == getattr(original, field), field
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (0, now, b"k0", b"v0", (("h", b"x"),)),
        (1, now - 5, b"k1", None, ()),
        (2, now + 7, b"k2", b"v2", (("a", None), ("a", b"dup"))),
    ]


def test_a_batch_in_the_topics_codec_is_stored_as_sent(brokkr_broker):
    t = topic(brokkr_broker, compression_type="gzip")
    sent = gzip_batch(RECORDS, timestamp=now_ms())
    assert produce(brokkr_broker, t, sent).error_code == 0
    got = stored(brokkr_broker, t)
    assert got[HEADER_SIZE:] == sent[HEADER_SIZE:] and got[16:] == sent[16:]  # all but offset and leader epoch


@pytest.mark.parametrize("codec", [GzipCodec, SnappyCodec, Lz4Codec, ZstdCodec], ids=lambda c: c.name)
@pytest.mark.parametrize("count", [200, 5000], ids=["walked on the loop", "walked in a thread"])
def test_each_batch_is_walked_over_its_own_records_in_a_reused_buffer(brokkr_broker, codec, count):
    # Large and compressed batches are decompressed into a buffer kept from one walk to
    # the next (compression.Scratch). A batch claiming one record more than it holds,
    # after a longer batch, must be refused, not read on into the longer one's records.
    t = topic(brokkr_broker, f"reused-{codec.name}-{count}")
    now = now_ms()

    def batch(records):
        section = build_batch(records, timestamp=now)[HEADER_SIZE:]
        return build_batch(records, attributes=codec.id, compressed_payload=codec().compress(section), timestamp=now)

    def records(n, tag):
        return [(b"%s-%d" % (tag, i), b"v" * (i % 50)) for i in range(n)]

    longer, shorter, after = records(count, b"a"), records(count // 2, b"b"), records(count // 3, b"c")
    assert produce(brokkr_broker, t, batch(longer)).error_code == 0
    part = produce(
        brokkr_broker, t, rewrite(batch(shorter), record_count=len(shorter) + 1, last_offset_delta=len(shorter))
    )
    assert (part.error_code, part.error_message) == (
        ErrorCode.INVALID_RECORD,
        f"Invalid record in topic partition {t}-0: Incorrect declared batch size, premature EOF reached",
    )
    assert produce(brokkr_broker, t, batch(after)).error_code == 0
    got = []
    data = stored(brokkr_broker, t)
    for header in iter_batches_untrusted(data):
        section = memoryview(data)[header.position + HEADER_SIZE : header.end]
        section = brokkr_broker.broker.codecs[header.codec].decompress(section)
        got += [(r.key, r.value) for r in decode_records(header, section)]
    assert got == longer + after


def test_inner_offsets_that_are_not_sequential_are_renumbered(brokkr_broker):
    t = topic(brokkr_broker)
    now = now_ms()
    section = b"".join(encode_record(delta, i, b"k%d" % i, b"v%d" % i) for i, delta in enumerate((0, 5, 9)))
    sent = build_batch(
        [(None, None)] * 3, timestamp=now, attributes=GZIP, compressed_payload=GzipCodec().compress(section)
    )
    assert produce(brokkr_broker, t, sent).error_code == 0
    header, records = records_of(brokkr_broker, stored(brokkr_broker, t))
    assert header.codec == GZIP
    assert [(r.offset, r.timestamp, r.key) for r in records] == [
        (0, now, b"k0"),
        (1, now + 1, b"k1"),
        (2, now + 2, b"k2"),
    ]


@pytest.mark.parametrize("compress", [False, True], ids=["uncompressed", "gzip"])
def test_log_append_time_restamps_the_header_without_recompressing(brokkr_broker, compress):
    t = topic(brokkr_broker, message_timestamp_type="LogAppendTime")
    sent = gzip_batch(RECORDS, timestamp=1000) if compress else build_batch(RECORDS, timestamp=1000)
    before = now_ms()
    part = produce(brokkr_broker, t, sent)
    after = now_ms()
    assert part.error_code == 0 and before <= part.log_append_time_ms <= after
    got = stored(brokkr_broker, t)
    header, records = records_of(brokkr_broker, got)
    assert header.log_append_time and header.max_timestamp == part.log_append_time_ms
    assert crc_ok(got, header)
    assert got[HEADER_SIZE:] == sent[HEADER_SIZE:]  # the records section, compressed or not, as sent
    assert [r.timestamp for r in records] == [part.log_append_time_ms] * 3
    with RawClient(brokkr_broker.bootstrap_servers) as c:  # the log's max timestamp is the stored one
        found = c.request(LIST_OFFSETS, 7, list_offsets_body(t, -3)).topics[0].partitions[0]
    assert (found.offset, found.timestamp) == (0, part.log_append_time_ms)  # the first record at the max


def test_create_time_topics_answer_log_append_time_minus_one(brokkr_broker):
    part = produce(brokkr_broker, topic(brokkr_broker), build_batch(RECORDS))
    assert (part.error_code, part.log_append_time_ms) == (0, -1)


# -- the fast path ------------------------------------------------------------------------------


def forbid_walking_records(monkeypatch):
    def walked(*args):
        raise AssertionError("the records were walked")

    monkeypatch.setattr(validation, "scan_records_untrusted", walked)


@pytest.mark.parametrize(
    "configs", [{}, {"message.timestamp.type": "LogAppendTime"}], ids=["CreateTime", "LogAppendTime"]
)
def test_uncompressed_batches_are_validated_from_the_header(brokkr_broker, monkeypatch, configs):
    if batch_format._recordscan is None:
        pytest.skip("brokkr.core.protocol._recordscan is not built: the records are walked in Python")
    brokkr_broker.call(brokkr_broker.broker.create_topic, "t", 1, configs)
    partition = brokkr_broker.broker.topics["t"].partitions[0]
    forbid_walking_records(monkeypatch)
    now = now_ms()
    batch = memoryview(build_batch([(b"k%d" % i, b"v") for i in range(100)], timestamp=now))
    result = validation.validate_batches(partition, batch, 9, brokkr_broker.broker.codecs, 1 << 20, now + 1)
    assert result.record_count == 100
    assert result.max_timestamp == (now + 1 if configs else now)


@pytest.mark.parametrize(
    "configs",
    [{"cleanup.policy": "compact"}, {"message.timestamp.before.max.ms": str(HOUR)}],
    ids=["compacted", "before.max.ms"],
)
def test_rules_the_header_cannot_settle_walk_the_records(brokkr_broker, monkeypatch, configs):
    brokkr_broker.call(brokkr_broker.broker.create_topic, "t", 1, configs)
    partition = brokkr_broker.broker.topics["t"].partitions[0]
    forbid_walking_records(monkeypatch)
    batch = memoryview(build_batch([(b"k", b"v")], timestamp=now_ms()))
    with pytest.raises(AssertionError, match="walked"):
        validation.validate_batches(partition, batch, 9, brokkr_broker.broker.codecs, 1 << 20, now_ms())


# -- the header checks in C (core/protocol/_produce.c) against the Python ones -------------

MAX_MESSAGE_BYTES = 1_048_588  # Kafka's default max.message.bytes
ALL_CODEC_IDS = dict.fromkeys(range(8))  # the codec check is the caller's, in both


def python_header_checks(records: bytes, version: int, max_message_bytes: int = MAX_MESSAGE_BYTES):
    """What _single_batch and _check_header make of ``records``: the header, or None."""
    partition = types.SimpleNamespace(name="t-0", config={"max.message.bytes": max_message_bytes})
    try:
        header = validation._single_batch(memoryview(records), version)
        validation._check_header(partition, memoryview(records), header, ALL_CODEC_IDS)
    except validation.RecordsError:
        return None
    return header


def header_check_cases():
    plain = build_batch([(b"k", b"v")] * 3)
    yield "plain", plain, 9
    yield "idempotent", rewrite(plain, producer_id=7, producer_epoch=0, base_sequence=0), 9
    yield "transactional", rewrite(plain, attributes=TRANSACTIONAL_FLAG, producer_id=7, base_sequence=3), 9
    yield "gzip", gzip_batch(RECORDS), 3
    yield "log append time claimed", rewrite(plain, attributes=TIMESTAMP_TYPE_MASK), 9
    for version in (3, 6, 7, 13):
        yield f"zstd v{version}", rewrite(plain, attributes=4), version
    for name, records, _, _ in batch_cases():
        yield name, records, 9
    yield "empty", b"", 9
    yield "short", plain[: HEADER_SIZE - 1], 9
    yield "partial", plain[:-1], 9
    yield "trailing byte", plain + b"\x00", 9
    yield "two batches", plain + plain, 9
    yield "length below a header", rewrite(plain, batch_length=HEADER_SIZE - 13), 9
    yield "length past the end", rewrite(plain, batch_length=len(plain)), 9
    yield "magic 1", rewrite(plain, magic=1), 9
    yield "crc", plain[:ATTRIBUTES_OFFSET] + bytes([plain[ATTRIBUTES_OFFSET] ^ 1]) + plain[ATTRIBUTES_OFFSET + 1 :], 9
    yield "negative sequence", rewrite(plain, producer_id=7, base_sequence=-1), 9
    yield "no producer, negative sequence", rewrite(plain, base_sequence=-5), 9
    yield "count past int32 offsets", rewrite(plain, last_offset_delta=2**31 - 1, record_count=-(2**31)), 9


@pytest.mark.parametrize("records, version", [pytest.param(*c[1:], id=c[0]) for c in header_check_cases()])
def test_the_c_header_checks_accept_exactly_what_the_python_ones_accept(records, version):
    if validation._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    c = validation._produce.check_batch(records, version, MAX_MESSAGE_BYTES, BatchHeader)
    assert c == python_header_checks(records, version)
    assert c is None or type(c) is BatchHeader


def test_the_c_header_checks_agree_with_python_on_damaged_headers():
    """Random header fields, the CRC made valid again (else both stop at it), and the
    size limit on either side of the batch's size."""
    if validation._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    rng = random.Random(15)
    plain = build_batch([(b"k", b"v")] * 3)
    accepted = 0
    for _ in range(3000):
        fields = {}
        for name, choices in (
            ("base_offset", [0, 0, 1, -1]),
            ("attributes", [0, 0, 1, 4, 7, CONTROL_FLAG, TRANSACTIONAL_FLAG, -1]),
            ("last_offset_delta", [2, 2, 0, -1, 3]),
            ("record_count", [3, 3, 1, 0, -3]),
            ("producer_id", [-1, -1, 0, 7]),
            ("base_sequence", [-1, 0, 5, -2]),
            ("magic", [2, 2, 2, 0, 1, 3]),
        ):
            fields[name] = rng.choice(choices)
        records = rewrite(plain, **fields)
        version = rng.choice([3, 6, 7, 9, 13])
        limit = rng.choice([len(records), len(records) - 1, MAX_MESSAGE_BYTES])
        c = validation._produce.check_batch(records, version, limit, BatchHeader)
        assert c == python_header_checks(records, version, limit), fields
        accepted += c is not None
    assert accepted > 30, "the cases must include batches both accept"


def test_the_c_header_checks_let_go_of_the_buffer_and_want_a_named_tuple_for_the_header():
    if validation._produce is None:
        pytest.skip("brokkr.core.protocol._produce is not built")
    records = bytearray(build_batch([(b"k", b"v")]))
    assert validation._produce.check_batch(records, 9, MAX_MESSAGE_BYTES, BatchHeader) is not None
    assert validation._produce.check_batch(records[:5], 9, MAX_MESSAGE_BYTES, BatchHeader) is None
    records.extend(b"x")  # a buffer still exported could not be resized
    with pytest.raises(TypeError, match="tuple subtype"):
        validation._produce.check_batch(records, 9, MAX_MESSAGE_BYTES, object)


def test_the_c_produce_module_is_built():
    """Where brokkr was installed with a C compiler (CI, and the README's commands), the
    Produce request is read, its batches checked and its answer written in C; set
    BROKKR_PYTHON_ONLY=1 where that cannot be built."""
    if os.environ.get("BROKKR_PYTHON_ONLY"):
        pytest.skip("BROKKR_PYTHON_ONLY is set")
    assert validation._produce is not None, "brokkr.core.protocol._produce is not built: pip install -e . with gcc"
