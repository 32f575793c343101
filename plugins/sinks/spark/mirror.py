"""The mirror: Kafka-format segments into Parquet files of a lake, exactly once, through Spark.

Layout (``lake`` is a local directory or any URI Spark writes)::

    <lake>/<topic>/partition=<p>/<topic>-<p>-<first:020d>-<last:020d>.parquet/   (Spark's output)
    <commit dir>/<topic>-<p>.json                                            (the commit log)

Each mirrored range ``[first, last]`` of offsets is written by Spark in ``overwrite`` mode
to a directory named after it, from the brokkr data source (``format("brokkr")``, with
the columns of Spark's Kafka source except ``partition``, which the path carries, Hive
style). Only once that write has succeeded is the partition's commit log replaced
(atomically: temp file, fsync, rename) with the new *mirrored offset* ``last + 1``. Every
range starts at the committed offset, so committed files never overlap and never leave a
gap. A crash or kill between the write and the commit leaves at most files starting at or
above the committed offset; they are deleted before the next write of that partition
(and the next write of the same range overwrites it anyway). So after any crash and a
restart, each offset is in exactly one committed file.

The commit log lives on a local filesystem: ``<lake>/_brokkr_commits`` for a local lake,
else the directory given as ``commit_dir``.

Run as ``python -m brokkr.plugins.sinks.spark.mirror --work FILE ...`` by the sink (see
:mod:`brokkr.plugins.sinks.spark.sink`), it follows the work file the broker keeps and
mirrors at its own pace; ``brokkr mirror`` uses :func:`backfill` and :func:`status`.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

log = logging.getLogger("brokkr.sink.spark")

COMMITS = "_brokkr_commits"
#: Fault injection for the crash tests: the path of a marker file; the first write that
#: finds it missing creates it and exits the process between the Parquet write and the commit.
CRASH_ONCE_ENV = "BROKKR_MIRROR_CRASH_ONCE"
#: Spark settings as a JSON object, from the sink (kept off the command line: they may be secrets).
CONF_ENV = "BROKKR_MIRROR_SPARK_CONF"

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def local_path(uri: str) -> Path | None:
    """The local path of ``uri`` (a plain path or a ``file:`` URI), else None."""
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    if uri.startswith("file:"):
        return Path(uri[len("file:") :])
    if "://" in uri:
        return None
    return Path(uri)


def default_commit_dir(lake: str, commit_dir: str | None = None) -> Path:
    if commit_dir:
        return Path(commit_dir)
    local = local_path(lake)
    if local is None:
        raise ValueError(f"the lake {lake} is not local: give a local commit directory (brokkr.sink.commit.dir)")
    return local / COMMITS


def data_name(topic: str, partition: int, first: int, last: int) -> str:
    return f"{topic}-{partition}-{first:020d}-{last:020d}.parquet"


def parse_data_name(name: str) -> tuple[str, int, int, int] | None:
    if not name.endswith(".parquet"):
        return None
    parts = name[: -len(".parquet")].rsplit("-", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])


class CommitLog:
    """Per topic-partition, the offset mirrored up to (exclusive) and the files holding it."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    def _path(self, topic: str, partition: int) -> Path:
        return self.directory / f"{topic}-{partition}.json"

    def read(self, topic: str, partition: int) -> dict[str, Any]:
        try:
            return json.loads(self._path(topic, partition).read_text())
        except FileNotFoundError:
            return {"topic": topic, "partition": partition, "mirrored_offset": 0, "files": []}

    def mirrored_offset(self, topic: str, partition: int) -> int:
        return self.read(topic, partition)["mirrored_offset"]

    def commit(
        self, topic: str, partition: int, first: int, end: int, name: str, unparsable: int | None = None
    ) -> None:
        entry = self.read(topic, partition)
        new = {"name": name, "first": first, "last": end - 1}
        if unparsable is not None:
            new["unparsable"] = unparsable
            entry["unparsable"] = sum(f.get("unparsable", 0) for f in entry["files"] if f["first"] < first) + unparsable
        entry["files"] = [f for f in entry["files"] if f["first"] < first] + [new]
        entry["mirrored_offset"] = end
        entry["updated_ms"] = int(time.time() * 1000)
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self._path(topic, partition), json.dumps(entry, indent=1).encode())

    def mark(self, topic: str, partition: int, end: int) -> None:
        """Record ``end`` as mirrored, no files (a table keeps its own record: this copy is
        only the broker's view, for retention)."""
        entry = {"topic": topic, "partition": partition, "mirrored_offset": end, "files": []}
        entry["updated_ms"] = int(time.time() * 1000)
        self.directory.mkdir(parents=True, exist_ok=True)
        _write_atomically(self._path(topic, partition), json.dumps(entry).encode())

    def all(self) -> dict[tuple[str, int], int]:
        out = {}
        if self.directory.is_dir():
            for path in self.directory.glob("*.json"):
                entry = json.loads(path.read_text())
                out[(entry["topic"], entry["partition"])] = entry["mirrored_offset"]
        return out


