"""A PySpark data source for brokkr's log: ``spark.read.format("brokkr").load(path)``.

Reads Kafka-format segments (``{topic}-{partition}/{base offset:020d}.log``) directly, with
no broker running, through PySpark's Python DataSource API (``pyspark.sql.datasource``)::

    from brokkr.plugins.sinks.spark import session

    spark = session()                      # BrokkrDataSource registered
    df = spark.read.format("brokkr").load("/var/lib/brokkr")          # every partition
    df = spark.read.format("brokkr").option("topic", "orders").load("/var/lib/brokkr")
    df = (spark.read.format("brokkr")      # exactly the offsets [100, 200) of orders-3
          .option("startingOffset", 100).option("endingOffset", 200)
          .load("/var/lib/brokkr/orders-3"))

``path`` is a log directory (every ``{topic}-{partition}`` directory in it), one partition
directory, or one ``.log`` segment file (inside its partition directory).

Schema (Spark's own Kafka source, ``includeHeaders`` on, plus the producer fields)::

    key            binary                                   null for a null key
    value          binary                                   null for a tombstone
    topic          string
    partition      int
    offset         long
    timestamp      timestamp                                the record's (CreateTime) or
                                                            the batch's (LogAppendTime)
    timestampType  int                                      0 CreateTime, 1 LogAppendTime
    headers        array<struct<key:string,value:binary>>   [] when none
    producerId     long                                     -1 without one
    producerEpoch  short                                    -1 without one
    sequence       int                                      base sequence + offset delta
                                                            (wrapping as Kafka's); -1 without one

Options (case-insensitive):

``topic``
    Only these topics (one name, or several separated by commas).
``startingOffset`` / ``endingOffset``
    Per partition: only records with ``startingOffset <= offset < endingOffset``.
``maxBytesPerPartition``
    A segment larger than this (default 128 MiB) is split into byte ranges at batch
    boundaries taken from its offset index (``.index`` entries give batch start positions;
    each is checked against the batch header it points at before it is used). Without a
    usable index a segment is one input partition.
``maxDecompressedBytes``
    The most one batch may decompress to (default 100 MiB, Kafka's
    ``socket.request.max.bytes``): files are untrusted.
``kafka.isolation.level``
    ``read_committed`` (the default) or ``read_uncommitted``: the name and values of the
    Kafka consumer setting that Spark's own Kafka source passes through with its
    ``kafka.`` prefix. read_committed reads each partition up to its last stable offset
    and drops the records of aborted transactions, as a read_committed consumer does
    (:mod:`brokkr.plugins.sinks.spark.committed`: from the ``.txnindex`` files, the newest
    producer snapshot and the batch headers after it); read_uncommitted reads everything.

One input partition per segment, or per byte range of a large one, so executors decode
in parallel. The input partitions are fixed when the DataFrame is made (``load()``): each
range stops at the segment's size then, so a segment still being appended to is read up
to its last whole batch at that moment (later appends need a new ``load()``), and a torn
batch at the end of a log is never read. The schema is fixed: a schema given with
``.schema(...)`` must be this one.
Every codec is decoded by brokkr's codec plugins (``brokkr_codecs``, collected once per
Python worker as a broker collects them). Control batches (transaction markers) are
skipped. CRCs are checked: a corrupt batch fails the read, except at
the very end of a partition's last segment, where (as Kafka's recovery) reading stops.

Rows leave the reader as Arrow record batches (``read`` yields ``pyarrow.RecordBatch``),
so the only Python work per record is the decode itself.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from brokkr.core.compression import Codec, collect_codecs
from brokkr.core.errors import CorruptRequest
from brokkr.core.protocol.records import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    _record_at,
    crc_ok,
)
from brokkr.core.txn_index import AbortedTxn, by_producer, is_aborted
from brokkr.plugins.storage.segment.files import INDEX_SUFFIX, parse_partition_dir
from brokkr.plugins.storage.segment.segment import scan_batches
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from . import committed

NAME = "brokkr"
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
        ),
        StructField("producerId", LongType()),
        StructField("producerEpoch", ShortType()),
        StructField("sequence", IntegerType()),
    ]
)
DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
DEFAULT_MAX_DECOMPRESSED = 100 * 1024 * 1024
ROWS_PER_BATCH = 8192  # rows per Arrow batch handed to Spark
BYTES_PER_BATCH = 16 * 1024 * 1024  # or fewer rows, when their records are large
CHUNK = 8 * 1024 * 1024  # bytes of a segment read at a time (more only for a larger batch)
INT32_MAX = 2**31 - 1
_SEGMENT = re.compile(r"^(\d{20})\.log$")
_INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
_INDEX_ENTRY_SIZE = _INDEX_ENTRY.size
_NO_HEADERS: list = []


class SegmentReadError(ValueError):
    """A segment that cannot be read as Kafka's format, before its end."""


