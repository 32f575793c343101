"""``brokkr dump-log``: what Kafka's ``kafka-dump-log.sh --print-data-log --index-sanity-check``
(``kafka.tools.DumpLogSegments``) prints, for the files of a partition directory.

Every file is untrusted. A ``.log`` is walked one batch at a time and each batch's declared
size is checked against the bytes left in the file before the batch is read, so a torn or
corrupt tail is reported (Kafka's "Found N invalid bytes at the end of ...") and at most
one batch is ever in memory. Index entries are read a chunk at a time and checked against
the ``.log`` beside them in a single forward walk of both files. A producer state
``.snapshot`` is checked (version, CRC-32C, size) and printed one producer per line.

Each ``dump_*`` function writes what it finds to a text stream and returns the file's
:class:`Problems`; an empty one means the file is valid.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

import attrs
from brokkr.core.compression import collect_codecs
from brokkr.core.errors import CorruptRequest
from brokkr.core.plugins import create_plugin_manager
from brokkr.core.producer_state import NO_SEQUENCE, CorruptSnapshot, decode_snapshot, increment_sequence
from brokkr.core.protocol.primitives import Reader
from brokkr.core.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    Record,
    crc_ok,
    decode_records,
    iter_batches_untrusted,
)
from brokkr.core.txn_index import TXN_INDEX_VERSION, decode_entries_untrusted

from .files import INDEX_SUFFIX, LOG_SUFFIX, PRODUCER_SNAPSHOT_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from .index import OffsetIndex, TimeIndex

if TYPE_CHECKING:
    from brokkr.core.compression import Codec

#: Kafka's CompressionType names, by the id in a batch's attributes.
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
#: Kafka's ControlRecordType names, by the type id in a control record's key.
CONTROL_TYPES = {
    0: "ABORT",
    1: "COMMIT",
    2: "LEADER_CHANGE",
    3: "SNAPSHOT_HEADER",
    4: "SNAPSHOT_FOOTER",
    5: "KRAFT_VERSION",
    6: "KRAFT_VOTERS",
}
END_TXN_MARKERS = (0, 1)
TEXT_LIMIT = 64 * 1024  # bytes of another file printed as text
CHUNK = 1 << 20  # bytes of an index read at a time
MAX_SHOWN = 10  # problems described per file; the rest are counted
#: A damaged batch must not decompress into gigabytes. A broker bounds what a produced
#: batch decompresses to by socket.request.max.bytes, whose default this is.
MAX_DECOMPRESSED = 100 * 1024 * 1024

_LENGTH = struct.Struct(">i")


@attrs.define
class Problems:
    """What is wrong with one file: the first few described, all of them counted."""

    shown: list[str] = attrs.field(factory=list)
    count: int = 0

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.shown) < MAX_SHOWN:
            self.shown.append(problem)

    def __bool__(self) -> bool:
        return self.count > 0


# -- entry points ---------------------------------------------------------------------------


def load_codecs() -> dict[int, Codec]:
    """The codecs the installed plugins provide (``brokkr_codecs``), by Kafka's codec id,
    as a broker collects them at start; there is no broker here, so the hook gets None."""
    return collect_codecs(create_plugin_manager().hook, None)


def dump_files(
    paths: Iterable[str | os.PathLike[str]],
    out: TextIO,
    err: TextIO,
    *,
    print_data: bool = True,
    codecs: dict[int, Codec] | None = None,
) -> int:
    """``brokkr dump-log``: dump each file to ``out``, one line per failing file to ``err``.

    Returns 1 when any file is missing or fails its checks, else 0. ``codecs`` defaults
    to :func:`load_codecs`.
    """
    if codecs is None:
        codecs = _load_codecs_or_warn(err)
    status = 0
    for path in map(Path, paths):
        problems = dump_file(path, out, print_data=print_data, codecs=codecs)
        if problems:
            status = 1
            more = f" (and {problems.count - 1} more)" if problems.count > 1 else ""
            out.flush()
            print(f"brokkr dump-log: {path}: {problems.shown[0]}{more}", file=err)
    return status


def dump_file(path: Path, out: TextIO, *, print_data: bool = True, codecs: dict[int, Codec]) -> Problems:
    """Dump one file, chosen by its suffix as Kafka chooses."""
    problems = Problems()
    if not path.is_file():
        problems.add("no such file" if not path.exists() else "not a regular file")
        return problems
    print(f"Dumping {path}", file=out)
    try:
        if path.suffix == LOG_SUFFIX:
            return dump_log(path, out, print_data=print_data, codecs=codecs)
        if path.suffix == INDEX_SUFFIX:
            return dump_index(path, out, OFFSET_INDEX)
        if path.suffix == TIME_INDEX_SUFFIX:
            return dump_index(path, out, TIME_INDEX)
        if path.suffix == PRODUCER_SNAPSHOT_SUFFIX:
            return dump_producer_snapshot(path, out)
        if path.suffix == TXN_INDEX_SUFFIX:
            return dump_txn_index(path, out)
        return dump_other(path, out)
    except BrokenPipeError:  # the reader of ``out`` went away: not a problem of this file
        raise
    except OSError as exc:
        problems.add(exc.strerror or str(exc))
        return problems


def _load_codecs_or_warn(err: TextIO) -> dict[int, Codec]:
    try:
        return load_codecs()
    except Exception as exc:  # a broken third-party plugin must not stop the dump
        print(f"brokkr dump-log: no codecs ({exc}); compressed batches will not be decoded", file=err)
        return {}


def _base_offset(path: Path) -> int | None:
    """The base offset a segment file is named after (``00000000000000000042.log`` -> 42)."""
    stem = path.name.split(".", 1)[0]
    return int(stem) if stem.isascii() and stem.isdigit() else None


# -- .log -----------------------------------------------------------------------------------


class LogReader:
    """The batches of an open ``.log`` file, read one at a time.

    A batch is read only once its declared size fits in what is left of the file, so a
    corrupt size never makes the reader allocate more than the file holds. After a walk,
    ``invalid_bytes`` and ``stop_reason`` say where and why it ended early.
    """

    def __init__(self, f: BinaryIO):
        self._f = f
        self.size = os.fstat(f.fileno()).st_size
        self.valid_bytes = 0
        self.stop_reason: str | None = None

    @property
    def invalid_bytes(self) -> int:
        return self.size - self.valid_bytes

    def batches(self) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """(file position, header, batch bytes) of each whole batch of magic 2; a header's
        own ``position`` is within its batch bytes, so it is 0."""
        self._f.seek(0)
        pos = self.valid_bytes = 0
        self.stop_reason = None
        while pos < self.size:
            buf = self._read_batch(pos)
            if buf is None:
                return
            try:
                header = next(iter_batches_untrusted(buf))
            except CorruptRequest:  # the size was checked: only the magic is left to fail
                self.stop_reason = f"the batch at position {pos} has magic {buf[MAGIC_OFFSET]}; only 2 can be read"
                return
            yield pos, header, buf
            pos = self.valid_bytes = pos + header.size

    def _read_batch(self, pos: int) -> bytes | None:
        """The bytes of the batch at ``pos`` if its size is possible, else None with the reason."""
        left = self.size - pos
        prefix = self._f.read(LOG_OVERHEAD)
        if len(prefix) < LOG_OVERHEAD:
            self.stop_reason = f"{left} bytes at position {pos} are too few for a batch header"
            return None
        (length,) = _LENGTH.unpack_from(prefix, 8)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            self.stop_reason = f"the batch at position {pos} declares an impossible size {length}"
            return None
        if LOG_OVERHEAD + length > left:
            self.stop_reason = f"the batch at position {pos} declares {LOG_OVERHEAD + length} bytes; {left} are left"
            return None
        buf = prefix + self._f.read(length)
        if len(buf) < LOG_OVERHEAD + length:
            self.stop_reason = f"the file shrank while the batch at position {pos} was read"
            return None
        return buf


def dump_log(path: Path, out: TextIO, *, print_data: bool, codecs: dict[int, Codec]) -> Problems:
    """A line per batch and, with ``print_data``, a line per record, as kafka-dump-log
    prints them; then the invalid bytes at the end, if any."""
    problems = Problems()
    base_offset = _base_offset(path)
    if base_offset is None:
        problems.add("the file name does not start with a base offset")
        return problems
    print(f"Log starting offset: {base_offset}", file=out)
    next_offset = base_offset
    with open(path, "rb") as f:
        reader = LogReader(f)
        for position, header, buf in reader.batches():
            valid = crc_ok(buf, header)
            print(format_batch(position, header, valid), file=out)
            if not valid:
                problems.add(f"the batch at position {position} fails its CRC check")
            if header.base_offset < next_offset or header.last_offset_delta < 0:
                disorder = f"offsets {header.base_offset}-{header.last_offset} out of order (expected {next_offset}-)"
                print(f"| {disorder}", file=out)
                problems.add(f"the batch at position {position} has {disorder}")
            next_offset = max(next_offset, header.last_offset + 1)
            if print_data:
                _print_records(header, buf, codecs, out, problems)
    if reader.stop_reason is not None:
        print(f"Found {reader.invalid_bytes} invalid bytes at the end of {path.name}", file=out)
        print(f"  ({reader.stop_reason})", file=out)
        problems.add(f"{reader.invalid_bytes} invalid bytes at the end: {reader.stop_reason}")
    return problems


def _print_records(header: BatchHeader, buf: bytes, codecs: dict[int, Codec], out: TextIO, problems: Problems) -> None:
    if header.codec and header.codec not in codecs:
        print(f"| cannot decode: codec {codec_name(header.codec)} not available", file=out)
        return
    try:
        payload = memoryview(buf)[HEADER_SIZE : header.end]
        if header.codec:
            payload = codecs[header.codec].decompress(payload, MAX_DECOMPRESSED)
        records = decode_records(header, payload)
    except Exception as exc:  # codecs promise DecompressionError only; a broken one must not stop the dump either
        print(f"| cannot decode: {exc}", file=out)
        problems.add(f"the records of the batch at offset {header.base_offset} do not decode: {exc}")
        return
    for record in records:
        print(format_record(header, record), file=out)


def format_batch(position: int, h: BatchHeader, valid: bool) -> str:
    """One batch, in kafka-dump-log's words."""
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {sequence_of(h.base_sequence, h.last_offset_delta)} "
        f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.leader_epoch} "
        f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} position: {position} "
        f"{timestamp_type(h)}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
        f"compresscodec: {codec_name(h.codec)} crc: {h.crc} isvalid: {_bool(valid)}"
    )