def _write_atomically(path: Path, data: bytes) -> None:
    from brokkr.plugins.storage.segment.files import write_atomically

    write_atomically(path, data)


# -- the log side -----------------------------------------------------------------------


@attrs.frozen
class Range:
    """Offsets [start, end) of one partition, read from the segment file ``path``."""

    topic: str
    partition: int
    start: int
    end: int
    path: str
    size: int = 0


def log_end_offset(path: str | Path) -> int:
    """One past the last offset of a ``.log`` segment (its base offset if empty)."""
    end = int(Path(path).name.split(".")[0])
    for _, after, _ in _batch_spans(path):
        end = after
    return end


def hand_overs(path: str | Path, start: int, end: int, most_records: int, most_bytes: int) -> list[tuple[int, int]]:
    """``[start, end)`` of the segment ``path`` as the ranges ``[lo, hi)`` that one commit
    each carries from Spark's executors to the driver: at most ``most_records`` offsets and
    ``most_bytes`` of the log's batches (as stored: compressed, as Kafka's fetch.max.bytes
    counts them), cut at batch boundaries; a batch larger than ``most_bytes`` goes alone. The
    headers are read in place (the segment is mapped, never read into memory)."""
    out, lo, size = [], start, 0
    for first, after, length in _batch_spans(path):
        if after <= lo:
            continue
        if first >= end:
            break
        if size and size + length > most_bytes:
            out.append((lo, first))
            lo, size = first, 0
        size += length
        while min(after, end) - lo > most_records:  # many small records: cut inside the batch
            out.append((lo, lo + most_records))
            lo, size = lo + most_records, length
    out += [(o, min(o + most_records, end)) for o in range(lo, end, most_records)]
    return out


def _batch_spans(path: str | Path) -> Iterator[tuple[int, int, int]]:
    """(base offset, one past its last offset, bytes) of each whole batch of a segment, up to
    a torn or zero-filled end (where the data source stops too)."""
    import mmap

    from brokkr.core.errors import CorruptRequest
    from brokkr.core.protocol.records import iter_batches_untrusted

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with mapped:
        walk = iter_batches_untrusted(mapped)
        try:
            for h in walk:
                yield h.base_offset, h.base_offset + h.last_offset_delta + 1, h.size
        except CorruptRequest:
            return
        finally:
            walk.close()  # lets go of its view of the mapping before the mapping closes


def scan_log_dir(log_dir: str | Path, topics: Iterable[str] = ()) -> dict[tuple[str, int], list[Path]]:
    """The ``.log`` segments of every partition directory, oldest first."""
    wanted = set(topics)
    out: dict[tuple[str, int], list[Path]] = {}
    for d in sorted(Path(log_dir).iterdir()):
        m = _PARTITION_DIR.fullmatch(d.name)
        if not d.is_dir() or m is None or (wanted and m["topic"] not in wanted):
            continue
        logs = sorted(d.glob("*.log"), key=lambda p: int(p.name.split(".")[0]))
        if logs:
            out[(m["topic"], int(m["partition"]))] = logs
    return out


