"""``brokkr dump-log``: Kafka's own files, files brokkr writes, damaged files, and the command."""

from __future__ import annotations

import gzip
import io
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from brokkr.core.protocol.records import build_batch, encode_record
from brokkr.plugins.storage.segment.dump import dump_files, load_codecs
from confluent_kafka import Producer

KAFKA_LOGS = Path(__file__).parent / "fixtures" / "kafka-logs"
KSQL = KAFKA_LOGS / "_confluent-ksql-default__command_topic-0"
TXN_STATE = KAFKA_LOGS / "__transaction_state-44"
GZIP_FIXTURE = KAFKA_LOGS / "dspiderTask-2"
SEGMENT = "00000000000000000000"
COMMIT_POSITION = 7525  # where the ksql log's COMMIT marker batch starts (78 bytes long)
T0 = 1_700_000_000_000
CONSOLE_SCRIPT = shutil.which("brokkr", path=str(Path(sys.executable).parent))


def dump(*paths: Path, **kwargs) -> tuple[int, list[str], str]:
    out, err = io.StringIO(), io.StringIO()
    status = dump_files(paths, out, err, **kwargs)
    return status, out.getvalue().splitlines(), err.getvalue()


def copy_partition(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


# -- Kafka's files ----------------------------------------------------------------------------


def test_kafka_transactional_record_and_commit_marker():
    status, lines, err = dump(KSQL / f"{SEGMENT}.log")
    assert (status, err) == (0, "")
    assert lines[:2] == [f"Dumping {KSQL / SEGMENT}.log", "Log starting offset: 0"]
    assert lines[2] == (
        "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0 lastSequence: 0 producerId: 0 producerEpoch: 0 "
        "partitionLeaderEpoch: 0 isTransactional: true isControl: false position: 0 CreateTime: 1728561475261 "
        "size: 7525 magic: 2 compresscodec: none crc: 1002262746 isvalid: true"
    )
    assert lines[3].startswith(
        "| offset: 0 CreateTime: 1728561475261 keySize: 37 valueSize: 7418 sequence: 0 headerKeys: [] "
        'key: "stream/`KSQL_PROCESSING_LOG`/create" payload: {"statement":"CREATE STREAM KSQL_PROCESSING_LOG ('
    )
    assert lines[4] == (
        "baseOffset: 1 lastOffset: 1 count: 1 baseSequence: -1 lastSequence: -1 producerId: 0 producerEpoch: 0 "
        "partitionLeaderEpoch: 0 isTransactional: true isControl: true position: 7525 CreateTime: 1728561475581 "
        "size: 78 magic: 2 compresscodec: none crc: 3174640246 isvalid: true"
    )
    assert lines[5] == (
        "| offset: 1 CreateTime: 1728561475581 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 0"
    )
    assert len(lines) == 6


def test_kafka_binary_records_are_escaped_onto_one_line():
    status, lines, _ = dump(TXN_STATE / f"{SEGMENT}.log")
    assert status == 0
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert [re.search(r"position: (\d+)", b)[1] for b in batches] == ["0", "117", "284", "451"]
    records = [line for line in lines if line.startswith("| offset:")]
    assert len(records) == 4
    assert records[1].startswith(
        "| offset: 1 CreateTime: 1728561475381 keySize: 12 valueSize: 85 sequence: -1 headerKeys: [] "
        r"key: \x00\x00\x00\x08default_ payload: \x00"
    )
    assert "_confluent-ksql-default__command_topic" in records[1]


def test_no_print_data_prints_batches_only():
    status, lines, _ = dump(TXN_STATE / f"{SEGMENT}.log", print_data=False)
    assert status == 0
    assert len([line for line in lines if line.startswith("baseOffset:")]) == 4
    assert not [line for line in lines if line.startswith("|")]


@pytest.mark.parametrize(
    "path, entries",
    [
        (KSQL / f"{SEGMENT}.index", ["offset: 1 position: 7525"]),
        (KSQL / f"{SEGMENT}.timeindex", ["timestamp: 1728561475581 offset: 1"]),
        (TXN_STATE / f"{SEGMENT}.index", []),
        (TXN_STATE / f"{SEGMENT}.timeindex", ["timestamp: 1728561475630 offset: 3"]),
    ],
)
def test_kafka_indexes_pass_the_sanity_check(path, entries):
    status, lines, err = dump(path)
    assert (status, err) == (0, "")
    assert lines == [f"Dumping {path}", *entries, f"{path} passed sanity check."]


def test_other_partition_files_are_printed():
    status, lines, _ = dump(
        KSQL / "partition.metadata", KSQL / "leader-epoch-checkpoint", KSQL / f"{SEGMENT[:-1]}2.snapshot"
    )
    assert status == 0
    assert lines == [
        f"Dumping {KSQL / 'partition.metadata'}",
        "version: 0",
        "topic_id: TvQoTq0KRHWWLKQ64d1gfw",
        f"Dumping {KSQL / 'leader-epoch-checkpoint'}",
        "0",
        "2",
        "0 0",
        "38 2",
        f"Dumping {KSQL / '00000000000000000002.snapshot'}",
        "producerId: 0 producerEpoch: 0 coordinatorEpoch: 0 currentTxnFirstOffset: OptionalLong.empty "
        "lastTimestamp: 1728561475581 firstSequence: 0 lastSequence: 0 lastOffset: 0 offsetDelta: 0 "
        "timestamp: 1728561475581",
    ]


def test_producer_snapshots_are_decoded_and_a_corrupt_one_fails(tmp_path):
    empty = TXN_STATE / "00000000000000000004.snapshot"
    assert dump(empty) == (0, [f"Dumping {empty}"], ""), "no producers: no lines"
    corrupt = tmp_path / "00000000000000000002.snapshot"
    data = bytearray((KSQL / corrupt.name).read_bytes())
    data[-1] ^= 0xFF
    corrupt.write_bytes(data)
    status, lines, err = dump(corrupt)
    assert (status, lines) == (1, [f"Dumping {corrupt}"])
    assert err.startswith(f"brokkr dump-log: {corrupt}: Snapshot is corrupt (CRC is no longer valid). Stored crc: ")


# -- compressed batches -----------------------------------------------------------------------


def gzip_log(tmp_path: Path, payload: bytes | None = None) -> Path:
    """A one-batch segment whose two records are gzip-compressed (by the standard library)."""
    records = b"".join(encode_record(i, i, f"k{i}".encode(), f"v{i}".encode()) for i in range(2))
    batch = build_batch(
        [(b"k0", b"v0"), (b"k1", b"v1")],
        timestamp=T0,
        attributes=1,
        compressed_payload=gzip.compress(records) if payload is None else payload,
    )
    path = tmp_path / f"{SEGMENT}.log"
    path.write_bytes(batch)
    return path


def test_gzip_batch_is_decoded_through_the_codec_plugins(tmp_path):
    path = gzip_log(tmp_path)
    status, lines, _ = dump(path)
    assert status == 0
    assert "compresscodec: gzip" in lines[2] and "isvalid: true" in lines[2]
    if 1 not in load_codecs():  # the gzip plugin is not installed here
        assert lines[3:] == ["| cannot decode: codec gzip not available"]
        return
    assert lines[3:] == [
        "| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k0 payload: v0",
        "| offset: 1 CreateTime: 1700000000001 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k1 payload: v1",
    ]


def test_missing_codec_is_a_note_not_a_crash(tmp_path):
    status, lines, err = dump(gzip_log(tmp_path), codecs={})
    assert (status, err) == (0, "")
    assert "compresscodec: gzip" in lines[2]
    assert lines[3:] == ["| cannot decode: codec gzip not available"]


def test_undecodable_compressed_batch_is_reported(tmp_path):
    if 1 not in load_codecs():
        pytest.skip("no gzip codec plugin installed")
    path = gzip_log(tmp_path, payload=b"this is not gzip data")  # valid CRC, bad payload
    status, lines, err = dump(path)
    assert status == 1
    assert "isvalid: true" in lines[2]
    assert lines[3].startswith("| cannot decode: ")
    assert f"{path}: the records of the batch at offset 0 do not decode" in err


@pytest.mark.skipif(not GZIP_FIXTURE.is_dir(), reason="the dspiderTask-2 fixture is not in tests/fixtures")
def test_kafka_gzip_fixture():
    status, lines, _ = dump(GZIP_FIXTURE / f"{SEGMENT}.log")
    assert status == 0
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 198 and all("compresscodec: gzip" in b and "isvalid: true" in b for b in batches)
    if 1 in load_codecs():
        assert len([line for line in lines if line.startswith("| offset:")]) == 198


# -- segments written by brokkr ---------------------------------------------------------------


@pytest.fixture
def brokkr_partition(brokkr_broker_factory, tmp_path) -> Path:
    """``orders-0`` as a stopped brokkr broker left it: 60 records, one batch each, over
    several 2000-byte segments with offset and time index entries every ~200 bytes."""
    data = tmp_path / "data"
    config = {"log.dirs": str(data), "log.segment.bytes": "2000", "log.index.interval.bytes": "200"}
    broker = brokkr_broker_factory(config)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    failures = []
    for i in range(60):
        producer.produce(
            "orders",
            key=f"k{i}".encode(),
            value=f"value-{i}".encode(),
            headers=[("h", b"v")],
            timestamp=T0 + i,
            on_delivery=lambda err, _msg: err and failures.append(err),
        )
        assert producer.flush(10) == 0
    assert failures == []
    broker.stop()
    return data / "orders-0"


def test_segments_written_by_brokkr(brokkr_partition):
    logs = sorted(brokkr_partition.glob("*.log"))
    assert len(logs) >= 3
    files = sorted(brokkr_partition.iterdir())
    status, lines, err = dump(*files)
    assert (status, err) == (0, "")

    starts = [int(line.split(": ")[1]) for line in lines if line.startswith("Log starting offset:")]
    assert starts == [int(log.stem) for log in logs]
    records = [
        re.match(r"\| offset: (\d+) CreateTime: (\d+) .* headerKeys: \[h\] key: (\S+) payload: (\S+)$", line)
        for line in lines
        if line.startswith("| offset:")
    ]
    assert [(int(m[1]), int(m[2]), m[3], m[4]) for m in records] == [
        (i, T0 + i, f"k{i}", f"value-{i}") for i in range(60)
    ]
    indexes = [f for f in files if f.suffix in (".index", ".timeindex")]
    assert [line for line in lines if line.endswith("passed sanity check.")] == [
        f"{path} passed sanity check." for path in indexes
    ]
    assert len([line for line in lines if re.fullmatch(r"offset: \d+ position: \d+", line)]) >= 10
    assert len([line for line in lines if re.fullmatch(r"timestamp: \d+ offset: \d+", line)]) >= 10


def test_corrupted_brokkr_index_fails_the_sanity_check(brokkr_partition):
    index = brokkr_partition / f"{SEGMENT}.index"
    entries = list(struct.iter_unpack(">ii", index.read_bytes()))
    assert len(entries) >= 3
    with open(index, "r+b") as f:
        f.seek(8)
        f.write(b"\x7f" * 8)  # entry 1 now points far past the log; the entries after it are out of order
    status, lines, err = dump(index)
    assert status == 1
    garbage = 0x7F7F7F7F
    assert lines[1:4] == [
        f"offset: {entries[0][0]} position: {entries[0][1]}",
        f"offset: {garbage} position: {garbage}",
        f"offset: {entries[2][0]} position: {entries[2][1]}",
    ]
    first_problem = f"entry 1 (offset: {garbage} position: {garbage}): no batch of the log starts at position {garbage}"
    verdict = lines[lines.index(f"{index} failed sanity check:") + 1 :]
    assert verdict == [
        f"  {first_problem}",
        *[f"  entry {i} (offset: {o} position: {p}) is out of order" for i, (o, p) in enumerate(entries) if i > 1],
    ]
    assert err == f"brokkr dump-log: {index}: {first_problem} (and {len(entries) - 2} more)\n"


# -- damaged files ----------------------------------------------------------------------------


def _set_int32(data: bytearray, at: int, value: int) -> bytearray:
    struct.pack_into(">i", data, at, value)
    return data


@pytest.mark.parametrize(
    "damage, invalid, reason",
    [
        (lambda b: b[: COMMIT_POSITION + 30], 30, "the batch at position 7525 declares 78 bytes; 30 are left"),
        (lambda b: b[: COMMIT_POSITION + 5], 5, "5 bytes at position 7525 are too few for a batch header"),
        (
            lambda b: _set_int32(b, COMMIT_POSITION + 8, 2**31 - 1),
            78,
            "the batch at position 7525 declares 2147483659 bytes; 78 are left",
        ),
        (
            lambda b: _set_int32(b, COMMIT_POSITION + 8, -5),
            78,
            "the batch at position 7525 declares an impossible size -5",
        ),
        (lambda b: b[:COMMIT_POSITION] + b"\x00" * 60, 60, "the batch at position 7525 declares an impossible size 0"),
    ],
    ids=["torn-batch", "torn-header", "huge-size", "negative-size", "zeros"],
)
def test_torn_or_corrupt_tail_is_reported(tmp_path, damage, invalid, reason):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.log"
    path.write_bytes(bytes(damage(bytearray(path.read_bytes()))))
    status, lines, err = dump(path)
    assert status == 1
    assert [line for line in lines if line.startswith("baseOffset:")] == [lines[2]]  # the first batch, intact
    assert "isvalid: true" in lines[2]
    assert lines[-2:] == [f"Found {invalid} invalid bytes at the end of {SEGMENT}.log", f"  ({reason})"]
    assert err == f"brokkr dump-log: {path}: {invalid} invalid bytes at the end: {reason}\n"


def test_bad_magic_stops_the_walk(tmp_path):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.log"
    data = bytearray(path.read_bytes())
    data[COMMIT_POSITION + 16] = 7
    path.write_bytes(data)
    status, lines, _ = dump(path)
    assert status == 1
    assert lines[-1] == "  (the batch at position 7525 has magic 7; only 2 can be read)"
    assert lines[-2] == f"Found 78 invalid bytes at the end of {SEGMENT}.log"


def test_crc_mismatch_is_invalid_and_the_walk_goes_on(tmp_path):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.log"
    data = bytearray(path.read_bytes())
    data[1000] ^= 0xFF  # inside the first record's value
    path.write_bytes(data)
    status, lines, err = dump(path)
    assert status == 1
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert batches[0].endswith("isvalid: false") and batches[1].endswith("isvalid: true")
    assert lines[-1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 0")
    assert err == f"brokkr dump-log: {path}: the batch at position 0 fails its CRC check\n"


def test_offsets_going_backwards_are_reported(tmp_path):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.log"
    data = bytearray(path.read_bytes())
    struct.pack_into(">q", data, COMMIT_POSITION, 0)  # base offsets are not covered by the CRC
    path.write_bytes(data)
    status, lines, _ = dump(path, print_data=False)
    assert status == 1
    assert lines[-1] == "| offsets 0-0 out of order (expected 1-)"


@pytest.mark.parametrize(
    "suffix, content, problem",
    [
        (
            ".index",
            struct.pack(">ii", 1, 100),
            "entry 0 (offset: 1 position: 100): no batch of the log starts at position 100",
        ),
        (
            ".index",
            struct.pack(">ii", 5, 0),
            "entry 0 (offset: 5 position: 0): the log's batch at position 0 ends at offset 0, not 5",
        ),
        (".index", struct.pack(">ii", 1, COMMIT_POSITION) + b"xyz", "its size 11 is not a multiple of 8"),
        (".index", struct.pack(">iiii", 1, COMMIT_POSITION, -1, 9), "entry 1 (offset: -1 position: 9) is out of order"),
        (
            ".timeindex",
            struct.pack(">qi", 5, 1),
            "entry 0 (timestamp: 5 offset: 1): the log's batch holding offset 1 has max timestamp 1728561475581, not 5",
        ),
        (
            ".timeindex",
            struct.pack(">qi", 1728561475581, 7),
            "entry 0 (timestamp: 1728561475581 offset: 7): no batch of the log holds offset 7",
        ),
        (
            ".timeindex",
            struct.pack(">qiqi", 1728561475581, 1, 1728561475261, 0),
            "entry 1 (timestamp: 1728561475261 offset: 0) is out of order",
        ),
    ],
    ids=[
        "position-off-batch",
        "offset-mismatch",
        "size",
        "out-of-order",
        "timestamp-mismatch",
        "offset-past-log",
        "time-order",
    ],
)
def test_corrupted_index_fails_the_sanity_check(tmp_path, suffix, content, problem):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}{suffix}"
    path.write_bytes(content)
    status, lines, err = dump(path)
    assert status == 1
    assert lines[-2:] == [f"{path} failed sanity check:", f"  {problem}"]
    assert err == f"brokkr dump-log: {path}: {problem}\n"


def test_preallocated_index_tail_is_not_an_error(tmp_path):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.index"
    path.write_bytes(struct.pack(">ii", 1, COMMIT_POSITION) + bytes(8 * 100))
    status, lines, _ = dump(path)
    assert status == 0
    assert lines[1:] == [
        "offset: 1 position: 7525",
        "(100 zero-filled entries follow: space preallocated for appends)",
        f"{path} passed sanity check.",
    ]


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_fresh_preallocated_index_is_empty_not_corrupt(tmp_path, suffix):
    path = copy_partition(KSQL, tmp_path) / f"{SEGMENT}{suffix}"
    path.write_bytes(bytes(12 * 8 * 1000))  # the active segment's index before its first entry
    status, lines, _ = dump(path)
    assert status == 0
    assert lines[1:] == [
        f"({12 * 1000 if suffix == '.index' else 8 * 1000} zero-filled entries follow: space preallocated for appends)",
        f"{path} passed sanity check.",
    ]


def test_index_without_its_log_fails(tmp_path):
    path = tmp_path / f"{SEGMENT}.index"
    shutil.copy(KSQL / path.name, path)
    status, _, err = dump(path)
    assert status == 1
    assert f"its log {SEGMENT}.log is missing: the entries cannot be checked" in err


def test_missing_and_unnamed_files(tmp_path):
    odd = tmp_path / "segment.log"
    shutil.copy(KSQL / f"{SEGMENT}.log", odd)
    status, _, err = dump(tmp_path / "nope.log", tmp_path, odd)
    assert status == 1
    assert err.splitlines() == [
        f"brokkr dump-log: {tmp_path / 'nope.log'}: no such file",
        f"brokkr dump-log: {tmp_path}: not a regular file",
        f"brokkr dump-log: {odd}: the file name does not start with a base offset",
    ]


# -- the command ------------------------------------------------------------------------------


def brokkr(*args: str | Path, console_script: bool = False) -> subprocess.CompletedProcess:
    command = [CONSOLE_SCRIPT] if console_script else [sys.executable, "-m", "brokkr.core.cli"]
    return subprocess.run([*command, "dump-log", *map(str, args)], capture_output=True, text=True, timeout=60)


def test_command_on_a_kafka_partition():
    files = sorted(KSQL.iterdir())
    result = brokkr(*files)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.count("Dumping ") == len(files)
    assert "endTxnMarker: COMMIT coordinatorEpoch: 0" in result.stdout
    assert result.stdout.count("passed sanity check.") == 2


@pytest.mark.skipif(CONSOLE_SCRIPT is None, reason="the brokkr console script is not installed")
def test_console_script_with_kafka_flags():
    result = brokkr("--no-print-data", "--index-sanity-check", KSQL / f"{SEGMENT}.log", console_script=True)
    assert result.returncode == 0
    assert result.stdout.splitlines()[1:] == [
        "Log starting offset: 0",
        *[line for line in dump(KSQL / f"{SEGMENT}.log")[1] if line.startswith("baseOffset:")],
    ]


def test_command_fails_on_damage_without_a_traceback(tmp_path):
    torn = copy_partition(KSQL, tmp_path) / f"{SEGMENT}.log"
    torn.write_bytes(torn.read_bytes()[: COMMIT_POSITION + 30])
    result = brokkr(torn, tmp_path / "missing.index")
    assert result.returncode == 1
    assert f"Found 30 invalid bytes at the end of {SEGMENT}.log" in result.stdout
    assert result.stderr.splitlines() == [
        f"brokkr dump-log: {torn}: 30 invalid bytes at the end: the batch at position 7525 declares 78 bytes; 30 are left",
        f"brokkr dump-log: {tmp_path / 'missing.index'}: no such file",
    ]
    assert "Traceback" not in result.stderr