def format_record(h: BatchHeader, record: Record) -> str:
    """One record, in kafka-dump-log's words (with ``--print-data-log``): the key and
    payload as UTF-8 text, or what a control record marks."""
    line = (
        f"| offset: {record.offset} {timestamp_type(h)}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"sequence: {sequence_of(h.base_sequence, record.offset - h.base_offset)} "
        f"headerKeys: [{','.join(key for key, _ in record.headers)}]"
    )
    if h.is_control:
        return f"{line} {control_text(record)}"
    if record.key is not None:
        line += f" key: {printable(record.key)}"
    if record.value is not None:
        line += f" payload: {printable(record.value)}"
    return line


def control_text(record: Record) -> str:
    """A control record as Kafka shows it: a transaction marker with its coordinator
    epoch, else the control type and its id."""
    try:
        key = Reader(record.key or b"")
        key.int16()  # version
        type_id = key.int16()
        if type_id not in END_TXN_MARKERS:
            return f"controlType: {CONTROL_TYPES.get(type_id, 'UNKNOWN')}({type_id})"
        value = Reader(record.value or b"")
        value.int16()  # version
        return f"endTxnMarker: {CONTROL_TYPES[type_id]} coordinatorEpoch: {value.int32()}"
    except CorruptRequest:
        return "controlType: UNKNOWN (unreadable control record)"