def log_ranges(log_dir: str | Path, topics: Iterable[str] = ()) -> dict[tuple[str, int], list[Range]]:
    """Every segment of a (stopped or running) broker's log dir, as ranges: a closed
    segment ends where the next begins; the last one at its last batch; none past the
    partition's last stable offset (no record of an open transaction is mirrored)."""
    from brokkr.plugins.sinks.spark import committed

    out = {}
    for (topic, partition), logs in scan_log_dir(log_dir, topics).items():
        bases = [int(p.name.split(".")[0]) for p in logs]
        ends = [*bases[1:], log_end_offset(logs[-1])]
        stable = committed.last_stable_offset(logs[0].parent, list(zip(bases, logs)))
        if stable is not None:
            ends = [max(min(end, stable), base) for base, end in zip(bases, ends)]
        out[(topic, partition)] = [
            Range(topic, partition, b, e, str(p), p.stat().st_size) for b, e, p in zip(bases, ends, logs)
        ]
    return out


# -- the lake side ----------------------------------------------------------------------


class Mirror:
    """Writes ranges of segments to the lake and commits them (see the module docstring)."""

    def __init__(
        self,
        spark: Any,
        lake: str,
        commit_dir: str | Path | None = None,
        value_schemas: Mapping[str, str] | None = None,
    ):
        self.spark = spark
        self.lake = lake.rstrip("/")
        #: Per topic, a Spark DDL schema of its JSON values: adds typed columns.
        self.value_schemas = dict(value_schemas or {})
        self.commits = CommitLog(default_commit_dir(lake, str(commit_dir) if commit_dir else None))

    def partition_dir(self, topic: str, partition: int) -> str:
        return f"{self.lake}/{topic}/partition={partition}"

    def mirror(self, r: Range) -> int:
        """Mirror what ``r`` holds beyond the committed offset; return the records' count
        of offsets newly committed (0 if nothing was to do)."""
        committed = self.commits.mirrored_offset(r.topic, r.partition)
        if r.end <= committed:
            return 0
        start = max(r.start, committed)
        if start > committed:
            log.warning(
                "%s-%d: offsets %d..%d are gone from the log, not mirrored", r.topic, r.partition, committed, start
            )
        self._remove_uncommitted(r.topic, r.partition, committed)
        name = data_name(r.topic, r.partition, start, r.end - 1)
        df = (
            self.spark.read.format("brokkr")
            .option("topic", r.topic)
            .option("startingOffset", str(start))
            .option("endingOffset", str(r.end))
            .load(r.path)
        )
        df = df.drop("partition")
        ddl = self.value_schemas.get(r.topic)
        if ddl:
            df = with_parsed_values(df, ddl)
        target = f"{self.partition_dir(r.topic, r.partition)}/{name}"
        df.write.mode("overwrite").parquet(target)
        unparsable = self.spark.read.parquet(target).where("value_parse_error").count() if ddl else None
        _maybe_crash()
        self.commits.commit(r.topic, r.partition, start, r.end, name, unparsable)
        log.info("mirrored %s-%d offsets %d..%d", r.topic, r.partition, start, r.end - 1)
        if unparsable:
            log.warning(
                "%s-%d: %d values did not parse as %s (kept as raw bytes)", r.topic, r.partition, unparsable, ddl
            )
        return r.end - start

    def _remove_uncommitted(self, topic: str, partition: int, committed: int) -> None:
        """Delete what a crash left between a Parquet write and its commit."""
        jvm = self.spark.sparkContext._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.partition_dir(topic, partition))
        fs = path.getFileSystem(self.spark.sparkContext._jsc.hadoopConfiguration())
        if not fs.exists(path):
            return
        for st in fs.listStatus(path):
            parsed = parse_data_name(st.getPath().getName())
            if parsed is not None and parsed[:2] == (topic, partition) and parsed[2] >= committed:
                log.info("removing uncommitted %s", st.getPath().toString())
                fs.delete(st.getPath(), True)