@dataclass(frozen=True)
class SegmentSplit(InputPartition):
    """One input partition: the batches of one segment starting in ``[start, end)``."""

    path: str
    topic: str
    partition: int
    start: int  # a batch start position
    end: int  # a batch start position, or the segment's size when planned
    tail: bool  # the end of the partition's last segment: a torn or corrupt end stops the read
    starting_offset: int | None = None
    ending_offset: int | None = None
    #: read_committed: (producer id, first offset, marker offset) of the aborted
    #: transactions that overlap the segment.
    aborted: tuple[tuple[int, int, int], ...] = ()


# -- planning (driver) ---------------------------------------------------------------------


def plan_splits(
    path: str | os.PathLike[str],
    *,
    topics: set[str] | None = None,
    starting_offset: int | None = None,
    ending_offset: int | None = None,
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION,
    read_committed: bool = True,
) -> list[SegmentSplit]:
    """The input partitions for ``path`` (a log dir, a partition dir or a ``.log`` file);
    read_committed: each partition's up to its last stable offset."""
    root = Path(path)
    if root.is_file():
        if not _SEGMENT.fullmatch(root.name):
            raise ValueError(f"{root}: not a segment file (expected {{base offset:020d}}.log)")
        directories = [root.parent]
        only: Path | None = root
    elif root.is_dir():
        only = None
        if any(_SEGMENT.fullmatch(p.name) for p in root.iterdir()):
            directories = [root]
        else:
            directories = sorted(p for p in root.iterdir() if p.is_dir() and parse_partition_dir(p.name))
    else:
        raise FileNotFoundError(f"{root}: no such file or directory")
    splits: list[SegmentSplit] = []
    for directory in directories:
        parsed = parse_partition_dir(directory.name)
        if parsed is None:
            raise ValueError(f"{directory}: not a partition directory ({{topic}}-{{partition}})")
        topic, partition = parsed
        if topics is not None and topic not in topics:
            continue
        segments = sorted((int(m[1]), directory / m[0]) for m in map(_SEGMENT.match, os.listdir(directory)) if m)
        ending, aborted = ending_offset, {}
        if read_committed:
            aborted = committed.aborted_transactions(directory)
            stable = committed.last_stable_offset(directory, segments)
            if stable is not None:
                ending = stable if ending is None else min(ending, stable)
        for i, (base, log) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            if only is not None and log != only:
                continue
            if ending is not None and base >= ending:
                continue
            if starting_offset is not None and next_base is not None and next_base <= starting_offset:
                continue
            overlapping = tuple(
                (pid, first, last)
                for pid, txns in aborted.items()
                for first, last in txns
                if last >= base and (next_base is None or first < next_base)
            )
            splits.extend(
                _segment_splits(
                    log,
                    topic,
                    partition,
                    base,
                    last=next_base is None,
                    starting_offset=starting_offset,
                    ending_offset=ending,
                    max_bytes=max_bytes_per_partition,
                    aborted=overlapping,
                )
            )
    return splits


def _segment_splits(
    log: Path,
    topic: str,
    partition: int,
    base: int,
    *,
    last: bool,
    starting_offset: int | None,
    ending_offset: int | None,
    max_bytes: int,
    aborted: tuple = (),
) -> list[SegmentSplit]:
    size = log.stat().st_size
    if size == 0:
        return []
    entries = _checked_index(log, base, size)  # [(last offset of a batch, its start position)]
    start, end = 0, size
    if starting_offset is not None:
        for offset, position in entries:  # the last batch ending before the start: skipped when read
            if offset >= starting_offset:
                break
            start = position
    if ending_offset is not None:
        for i, (offset, _) in enumerate(entries):
            if offset >= ending_offset - 1 and i + 1 < len(entries):
                end = entries[i + 1][1]
                break
    cuts = [start]
    for _, position in entries:
        if start < position < end and position - cuts[-1] >= max_bytes:
            cuts.append(position)
    bounds = [*cuts, end]
    return [
        SegmentSplit(
            str(log),
            topic,
            partition,
            lo,
            hi,
            tail=last and hi == size,
            starting_offset=starting_offset,
            ending_offset=ending_offset,
            aborted=aborted,
        )
        for lo, hi in zip(bounds, bounds[1:])
    ]


