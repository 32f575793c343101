"""RecordBatch v2: brokkr reads what Kafka wrote and writes what Kafka reads."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.primitives import Reader, encode_uvarint, encode_varint
from brokkr.core.protocol.records import (
    CONTROL_FLAG,
    HEADER_SIZE,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    _record_at,
    _recordscan,
    build_batch,
    check_offset_deltas,
    check_records_c,
    crc_ok,
    decode_records,
    encode_record,
    iter_batches_untrusted,
    patch_batch,
    read_all_records,
    scan_records_c,
    scan_records_python,
    scan_records_untrusted,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kafka-logs"


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**40, -(2**62)])
def test_zigzag_varints_roundtrip(value: int) -> None:
    r = Reader(encode_varint(value))
    assert (r.varlong() if abs(value) >= 2**31 else r.varint()) == value
    assert r.remaining == 0


def test_uvarint_known_bytes_and_bounds() -> None:
    assert encode_uvarint(300) == b"\xac\x02"
    assert Reader(b"\xac\x02").uvarint() == 300
    with pytest.raises(CorruptRequest):
        Reader(b"\xff\xff\xff\xff\xff\x01").uvarint()
    with pytest.raises(CorruptRequest):
        Reader(b"\x80").uvarint()


def test_build_decode_roundtrip_with_null_values_and_headers() -> None:
    batch = build_batch(
        [(b"k1", b"v1"), (None, None), (b"k3", b"", [("h1", b"x"), ("h2", None)])], timestamp=1_700_000_000_000
    )
    (h,) = iter_batches_untrusted(batch)
    assert h.magic == 2 and h.record_count == 3 and h.last_offset_delta == 2 and crc_ok(batch, h)
    recs = decode_records(h, memoryview(batch)[HEADER_SIZE:])
    assert [(r.offset, r.key, r.value, r.headers) for r in recs] == [
        (0, b"k1", b"v1", ()),
        (1, None, None, ()),
        (2, b"k3", b"", (("h1", b"x"), ("h2", None))),
    ]
    assert all(r.timestamp == 1_700_000_000_000 for r in recs)


def test_patching_offset_and_epoch_keeps_the_crc_valid() -> None:
    buf = bytearray(build_batch([(b"k", b"v")] * 4))
    patch_batch(buf, 0, 1234, 7)
    (h,) = iter_batches_untrusted(buf)
    assert (h.base_offset, h.leader_epoch, h.last_offset) == (1234, 7, 1237)
    assert crc_ok(buf, h)
    assert [r.offset for r in read_all_records(buf)] == [1234, 1235, 1236, 1237]


def test_a_flipped_bit_fails_the_crc() -> None:
    buf = bytearray(build_batch([(b"key", b"value")]))
    buf[-1] ^= 0x01
    (h,) = iter_batches_untrusted(buf)
    assert not crc_ok(buf, h)


def test_impossible_sizes_and_magics_are_rejected_and_partial_tails_are_not_batches() -> None:
    batch = build_batch([(b"k", b"v")])
    assert list(iter_batches_untrusted(batch[:-3])) == []
    bad_len = bytearray(batch)
    bad_len[8:12] = (5).to_bytes(4, "big")
    with pytest.raises(CorruptRequest):
        list(iter_batches_untrusted(bad_len))
    bad_magic = bytearray(batch)
    bad_magic[16] = 1
    with pytest.raises(CorruptRequest, match="magic 1"):
        list(iter_batches_untrusted(bad_magic))


@pytest.mark.parametrize("directory", ["_confluent-ksql-default__command_topic-0", "__transaction_state-44"])
def test_reads_segments_written_by_kafka(directory: str) -> None:
    data = (FIXTURES / directory / "00000000000000000000.log").read_bytes()
    headers = list(iter_batches_untrusted(data))
    assert headers and headers[-1].end == len(data)
    assert all(crc_ok(data, h) for h in headers)
    offsets = [r.offset for h in headers for r in decode_records(h, memoryview(data)[h.position + HEADER_SIZE : h.end])]
    assert offsets == list(range(headers[0].base_offset, headers[-1].last_offset + 1))


def test_kafka_transactional_batch_and_commit_marker_flags() -> None:
    data = (FIXTURES / "_confluent-ksql-default__command_topic-0" / "00000000000000000000.log").read_bytes()
    record_batch, marker = list(iter_batches_untrusted(data))
    assert record_batch.attributes & TRANSACTIONAL_FLAG and not record_batch.is_control
    assert marker.attributes & CONTROL_FLAG and marker.is_transactional
    assert record_batch.producer_id == marker.producer_id >= 0
    (commit,) = decode_records(marker, memoryview(data)[marker.position + HEADER_SIZE : marker.end])
    assert commit.key[:4] == b"\x00\x00\x00\x01"  # control record v0, type 1 = COMMIT


def _findings(scan):
    deltas = list(scan.timestamp_deltas)
    assert (scan.min_timestamp_delta, scan.max_timestamp_delta) == ((min(deltas), max(deltas)) if deltas else (0, 0))
    return deltas, list(scan.offset_deltas), list(scan.keyless), scan.sequential


def _c_scan(header, payload):
    """The C walk alone: its findings, or None where it leaves the bytes to the Python walk."""
    scan = scan_records_c(header, payload)
    return None if scan is None else _findings(scan)


def _scan_outcome(header, payload, scan=scan_records_untrusted):
    try:
        return _findings(scan(header, payload))
    except CorruptRequest:
        return "corrupt"


def _walked_outcome(header, payload):
    """What the plain record walk (_record_at, as decoding and the cleaner use it) makes of
    the same bytes."""
    pos, end, timestamps, offsets, keyless = 0, len(payload), [], [], []
    try:
        for index in range(header.record_count):
            timestamp_delta, offset_delta, key, _, _, pos = _record_at(payload, pos, end)
            timestamps.append(timestamp_delta)
            offsets.append(offset_delta)
            if key is None:
                keyless.append(index)
    except CorruptRequest:
        return "corrupt"
    if pos != end:
        return "corrupt"
    return timestamps, offsets, keyless, offsets == list(range(len(offsets)))


def test_the_validation_scan_accepts_and_refuses_what_the_record_walk_does():
    """The validation scan (the cost of every compressed produce record), in C and in
    Python, against the plain walk: same findings on valid batches, same refusal of every
    damaged one. The C walk takes every valid batch itself, and what it accepts of the
    damaged ones it reads as the Python walk does."""
    rng = random.Random(11)
    pool = [
        (
            rng.choice([None, b"", rng.randbytes(rng.randint(1, 200))]),
            rng.choice([None, b"", rng.randbytes(rng.randint(1, 300))]),
            [(f"h{j}", rng.choice([None, b"", b"xy" * rng.randint(1, 90)])) for j in range(rng.choice([0, 0, 1, 3]))],
        )
        for _ in range(300)
    ]
    for _ in range(300):
        chosen = pool[: rng.randint(0, 40)]
        stamps = [rng.randint(0, 1 << 40) for _ in chosen]
        data = bytes(build_batch(chosen, timestamps=stamps or None, timestamp=5))
        header, payload = BatchHeader.unpack(data), data[HEADER_SIZE:]
        walked = _walked_outcome(header, payload)
        assert _scan_outcome(header, payload) == _scan_outcome(header, payload, scan_records_python) == walked
        assert walked != "corrupt"
        assert _recordscan is None or _c_scan(header, payload) == walked
        for _ in range(30):
            damaged = bytearray(payload)
            if damaged and rng.random() < 0.7:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            else:
                damaged = bytes(damaged[: rng.randint(0, len(damaged))])
            walked = _walked_outcome(header, damaged)
            assert _scan_outcome(header, damaged) == _scan_outcome(header, damaged, scan_records_python) == walked
            assert _recordscan is None or _c_scan(header, damaged) in (None, walked)


def test_the_c_check_of_uncompressed_records_accepts_what_the_walks_read_in_offset_order():
    """check_records_c (the C walk of an uncompressed batch that validation reads no
    further) accepts exactly the sections the Python walk and check_offset_deltas accept,
    and the plain walk reads with offset deltas 0..n-1; not those with a damaged byte, a
    miscount, or deltas out of order."""
    rng = random.Random(12)

    def python_accepts(header, payload):
        try:
            check_offset_deltas(scan_records_python(header, payload))
            return True
        except CorruptRequest:
            return False

    outcomes = []
    for _ in range(400):
        n = rng.randint(1, 30)
        deltas = list(range(n))
        if rng.random() < 0.3:
            deltas[rng.randrange(n)] = rng.choice([0, n, -1, 2**31 - 1, rng.randrange(n)])
        payload = bytearray(
            b"".join(
                encode_record(d, rng.randint(-3, 3), rng.choice([None, b"k"]), rng.randbytes(rng.randint(0, 40)))
                for d in deltas
            )
        )
        if rng.random() < 0.3:
            payload[rng.randrange(len(payload))] = rng.randrange(256)
        count = n if rng.random() < 0.6 else rng.choice([n - 1, n + 1, 2 * n, 2**31 - 1])
        header = BatchHeader.unpack(build_batch([(None, None)]))._replace(record_count=count)
        walked = _walked_outcome(header, bytes(payload))
        expected = walked != "corrupt" and walked[3]
        assert python_accepts(header, bytes(payload)) == expected
        assert check_records_c(header, bytes(payload)) == (_recordscan is not None and expected)
        outcomes.append(expected)
    assert 100 < sum(outcomes) < 300, "the cases must include sections both accept and both refuse"


def test_the_c_walk_is_built():
    """Where brokkr was installed with a C compiler (CI, and the README's commands), the
    walk runs in C; set BROKKR_PYTHON_ONLY=1 where it cannot be built."""
    if os.environ.get("BROKKR_PYTHON_ONLY"):
        pytest.skip("BROKKR_PYTHON_ONLY is set")
    assert _recordscan is not None, "brokkr.core.protocol._recordscan is not built: pip install -e . with gcc"


@pytest.mark.parametrize("tail", [b"\x80" * 9 + b"\x02", b"\xff" * 9 + b"\x7f"], ids=["bit 64", "70 bits"])
def test_a_varlong_past_64_bits_is_refused_by_both_walks(tail):
    """Ten bytes of varlong hold 70 bits; a timestamp delta is a long."""
    record = (
        b"\x00" + tail + b"\x00\x01\x01\x00"
    )  # attributes, timestamp delta, offset 0, null key and value, no headers
    payload = encode_varint(len(record)) + record
    header = BatchHeader.unpack(bytes(build_batch([(None, None)])))
    assert _recordscan is None or _c_scan(header, payload) is None
    for scan in (scan_records_untrusted, scan_records_python):
        with pytest.raises(CorruptRequest, match="varlong"):
            scan(header, payload)