class TableMirror:
    """Writes ranges of segments into a topic's Iceberg or Delta table
    (:mod:`brokkr.plugins.sinks.spark.tables`): Spark's executors decode and shape the rows,
    this driver commits them with the offsets they cover, at most ``flush_records`` offsets
    and ``flush_bytes`` of the log per commit (:func:`hand_overs`: what one commit brings
    into the driver's memory). Where to start comes from the table; the commit log is only
    written after (the broker's view of the progress, for its retention)."""

    def __init__(self, spark: Any, settings: Any, commit_dir: str | Path | None = None):
        from .tables import tables_for

        self.spark = spark
        self.settings = settings
        self.tables = tables_for(settings)
        local = local_path(settings.lake)
        self.commits = (
            CommitLog(default_commit_dir(settings.lake, str(commit_dir) if commit_dir else None))
            if (commit_dir or local is not None)
            else None
        )
        #: Per topic, from the broker's work file: {"mode": ..., "upsert": ...}
        self.topic_settings: dict[str, dict[str, Any]] = {}
        self.seen: set[str] = set()
        self._typers: dict[tuple[str, str], Any] = {}
        self._next_maintenance = time.monotonic() + settings.compact_interval_s

    def configure(self, topic: str, options: Mapping[str, Any]) -> None:
        self.topic_settings[topic] = dict(options)

    def mode(self, topic: str) -> str:
        return self.topic_settings.get(topic, {}).get("mode") or self.settings.mode

    def upsert(self, topic: str) -> bool:
        return bool(self.topic_settings.get(topic, {}).get("upsert", self.settings.upsert))

    def mirror(self, r: Range) -> int:
        committed = self.tables.mirrored_offset(r.topic, r.partition)
        if r.end <= committed:
            self._report(r.topic, r.partition, committed)
            return 0
        start = max(r.start, committed)
        if start > committed:
            log.warning(
                "%s-%d: offsets %d..%d are gone from the log, not mirrored", r.topic, r.partition, committed, start
            )
        self.seen.add(r.topic)
        for lo, hi in hand_overs(r.path, start, r.end, self.settings.flush_records, self.settings.flush_bytes):
            rows, dead = self.rows(r, lo, hi)
            if dead is not None:
                self._dead_letters(r.topic, r.partition, lo, hi, dead)
            written = self.tables.commit(
                r.topic, r.partition, lo, hi, rows, upsert=self.upsert(r.topic), crash=lambda: _maybe_crash()
            )
            self._report(r.topic, r.partition, hi)
            log.info(
                "mirrored %s-%d offsets %d..%d into its %s table (%d rows)",
                r.topic,
                r.partition,
                lo,
                hi - 1,
                self.settings.format,
                written,
            )
        return r.end - start

    def rows(self, r: Range, lo: int, hi: int) -> tuple[Any, Any]:
        """Offsets ``[lo, hi)`` of ``r``'s segment as the table's rows and the dead letters
        (Arrow; None in key_value mode), decoded and shaped by Spark's executors."""
        from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

        from .tables import KAFKA_SQL, KEY_VALUE, decode_batches, key_value_rows, typed_rows

        df = (
            self.spark.read.format("brokkr")
            .option("topic", r.topic)
            .option("startingOffset", str(lo))
            .option("endingOffset", str(hi))
            .load(r.path)
            .selectExpr("key", "value", KAFKA_SQL)
        )
        mode = self.mode(r.topic)
        if mode == KEY_VALUE:
            return key_value_rows(df.toArrow()), None
        typer = self.typer(r.topic, mode)
        extra = [StructField("schema_id", IntegerType()), StructField("reason", StringType())]
        schema = StructType([*df.schema.fields, *extra, StructField("row", BinaryType())])
        decoded = df.mapInArrow(functools.partial(decode_batches, typer), schema).toArrow()
        table = self.tables.schema(r.topic)
        widen = self.settings.format != "delta"  # deltalake keeps a column's type
        return typed_rows(decoded, typer, table, r.topic, tombstones=self.upsert(r.topic), widen=widen)

    def typer(self, topic: str, mode: str) -> Any:
        from .typed import ValueTyper

        if not self.settings.registry_url:
            raise ValueError(
                f"{topic}: the table mode {mode} needs a schema registry (brokkr.sink.schema.registry.url)"
            )
        key = (topic, mode)
        if key not in self._typers:
            self._typers[key] = ValueTyper(self.settings.registry_url, topic, mode)
        return self._typers[key]

    def _dead_letters(self, topic: str, partition: int, lo: int, hi: int, dead: Any) -> None:
        """Commit the records that cannot be rows to ``<topic>_dlq``, with the same offsets
        record (so a replay after a crash adds none twice); before the rows' own commit."""
        import pyarrow.compute as pc

        from .tables import DLQ_SUFFIX

        dlq = topic + DLQ_SUFFIX
        done = self.tables.mirrored_offset(dlq, partition)
        if done >= hi or not len(dead):
            return
        dead = dead.filter(pc.greater_equal(pc.struct_field(dead.column("kafka"), "offset"), done))
        if len(dead):
            self.tables.commit(dlq, partition, max(lo, done), hi, dead)
            log.warning("%s-%d: %d records to %s (offsets %d..%d)", topic, partition, len(dead), dlq, lo, hi - 1)

    def _report(self, topic: str, partition: int, end: int) -> None:
        if self.commits is not None and self.commits.mirrored_offset(topic, partition) != end:
            self.commits.mark(topic, partition, end)

    def tick(self) -> None:
        """Maintenance when due (every ``compact_interval_s``; 0: never): compaction of small
        files, expiry of old snapshots, for the tables this process wrote."""
        from .tables import maintain

        if self.settings.compact_interval_s <= 0 or time.monotonic() < self._next_maintenance:
            return
        maintain(self.tables, sorted(self.seen))
        self._next_maintenance = time.monotonic() + self.settings.compact_interval_s


