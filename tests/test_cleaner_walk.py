"""The log cleaner's key map and record walks in C (plugins/storage/segment/_cleaner.c)
against the Python walks of cleaner.py: on random batches the same keys map to the same
offsets, the map fills at the same record, the same records are kept, byte for byte;
damaged sections are refused (the Python walk then decides), never misread; the map stays
within its slots and entries; the key digest is SipHash-2-4-128 as its authors publish it;
the walks let go of the GIL."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.records import HEADER_SIZE, BatchHeader, build_batch, encode_record
from brokkr.plugins.storage.segment import cleaner

_cleaner = cleaner._cleaner
needs_c = pytest.mark.skipif(_cleaner is None, reason="brokkr.plugins.storage.segment._cleaner is not built")

#: SipHash-2-4-128 of the bytes 0..n-1 under the key 0..15 (vectors.h of github.com/veorq/SipHash).
SIPHASH128_VECTORS = {
    0: "a3817f04ba25a8e66df67214c7550293",
    1: "da87c1d86b99af44347659119b22fc45",
    7: "a1f1ebbed8dbc153c0b84aa61ff08239",
    8: "3b62a9ba6258f5610f83e264f31497b4",
    9: "264499060ad9baabc47f8b02bb6d71ed",
    63: "5150d1772f50834a503e069a973fbd7c",
}


def test_the_cleaner_walk_is_built():
    """Where brokkr was installed with a C compiler, the cleaner's walks run in C; set
    BROKKR_PYTHON_ONLY=1 where it cannot be built."""
    if os.environ.get("BROKKR_PYTHON_ONLY"):
        pytest.skip("BROKKR_PYTHON_ONLY is set")
    assert _cleaner is not None, "brokkr.plugins.storage.segment._cleaner is not built: pip install -e . with gcc"


@needs_c
def test_the_key_digest_is_siphash_2_4_128():
    m = _cleaner.OffsetMap(16, 8, bytes(range(16)))
    for n, expected in SIPHASH128_VECTORS.items():
        assert m.digest(bytes(range(n))).hex() == expected, n
    assert _cleaner.OffsetMap(16, 8, bytes(16)).digest(b"k") != m.digest(b"k"), "the seed keys the digest"


def _batch(rng, base_offset, keys):
    """A random uncompressed batch at ``base_offset``: keys from ``keys`` (None among
    them), tombstones, empty values, headers."""
    records = [
        (
            rng.choice(keys),
            rng.choice([None, b"", rng.randbytes(rng.randint(1, 60))]),
            [(f"h{j}", rng.choice([None, b"", b"xy" * rng.randint(1, 70)])) for j in range(rng.choice([0, 0, 2]))],
        )
        for _ in range(rng.randint(0, 30))
    ]
    data = build_batch(records, base_offset=base_offset, timestamp=1000)
    return BatchHeader.unpack(data), data[HEADER_SIZE:]


def _python_retain(offsets, header, payload, reached, drop):
    try:
        return cleaner._retain_batch(offsets, header, payload, reached, drop)
    except CorruptRequest:
        return "corrupt"


def _python_add(offsets, header, payload, start):
    try:
        return cleaner._add_batch(offsets, header, payload, start)
    except CorruptRequest:
        return "corrupt"


@needs_c
def test_the_c_walks_map_and_keep_what_the_python_walks_do():
    """Batches of random records into a C map (SipHash, the C walk) and a Python map (MD5,
    the Python walk), small limits included: the same answers from add (-1 or the offset
    where the map filled), the same offset for every key, then the same records kept by
    retain for random cleaning bounds, with and without dropping tombstones."""
    rng = random.Random(39)
    filled = 0
    for _ in range(150):
        keys = [None] + [b"k%d" % i for i in range(rng.randint(1, 60))] + [b""]
        limit = rng.randint(1, 50)
        c_map = _cleaner.OffsetMap(limit + rng.randint(1, 2000), limit, os.urandom(16))
        py_map = cleaner.PythonOffsetMap(limit)
        batches, base = [], rng.randint(0, 1 << 40)
        for _ in range(rng.randint(1, 8)):
            batches.append(_batch(rng, base, keys))
            base += batches[-1][0].last_offset_delta + 1 + rng.randint(0, 3)
        start = batches[0][0].base_offset + rng.randint(0, 5)
        for header, payload in batches:
            found = c_map.add(payload, header.record_count, header.base_offset, start)
            assert found is not None, "the C walk takes every well-formed batch"
            assert found == _python_add(py_map, header, payload, start)
            if found >= 0:
                filled += 1
                break
        assert c_map.size == py_map.size <= limit
        assert [c_map.get(k) for k in keys if k is not None] == [py_map.get(k) for k in keys if k is not None]
        for header, payload in batches:
            reached = header.base_offset + rng.randint(-2, header.last_offset_delta + 2)
            for drop in (False, True):
                kept = c_map.retain(payload, header.record_count, header.base_offset, reached, drop)
                assert kept is not None
                assert kept == _python_retain(py_map, header, payload, reached, drop)
                assert kept[1] is None or len(kept[1]) < len(payload)
    assert 20 < filled < 140, "the cases must include maps that fill and maps that do not"


@needs_c
def test_damaged_sections_are_refused_by_the_c_walks_or_read_as_python_reads_them():
    """A flipped byte, a cut, a wrong record count: the C walks answer None (the Python walk
    then reads the batch or raises its error) or what the Python walk answers; never more
    than the section holds (a count of 2**31 - 1 over a few bytes ends at the bytes)."""
    rng = random.Random(40)
    keys = [None, b"a", b"b", b"c"]
    refused = 0
    for _ in range(300):
        header, payload = _batch(rng, rng.randint(0, 1000), keys)
        c_mapped, py_mapped = _cleaner.OffsetMap(64, 32, os.urandom(16)), cleaner.PythonOffsetMap(32)
        assert c_mapped.add(payload, header.record_count, header.base_offset, 0) == -1
        assert _python_add(py_mapped, header, payload, 0) == -1
        for _ in range(20):
            damaged = bytearray(payload)
            choice = rng.random()
            if damaged and choice < 0.6:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
            elif choice < 0.85:
                damaged = damaged[: rng.randint(0, len(damaged))]
            damaged = bytes(damaged)
            count = header.record_count
            if rng.random() < 0.2:
                count = rng.choice([count + 1, max(count - 1, 0), 2**31 - 1])
            h = header._replace(record_count=count)
            c_map = _cleaner.OffsetMap(64, 32, os.urandom(16))
            found = c_map.add(damaged, count, h.base_offset, 0)
            expected = _python_add(cleaner.PythonOffsetMap(32), h, damaged, 0)
            assert found is None or found == expected
            refused += found is None
            if expected == "corrupt":
                assert found is None
            kept = c_mapped.retain(damaged, count, h.base_offset, h.base_offset + 2, True)
            expected = _python_retain(py_mapped, h, damaged, h.base_offset + 2, True)
            assert kept is None or kept == expected
            if expected == "corrupt":
                assert kept is None
    assert refused > 1000


@needs_c
def test_impossible_arguments_are_refused():
    m = _cleaner.OffsetMap(8, 4, bytes(16))
    record = encode_record(0, 0, b"k", b"v")
    with pytest.raises(ValueError):
        m.add(record, -1, 0, 0)
    with pytest.raises(ValueError):
        m.retain(record, -1, 0, 0, False)
    with pytest.raises(ValueError):
        m.put(b"k", -1)
    for capacity, limit, seed in [(1, 1, bytes(16)), (8, 0, bytes(16)), (8, 4, bytes(15)), (2**62, 4, bytes(16))]:
        with pytest.raises(ValueError):
            _cleaner.OffsetMap(capacity, limit, seed)
    assert m.add(encode_record(1, 0, b"k", b"v"), 1, 2**63 - 1, 0) is None, "an offset past a long is no record"
    assert m.size == 0
    assert m.add(record, 1, 2**63 - 1, 0) == -1 and m.get(b"k") == 2**63 - 1


@needs_c
def test_the_map_grows_with_its_keys_within_its_slots_and_entries():
    """The table starts small and doubles as keys come, never past ``capacity`` slots of 24
    bytes; past ``limit`` keys a new key is refused while the mapped ones still update."""
    capacity, limit = 5000, 4500
    m = _cleaner.OffsetMap(capacity, limit, os.urandom(16))
    assert m.memory <= 1024 * 24
    for i in range(limit):
        assert m.put(b"key-%d" % i, i)
    assert m.size == limit and m.memory <= capacity * 24
    assert not m.put(b"one more", 1)
    assert m.put(b"key-7", 10_000) and m.size == limit
    assert [m.get(b"key-%d" % i) for i in range(limit)] == [10_000 if i == 7 else i for i in range(limit)]
    assert m.get(b"one more") == -1
    small = _cleaner.OffsetMap(2, 5, os.urandom(16))  # a limit of at most capacity - 1
    assert small.put(b"a", 1) and not small.put(b"b", 2)
    rng = random.Random(41)
    for capacity in (1500, 4097, 70_001):  # doublings in place, the last one to capacity
        limit = capacity * 9 // 10
        m, expected = _cleaner.OffsetMap(capacity, limit, os.urandom(16)), {}
        while len(expected) < limit:
            key = rng.randbytes(rng.randint(0, 12))
            offset = rng.randrange(1 << 62)
            assert m.put(key, offset)
            expected[key] = offset
        assert m.size == limit and m.memory == capacity * 24
        assert all(m.get(key) == offset for key, offset in expected.items())
        assert not m.put(b"x" * 13, 1) and m.get(b"x" * 13) == -1


@needs_c
@pytest.mark.parametrize("walk", ["add", "retain"])
def test_the_walks_let_go_of_the_gil(walk):
    """While a cleaner thread walks a large batch in C, another Python thread (the event
    loop's, in a broker) keeps running."""
    n = 2_000_000
    payload = encode_record(0, 0, b"key", b"value") * n
    m = _cleaner.OffsetMap(1024, 512, os.urandom(16))
    m.put(b"key", 1)
    span = []

    def run():
        t = time.perf_counter()
        if walk == "add":
            assert m.add(payload, n, 0, 0) == -1
        else:
            assert m.retain(payload, n, 0, 1 << 40, False) == (0, b""), "key's later offset drops them all"
        span.extend((t, time.perf_counter()))

    ticks = []
    worker = threading.Thread(target=run)
    worker.start()
    while worker.is_alive():
        ticks.append(time.perf_counter())
    worker.join()
    start, end = span
    inside = [t for t in ticks if start <= t <= end]
    gaps = [b - a for a, b in zip([start, *inside], [*inside, end])]
    assert end - start > 0.02, "the walk must be long enough to tell"
    assert max(gaps) < (end - start) / 2, "the other thread stopped while the walk ran"