def _checked_index(log: Path, base: int, size: int) -> list[tuple[int, int]]:
    """The offset index entries beside ``log`` as (absolute last offset of a batch, position
    where it starts), each checked against the batch header at its position; [] when there
    is no index or any entry does not match (the segment is then read whole)."""
    index = log.with_suffix(INDEX_SUFFIX)
    try:
        data = index.read_bytes()
    except OSError:
        return []
    entries: list[tuple[int, int]] = []
    with open(log, "rb") as f:
        for rel, position in _INDEX_ENTRY.iter_unpack(data[: len(data) - len(data) % _INDEX_ENTRY_SIZE]):
            if rel == 0 and position == 0:
                break  # the zero-filled rest of a preallocated (active) index
            if entries and (base + rel <= entries[-1][0] or position <= entries[-1][1]):
                return []
            if not 0 < position <= size - HEADER_SIZE:
                return []
            f.seek(position)
            head = f.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE or head[MAGIC_OFFSET] != 2:
                return []
            fields = HEADER.unpack_from(head)
            batch_base, batch_length, last_delta = fields[0], fields[1], fields[6]
            if batch_base + last_delta != base + rel or position + LOG_OVERHEAD + batch_length > size:
                return []
            entries.append((base + rel, position))
    return entries


# -- reading (executors) -------------------------------------------------------------------

_codecs: dict[int, Codec] | None = None


def load_codecs() -> dict[int, Codec]:
    """The codecs of the installed brokkr plugins, collected once per Python process as a
    broker collects them at start (there is no broker here, so the hook gets None)."""
    global _codecs
    if _codecs is None:
        from brokkr.core.plugins import create_plugin_manager

        _codecs = collect_codecs(create_plugin_manager().hook, None)
    return _codecs


def arrow_schema() -> pa.Schema:
    """:data:`SCHEMA` as Arrow, exactly as PySpark expects a data source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


def read_split(
    split: SegmentSplit,
    schema: pa.Schema | None = None,
    *,
    codecs: dict[int, Codec] | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED,
    rows_per_batch: int = ROWS_PER_BATCH,
) -> Iterator[pa.RecordBatch]:
    """The records of ``split`` as Arrow batches of ``schema`` (default :func:`arrow_schema`)."""
    schema = schema if schema is not None else arrow_schema()
    codecs = codecs if codecs is not None else load_codecs()
    columns = _Columns(split.topic, split.partition, schema)
    lo = split.starting_offset if split.starting_offset is not None else -1
    hi = split.ending_offset if split.ending_offset is not None else 2**63
    aborted = by_producer(AbortedTxn(pid, first, last, -1) for pid, first, last in split.aborted)
    for h, buf in _batches(split):
        if h.base_offset >= hi:
            break
        if h.is_control or h.last_offset < lo:
            continue
        if aborted and h.is_transactional and is_aborted(aborted, h.producer_id, h.base_offset):
            continue
        if not crc_ok(buf, h):
            if split.tail:
                break
            raise SegmentReadError(f"{split.path}: the batch at offset {h.base_offset} fails its CRC check")
        payload = buf[h.position + HEADER_SIZE : h.end]
        if h.codec:
            codec = codecs.get(h.codec)
            if codec is None:
                raise SegmentReadError(f"{split.path}: no codec plugin for codec id {h.codec}")
            payload = codec.decompress(payload, max_decompressed)
        else:
            payload = bytes(payload)
        try:
            columns.add(h, payload, lo, hi)
        except CorruptRequest as exc:
            raise SegmentReadError(f"{split.path}: the records of the batch at offset {h.base_offset}: {exc}") from exc
        if columns.rows >= rows_per_batch or columns.bytes >= BYTES_PER_BATCH:
            yield columns.flush()
    if columns.rows:
        yield columns.flush()


def _batches(split: SegmentSplit) -> Iterator[tuple]:
    """(header, buffer holding it) for each whole batch starting in ``[start, end)``, read in
    bounded chunks; a partial batch at ``end`` (a torn tail) is never returned."""
    with open(split.path, "rb") as f:
        done = split.start  # the end of the last whole batch
        try:
            for position, h, buf in scan_batches(f.fileno(), split.start, split.end, CHUNK):
                yield h, buf
                done = position + h.size
        except CorruptRequest as exc:
            if split.tail:
                return
            raise SegmentReadError(f"{split.path}: at position {done}: {exc}") from exc
        if done < split.end and not split.tail:
            raise SegmentReadError(f"{split.path}: {split.end - done} bytes at position {done} are no batch")


class _Columns:
    """Column lists for the rows of one Arrow batch."""

    def __init__(self, topic: str, partition: int, schema: pa.Schema):
        self.topic, self.partition, self.schema = topic, partition, schema
        self._clear()

    def _clear(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list = []
        self.producer_ids: list[int] = []
        self.epochs: list[int] = []
        self.sequences: list[int] = []
        self.bytes = 0

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def add(self, h, payload: bytes, lo: int, hi: int) -> None:
        keys, values, offsets, timestamps, headers = self.keys, self.values, self.offsets, self.timestamps, self.headers
        sequences = self.sequences
        before = len(offsets)
        base, base_ts, base_seq = h.base_offset, h.base_timestamp, h.base_sequence
        log_append_time, bounded = h.log_append_time, lo > base or hi <= h.last_offset
        pos, end = 0, len(payload)
        for _ in range(h.record_count):
            td, od, k, v, hs, pos = _record_at(payload, pos, end)
            offset = base + od
            if bounded and not lo <= offset < hi:
                continue
            offsets.append(offset)
            keys.append(None if k is None else payload[k[0] : k[1]])
            values.append(None if v is None else payload[v[0] : v[1]])
            timestamps.append(base_ts + td)
            if hs:
                headers.append(
                    [
                        (str(payload[a:b], "utf-8", "replace"), None if hv is None else payload[hv[0] : hv[1]])
                        for (a, b), hv in hs
                    ]
                )
            else:
                headers.append(_NO_HEADERS)
            if base_seq >= 0:
                seq = base_seq + od
                sequences.append(seq - INT32_MAX - 1 if seq > INT32_MAX else seq)
        if pos != end:
            raise CorruptRequest("records still remaining after the declared count")
        n = len(offsets) - before
        if base_seq < 0:
            sequences.extend([-1] * n)
        if log_append_time:
            timestamps[before:] = [h.max_timestamp] * n
        self.types.extend([1 if log_append_time else 0] * n)
        self.producer_ids.extend([h.producer_id] * n)
        self.epochs.extend([h.producer_epoch] * n)
        self.bytes += end

    def flush(self) -> pa.RecordBatch:
        n, types = self.rows, self.schema.types
        ts_type = types[5]
        timestamps = pa.array(self.timestamps, pa.int64()).cast(pa.timestamp("ms", tz=ts_type.tz)).cast(ts_type)
        arrays = [
            pa.array(self.keys, types[0]),
            pa.array(self.values, types[1]),
            pa.array([self.topic] * n, types[2]),
            pa.array([self.partition] * n, types[3]),
            pa.array(self.offsets, types[4]),
            timestamps,
            pa.array(self.types, types[6]),
            pa.array(self.headers, types[7]),
            pa.array(self.producer_ids, types[8]),
            pa.array(self.epochs, types[9]),
            pa.array(self.sequences, types[10]),
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


# -- the data source -----------------------------------------------------------------------


class BrokkrDataSource(DataSource):
    """``spark.read.format("brokkr")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> BrokkrReader:
        if schema != SCHEMA:
            raise ValueError(f"the brokkr data source has a fixed schema: {SCHEMA.simpleString()}")
        return BrokkrReader(dict(self.options), schema)


class BrokkrReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType):
        options = {k.lower(): v for k, v in options.items()}
        if "path" not in options:
            raise ValueError('the brokkr data source needs a path: spark.read.format("brokkr").load(path)')
        self.path = options["path"]
        topic = options.get("topic")
        self.topics = {t.strip() for t in topic.split(",") if t.strip()} if topic else None
        self.starting_offset = _int_option(options, "startingoffset")
        self.ending_offset = _int_option(options, "endingoffset")
        self.max_bytes = _int_option(options, "maxbytesperpartition") or DEFAULT_MAX_BYTES_PER_PARTITION
        self.max_decompressed = _int_option(options, "maxdecompressedbytes") or DEFAULT_MAX_DECOMPRESSED
        isolation = options.get("kafka.isolation.level", "read_committed").strip().lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"option kafka.isolation.level: {isolation!r} is not read_committed or read_uncommitted")
        self.read_committed = isolation == "read_committed"
        if self.max_bytes <= 0 or self.max_decompressed <= 0:
            raise ValueError("maxBytesPerPartition and maxDecompressedBytes must be positive")
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        splits = plan_splits(
            self.path,
            topics=self.topics,
            starting_offset=self.starting_offset,
            ending_offset=self.ending_offset,
            max_bytes_per_partition=self.max_bytes,
            read_committed=self.read_committed,
        )
        return splits or [InputPartition(None)]  # Spark needs one partition, even an empty one

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SegmentSplit):
            return iter(())
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.schema, timezone="UTC")
        return read_split(partition, schema, max_decompressed=self.max_decompressed)


def _int_option(options: dict[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None or str(value).strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"option {name}: {value!r} is not an integer") from None