CORRUPT_COLUMN = "_brokkr_unparsed"


def with_parsed_values(df: Any, ddl: str) -> Any:
    """``df`` plus ``value_parsed`` (the JSON value parsed with the Spark DDL schema ``ddl``)
    and ``value_parse_error`` (true for a value that is not null and does not parse; its
    ``value_parsed`` is null, and ``value`` keeps its bytes as for every record)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType.fromDDL(ddl)
    with_corrupt = StructType([*schema.fields, StructField(CORRUPT_COLUMN, StringType())])
    parsed = F.from_json(
        F.col("value").cast("string"), with_corrupt, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}
    )
    df = df.withColumn("_brokkr_parsed", parsed)
    error = F.col("value").isNotNull() & (
        F.col("_brokkr_parsed").isNull() | F.col(f"_brokkr_parsed.{CORRUPT_COLUMN}").isNotNull()
    )
    fields = [F.col(f"_brokkr_parsed.`{f.name}`").alias(f.name) for f in schema.fields]
    return (
        df.withColumn("value_parse_error", error)
        .withColumn("value_parsed", F.when(~error & F.col("value").isNotNull(), F.struct(*fields)))
        .drop("_brokkr_parsed")
    )


def _maybe_crash() -> None:
    marker = os.environ.get(CRASH_ONCE_ENV)
    if marker and not os.path.exists(marker):
        Path(marker).write_text("crashed after a Parquet write, before its commit\n")
        os._exit(75)


#: Spark's logging from its JVM's start: errors only, so that its warnings stay out of the
#: log of the broker whose standard error the mirror process shares.
LOG4J2_CONF = Path(__file__).with_name("log4j2.properties")
#: A local master's driver, unless configured: it listens on loopback only (its executors
#: are in its own JVM; Spark would otherwise bind every interface).
LOCAL_DRIVER = {"spark.driver.bindAddress": "127.0.0.1", "spark.driver.host": "127.0.0.1"}


def spark_session(master: str, app_name: str, conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession with the brokkr data source registered; workers run this Python.
    Unless ``conf`` says otherwise, a local master's driver listens on 127.0.0.1 only
    (another master's executors must reach it: set ``spark.driver.host`` for them), no
    progress bars are drawn, and Spark logs errors only (``LOG4J2_CONF``)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from brokkr.plugins.sinks.spark import session

    settings = {"spark.ui.showConsoleProgress": "false", **(LOCAL_DRIVER if master.startswith("local") else {})}
    settings.update(conf or {})
    java_options = settings.get("spark.driver.extraJavaOptions", "")
    if "log4j2.configurationFile" not in java_options:
        quiet = f"-Dlog4j2.configurationFile={LOG4J2_CONF.as_uri()}"
        settings["spark.driver.extraJavaOptions"] = f"{quiet} {java_options}".rstrip()
    return session(master=master, app_name=app_name, conf=settings)


# -- brokkr mirror ----------------------------------------------------------------------


@attrs.frozen
class PartitionStatus:
    topic: str
    partition: int
    log_end_offset: int
    mirrored_offset: int

    @property
    def lag(self) -> int:
        return max(self.log_end_offset - self.mirrored_offset, 0)


def status(
    log_dir: str | Path, lake: str, commit_dir: str | None = None, topics: Iterable[str] = (), settings: Any = None
) -> list:
    """Per partition of ``log_dir``: its log end offset, the offset mirrored up to (from the
    commit logs, or from a table's own record with table ``settings``), the lag."""
    if settings is not None:
        from .tables import tables_for

        mirrored = tables_for(settings).mirrored_offset
    else:
        mirrored = CommitLog(default_commit_dir(lake, commit_dir)).mirrored_offset
    out = []
    for (topic, partition), ranges in sorted(log_ranges(log_dir, topics).items()):
        out.append(PartitionStatus(topic, partition, ranges[-1].end, mirrored(topic, partition)))
    return out


def internal(topic: str) -> bool:
    """A broker's own topic by its name (``__consumer_offsets``, ``__transaction_state``,
    ``__share_group_state``, the schema registry's ``_schemas``): a log dir says no more."""
    return topic.startswith("_")


def backfill(
    mirror: Mirror, log_dir: str | Path, topics: Iterable[str] = (), progress: Callable[[int], None] | None = None
) -> Iterator[Range]:
    """Mirror every segment of ``log_dir`` not yet committed; ``progress`` is told the
    bytes of log done after each range (for a progress bar). Yields each range done.
    Into tables, the brokers' own topics (:func:`internal`) only when ``topics`` names them."""
    topics = tuple(topics)
    for (topic, _partition), ranges in sorted(log_ranges(log_dir, topics).items()):
        if isinstance(mirror, TableMirror) and not topics and internal(topic):
            continue
        for r in ranges:
            if r.end > r.start:
                mirror.mirror(r)
            if progress is not None:
                progress(r.size)
            yield r


# -- the sink's mirror process ----------------------------------------------------------


def follow(mirror: Mirror, work_file: Path, poll_s: float, active_interval_s: float, stop: Callable[[], bool]) -> None:
    """Mirror what the broker's work file lists until ``stop()``: closed segments as soon
    as they are listed, the active segment every ``active_interval_s``; both only up to
    the broker's last stable offset (the work file's ``high_watermark``), so no record of an
    open transaction is mirrored, and those of aborted ones are dropped by the data
    source's read_committed default."""
    last_active: dict[tuple[str, int], float] = {}
    while not stop():
        try:
            work = json.loads(work_file.read_text())
        except (FileNotFoundError, ValueError):
            work = {"partitions": []}
        for p in work["partitions"]:
            topic, partition = p["topic"], p["partition"]
            if "table" in p and hasattr(mirror, "configure"):
                mirror.configure(topic, p["table"])
            hw = p["high_watermark"]  # the broker's last stable offset: never mirror past it
            for base, end, path in p["closed"]:
                if stop():
                    return
                if min(end, hw) > base:
                    mirror.mirror(Range(topic, partition, base, min(end, hw), path))
            active = p.get("active")
            now = time.monotonic()
            if active and now - last_active.get((topic, partition), 0.0) >= active_interval_s:
                last_active[(topic, partition)] = now
                base, path = active
                if hw > base and not stop():
                    mirror.mirror(Range(topic, partition, base, hw, path))
        if hasattr(mirror, "tick") and not stop():
            mirror.tick()
        deadline = time.monotonic() + poll_s
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.05)