def sequence_of(base_sequence: int, delta: int) -> int:
    """Kafka's sequence arithmetic: -1 without a producer sequence, wrapping past int32."""
    return NO_SEQUENCE if base_sequence == NO_SEQUENCE else increment_sequence(base_sequence, delta)


def codec_name(codec_id: int) -> str:
    return CODEC_NAMES.get(codec_id, f"unknown({codec_id})")


def timestamp_type(h: BatchHeader) -> str:
    return "LogAppendTime" if h.log_append_time else "CreateTime"


def printable(data: bytes) -> str:
    """Bytes as UTF-8 text (Kafka's StringDecoder), anything unprintable escaped so that
    a record stays on one line."""
    text = data.decode("utf-8", "backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def _size(field: bytes | None) -> int:
    return -1 if field is None else len(field)


def _bool(value: bool) -> str:
    return "true" if value else "false"


# -- .index and .timeindex ------------------------------------------------------------------


class BatchCursor:
    """Walks a ``.log``'s batches forward, to check index entries (which follow log order)."""

    def __init__(self, reader: LogReader):
        self._batches = ((position, header) for position, header, _ in reader.batches())
        self._current = next(self._batches, None)

    def _skip_while(self, before: Callable[[int, BatchHeader], bool]) -> tuple[int, BatchHeader] | None:
        while self._current is not None and before(*self._current):
            self._current = next(self._batches, None)
        return self._current

    def at(self, position: int) -> BatchHeader | None:
        """The batch that starts at ``position``, if one does."""
        current = self._skip_while(lambda pos, _: pos < position)
        return current[1] if current is not None and current[0] == position else None

    def holding(self, offset: int) -> BatchHeader | None:
        """The batch that holds ``offset``, if one does."""
        current = self._skip_while(lambda _, h: h.last_offset < offset)
        return current[1] if current is not None and current[1].base_offset <= offset else None


@attrs.frozen
class IndexKind:
    """What differs between the two indexes: the entry layout, how an entry is printed,
    what order entries keep, and what an entry must match in the log."""

    entry: struct.Struct
    describe: Callable[[int, tuple[int, int]], str]
    out_of_order: Callable[[tuple[int, int] | None, tuple[int, int]], bool]
    log_mismatch: Callable[[BatchCursor, int, tuple[int, int]], str | None]


def _offset_entry_mismatch(cursor: BatchCursor, base_offset: int, entry: tuple[int, int]) -> str | None:
    """An offset index entry maps a batch's last offset to the position where the batch starts."""
    offset, position = base_offset + entry[0], entry[1]
    batch = cursor.at(position)
    if batch is None:
        return f"no batch of the log starts at position {position}"
    if batch.last_offset != offset:
        return f"the log's batch at position {position} ends at offset {batch.last_offset}, not {offset}"
    return None


def _time_entry_mismatch(cursor: BatchCursor, base_offset: int, entry: tuple[int, int]) -> str | None:
    """A time index entry holds the largest timestamp so far and an offset of the batch carrying it."""
    timestamp, offset = entry[0], base_offset + entry[1]
    batch = cursor.holding(offset)
    if batch is None:
        return f"no batch of the log holds offset {offset}"
    if batch.max_timestamp != timestamp:
        return f"the log's batch holding offset {offset} has max timestamp {batch.max_timestamp}, not {timestamp}"
    return None


OFFSET_INDEX = IndexKind(
    OffsetIndex.entry,
    describe=lambda base, e: f"offset: {base + e[0]} position: {e[1]}",
    out_of_order=lambda prev, e: min(e) < 0 or (prev is not None and (e[0] <= prev[0] or e[1] <= prev[1])),
    log_mismatch=_offset_entry_mismatch,
)
TIME_INDEX = IndexKind(
    TimeIndex.entry,
    describe=lambda base, e: f"timestamp: {e[0]} offset: {base + e[1]}",
    out_of_order=lambda prev, e: e[1] < 0 or (prev is not None and (e[0] <= prev[0] or e[1] < prev[1])),
    log_mismatch=_time_entry_mismatch,
)


def dump_index(path: Path, out: TextIO, kind: IndexKind) -> Problems:
    """Every entry of an index, then its sanity check (Kafka's ``--index-sanity-check``):
    whole entries, in order, each pointing at what it should in the ``.log`` beside it."""
    problems = Problems()
    base_offset = _base_offset(path)
    if base_offset is None:
        problems.add("the file name does not start with a base offset")
        return problems
    log_path = path.with_name(path.name.split(".", 1)[0] + LOG_SUFFIX)
    with open(path, "rb") as f, open(log_path, "rb") if log_path.is_file() else nullcontext() as log:
        size = os.fstat(f.fileno()).st_size
        if size % kind.entry.size:
            problems.add(f"its size {size} is not a multiple of {kind.entry.size}")
        entries = _entries_before_padding(f, size // kind.entry.size, kind.entry.size)
        cursor = BatchCursor(LogReader(log)) if log is not None else None
        previous = None
        for i, entry in enumerate(_read_entries(f, kind.entry, entries)):
            print(kind.describe(base_offset, entry), file=out)
            if kind.out_of_order(previous, entry):
                problems.add(f"entry {i} ({kind.describe(base_offset, entry)}) is out of order")
                continue
            mismatch = kind.log_mismatch(cursor, base_offset, entry) if cursor is not None else None
            if mismatch:
                problems.add(f"entry {i} ({kind.describe(base_offset, entry)}): {mismatch}")
            previous = entry
    padding = size // kind.entry.size - entries
    if padding:
        print(f"({padding} zero-filled entries follow: space preallocated for appends)", file=out)
    if cursor is None:  # Kafka's DumpLogSegments fails too: an index is only checked against its log
        problems.add(f"its log {log_path.name} is missing: the entries cannot be checked")
    _print_verdict(path, problems, out)
    return problems


def _entries_before_padding(f: BinaryIO, entries: int, entry_size: int) -> int:
    """How many entries come before the zeros that end a preallocated index (the active
    segment's, or one a crash left untrimmed). No all-zero entry is one that matters: the
    first batch never gets an offset index entry, and a lookup without time index entries
    starts at the base offset, as one at (0, base offset) would."""
    end = entries * entry_size
    while end > 0:
        start = max(0, end - CHUNK)
        f.seek(start)
        data = f.read(end - start).rstrip(b"\0")
        if data:
            return -(-(start + len(data)) // entry_size)
        end = start
    return 0


def _read_entries(f: BinaryIO, entry: struct.Struct, count: int) -> Iterator[tuple[int, int]]:
    """The first ``count`` entries of an index, a chunk at a time."""
    f.seek(0)
    per_chunk = CHUNK // entry.size
    while count > 0:
        data = f.read(min(count, per_chunk) * entry.size)
        n = len(data) // entry.size
        if n == 0:
            return
        yield from entry.iter_unpack(memoryview(data)[: n * entry.size])
        count -= n


def _print_verdict(path: Path, problems: Problems, out: TextIO) -> None:
    if not problems:
        print(f"{path} passed sanity check.", file=out)
        return
    print(f"{path} failed sanity check:", file=out)
    for problem in problems.shown:
        print(f"  {problem}", file=out)
    if problems.count > len(problems.shown):
        print(f"  ... and {problems.count - len(problems.shown)} more", file=out)


# -- other files ----------------------------------------------------------------------------


def dump_producer_snapshot(path: Path, out: TextIO) -> Problems:
    """A producer state snapshot: one line per producer, as Kafka prints them."""
    problems = Problems()
    try:
        producers = decode_snapshot(path.read_bytes())
    except CorruptSnapshot as exc:
        problems.add(str(exc))
        return problems
    for producer_id, e in producers.items():
        txn_first = (
            "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
        )
        line = (
            f"producerId: {producer_id} producerEpoch: {e.producer_epoch} coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {txn_first} lastTimestamp: {e.last_timestamp} "
        )
        if e.batches:  # a snapshot holds a producer's last batch only
            b = e.batches[0]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                f"offsetDelta: {b.offset_delta} timestamp: {b.timestamp}"
            )
        print(line, file=out)
    return problems


def dump_txn_index(path: Path, out: TextIO) -> Problems:
    """A ``.txnindex``: one line per aborted transaction, as Kafka prints them."""
    problems = Problems()
    try:
        entries = decode_entries_untrusted(path.read_bytes())
    except CorruptRequest as exc:
        problems.add(str(exc))
        return problems
    for t in entries:
        print(
            f"version: {TXN_INDEX_VERSION} producerId: {t.producer_id} firstOffset: {t.first_offset} "
            f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}",
            file=out,
        )
    return problems


def dump_other(path: Path, out: TextIO) -> Problems:
    """Text files (checkpoints, partition.metadata) as they are."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        data = f.read(TEXT_LIMIT)
    if b"\0" in data:
        decoded = ".log, .index, .timeindex, .txnindex and .snapshot"
        print(f"Not a text file ({size} bytes); only {decoded} files are decoded", file=out)
        return Problems()
    text = data.decode("utf-8", "replace")
    out.write(text if text.endswith("\n") or not text else text + "\n")
    if size > TEXT_LIMIT:
        print(f"... ({size - TEXT_LIMIT} more bytes not shown)", file=out)
    return Problems()