#: The Iceberg catalog's properties as a JSON object, from the sink (they may hold credentials).
CATALOG_ENV = "BROKKR_MIRROR_ICEBERG_CATALOG"


def add_table_options(parser: argparse.ArgumentParser) -> None:
    """The table settings (``brokkr.sink.format``, ``brokkr.sink.table.*``, ``brokkr.sink.iceberg.*``)
    as options of the mirror process and of ``brokkr mirror``."""
    from .tables import FORMATS, KEY_VALUE, MODES, TableSettings

    d = TableSettings()
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="parquet (default), iceberg or delta")
    parser.add_argument(
        "--table-mode", choices=MODES, default=KEY_VALUE, help="the rows of a table (default key_value)"
    )
    parser.add_argument("--upsert", action="store_true", help="tables hold the latest row per key")
    parser.add_argument("--partition-spec", help="the tables' partition spec, e.g. day(timestamp)")
    parser.add_argument(
        "--iceberg-catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property; repeatable (default: SQLite under the lake)",
    )
    parser.add_argument("--iceberg-namespace", default=d.namespace)
    parser.add_argument("--flush-records", type=int, default=d.flush_records, help="the most offsets per table commit")
    parser.add_argument(
        "--flush-bytes", type=int, default=d.flush_bytes, help="the most bytes of the log per table commit"
    )
    parser.add_argument("--compact-interval-ms", type=int, default=int(d.compact_interval_s * 1000))
    parser.add_argument("--compact-min-files", type=int, default=d.compact_min_files)
    parser.add_argument("--target-file-bytes", type=int, default=d.target_file_bytes)
    parser.add_argument("--snapshot-retention-ms", type=int, default=int(d.snapshot_retention_s * 1000))
    parser.add_argument("--registry-url", help="the schema registry of the typed modes")


def table_settings(args: argparse.Namespace, lake: str) -> Any:
    """The TableSettings of parsed options (None for the parquet format); ValueError when invalid."""
    from .tables import TableSettings

    if args.format == "parquet":
        return None
    catalog = {**json.loads(os.environ.get(CATALOG_ENV) or "{}"), **dict(i.split("=", 1) for i in args.iceberg_catalog)}
    settings = TableSettings(
        format=args.format,
        lake=lake,
        mode=args.table_mode,
        upsert=args.upsert,
        partition=args.partition_spec,
        catalog=catalog,
        namespace=args.iceberg_namespace,
        flush_records=args.flush_records,
        flush_bytes=args.flush_bytes,
        compact_interval_s=args.compact_interval_ms / 1000,
        compact_min_files=args.compact_min_files,
        target_file_bytes=args.target_file_bytes,
        snapshot_retention_s=args.snapshot_retention_ms / 1000,
        registry_url=args.registry_url,
    )
    try:
        settings.check()
    except ValueError as exc:
        from brokkr.core.errors import ConfigError

        raise ConfigError(str(exc)) from None
    return settings


def _die_with_parent() -> None:
    """Killed (SIGKILL) as soon as the broker that started this process dies, even of a
    SIGKILL: an orphan would go on writing the tables beside the restarted broker's own
    mirror. Linux only (prctl); elsewhere the work file's owner stopping is what ends it."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl
        os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the Spark sink's mirror process")
    parser.add_argument("--work", required=True, help="the work file the broker keeps")
    parser.add_argument("--lake", required=True)
    parser.add_argument("--commit-dir")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--app-name", default="brokkr-mirror")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--poll-ms", type=int, default=1000)
    parser.add_argument("--active-interval-ms", type=int, default=60000)
    parser.add_argument("--value-schema", action="append", default=[], metavar="TOPIC=DDL")
    add_table_options(parser)
    args = parser.parse_args(argv)
    settings = table_settings(args, args.lake)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # PySpark's own (e.g. a pandas it has not been tested with): not the broker's log's business
    warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")
    _die_with_parent()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    conf = {**json.loads(os.environ.get(CONF_ENV) or "{}"), **dict(item.split("=", 1) for item in args.conf)}
    spark = spark_session(args.master, args.app_name, conf)
    log.info(
        "mirror process: Spark %s, master %s, driver on %s",
        spark.version,
        args.master,
        spark.conf.get("spark.driver.host"),
    )
    try:
        schemas = dict(item.split("=", 1) for item in args.value_schema)
        if settings is not None:
            mirror: Any = TableMirror(spark, settings, args.commit_dir)
        else:
            mirror = Mirror(spark, args.lake, args.commit_dir, schemas)
        follow(mirror, Path(args.work), args.poll_ms / 1000, args.active_interval_ms / 1000, lambda: bool(stopping))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
