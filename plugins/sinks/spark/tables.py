"""Topics as lake tables: Iceberg (pyiceberg) and Delta Lake (deltalake), one table per topic.

Spark's executors decode the segments (the ``brokkr`` data source) and shape the rows; the
driver (the mirror process) commits them to the topic's table, and each commit records in
the table itself the offsets it covers, per partition:

- Iceberg: every snapshot's summary carries ``brokkr.mirrored-offset.<partition>`` (the
  offset mirrored up to, exclusive) for every partition mirrored so far, carried forward
  from the snapshot before, and ``brokkr.range.<partition>`` (``first-last``) for the one
  it adds. Data files are written inside a table transaction and become visible only with
  its commit.
- Delta: every commit carries an application transaction (``txn`` action) with the app id
  ``<topic>-<partition>`` and the version ``offset mirrored up to``.

A restart asks the table (:meth:`Tables.mirrored_offset`), never brokkr's commit logs, so a
kill between writing files and committing them leaves unreferenced files and no duplicate.

Rows (``brokkr.sink.table.mode``, Redpanda's names)::

    key_value                key binary, value binary, kafka struct
    value_schema_id_prefix   the value's fields (typed from its registered schema id), kafka struct
    value_schema_latest      the value's fields (the subject's latest schema), kafka struct

    kafka  struct<partition int, offset long, timestamp timestamp (UTC), timestamp_type int,
                  headers array<struct<key string, value binary>>, producer_id long>

Records the typed modes cannot decode go to the table ``<topic>_dlq`` (key, value, reason,
kafka). A value schema with a top-level field named ``key`` or ``kafka`` (the table's own
columns) is refused for the table like an incompatible one: an error is logged and its
records go to ``<topic>_dlq``, none renamed or dropped.

Upsert tables (compacted topics, ``brokkr.sink.table.upsert``) hold the latest row per key
(the record of the highest offset); a tombstone deletes the key's row (typed rows too), a
record without a key is not kept. Every commit first reads the table's record on the
snapshot it builds on and adds only offsets past it (a replayed range adds nothing); a
commit that loses a race with another writer fails (pyiceberg's commit retries are turned
off on the tables, they would re-apply the files with a stale record) and the mirror starts
over from what the table says. Delta keeps a column's type: a schema that widens one is
refused for a Delta table (its records are dead letters), Iceberg widens the column.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger("brokkr.sink.spark")

FORMATS = ("parquet", "iceberg", "delta")
TABLE_FORMATS = ("iceberg", "delta")
KEY_VALUE = "key_value"
TYPED_MODES = ("value_schema_id_prefix", "value_schema_latest")
MODES = (KEY_VALUE, *TYPED_MODES)
#: What each format needs installed (module, pip extra).
NEEDS = {"iceberg": ("pyiceberg", "sqlalchemy"), "delta": ("deltalake",)}
#: What the typed modes need installed: the schema registry's formats (the lake extra has them).
TYPED_NEEDS = ("fastavro", "jsonschema", "google.protobuf")
#: Iceberg snapshot summary keys of the offsets recorded in the table.
MIRRORED_KEY = "brokkr.mirrored-offset."
RANGE_KEY = "brokkr.range."
#: The default Iceberg catalog's SQLite file, under a local lake.
CATALOG_FILE = "_brokkr_iceberg.db"
DLQ_SUFFIX = "_dlq"
#: Typed upsert rows: true for a tombstone (its value columns null); never a table's column.
TOMBSTONE = "_brokkr_tombstone"
#: The columns a typed table has besides the value's fields: a value field may not be one.
RESERVED = ("key", "kafka", TOMBSTONE)

HEADERS = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
KAFKA = pa.struct(
    [
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestamp_type", pa.int32()),
        pa.field("headers", HEADERS),
        pa.field("producer_id", pa.int64()),
    ]
)
KEY_VALUE_SCHEMA = pa.schema([pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("kafka", KAFKA)])
#: The Spark SQL that shapes the ``brokkr`` data source's rows into the ``kafka`` struct.
KAFKA_SQL = (
    "named_struct('partition', partition, 'offset', offset, 'timestamp', timestamp, "
    "'timestamp_type', timestampType, 'headers', headers, 'producer_id', producerId) AS kafka"
)


# -- settings -----------------------------------------------------------------------------

TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_SPEC_ITEM = re.compile(r"^\s*(?:(?P<t>[a-z]+)\s*\(\s*(?:(?P<n>\d+)\s*,\s*)?(?P<c>[\w.]+)\s*\)|(?P<bare>[\w.]+))\s*$")


@attrs.frozen
class PartitionField:
    transform: str  # one of TRANSFORMS
    source: str  # a column, "kafka.<field>" for the kafka struct's
    width: int | None = None  # bucket's count, truncate's width

    @property
    def name(self) -> str:
        """The partition field's name (Iceberg) or the derived column's (Delta)."""
        base = self.source.replace(".", "_")
        return base if self.transform == "identity" else f"{base}_{self.transform}"


def parse_partition_spec(spec: str | None, columns: Iterable[str] | None = ("key", "value")) -> list[PartitionField]:
    """``day(timestamp), identity(kafka.partition), bucket(16, key)``: a column of the table
    or a field of its ``kafka`` struct (found there when the table has no such column).
    ``columns`` None: the table's columns are not known yet (the typed modes' come from
    the value's schema), so any column name is taken."""
    fields: list[PartitionField] = []
    if not spec or not spec.strip():
        return fields
    known, kafka = set(columns) if columns is not None else None, {f.name for f in KAFKA}
    for item in _split_spec(spec):
        m = _SPEC_ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"{item!r} is not a partition transform such as day(timestamp) or bucket(16, key)")
        transform, column = (m["t"] or "identity"), (m["c"] or m["bare"])
        if transform not in TRANSFORMS:
            raise ValueError(f"{transform!r} is not a partition transform ({', '.join(TRANSFORMS)})")
        width = int(m["n"]) if m["n"] else None
        if (transform in ("bucket", "truncate")) != (width is not None):
            raise ValueError(f"{item!r}: bucket and truncate take a number first, the others none")
        if (known is None or column not in known) and not column.startswith("kafka."):
            if column in kafka:
                column = f"kafka.{column}"
            elif known is not None:
                raise ValueError(f"{item!r}: no column {column!r} (key, value, kafka.<{', '.join(sorted(kafka))}>)")
        if column.startswith("kafka.") and column[len("kafka.") :] not in kafka:
            raise ValueError(f"{item!r}: the kafka struct has no field {column[len('kafka.') :]!r}")
        fields.append(PartitionField(transform, column, width))
    return fields


def _split_spec(spec: str) -> list[str]:
    items, depth, current = [], 0, ""
    for ch in spec:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [*items, current]


@attrs.frozen
class TableSettings:
    """What the mirror needs to write tables (the ``brokkr.sink.*`` settings)."""

    format: str = "iceberg"
    lake: str = ""
    mode: str = KEY_VALUE
    upsert: bool = False
    partition: str | None = None
    catalog: Mapping[str, str] = attrs.field(factory=dict)
    namespace: str = "brokkr"
    flush_records: int = 500_000
    flush_bytes: int = 50 * 1024 * 1024
    compact_interval_s: float = 3600.0
    compact_min_files: int = 8
    target_file_bytes: int = 128 * 1024 * 1024
    snapshot_retention_s: float = 7 * 24 * 3600.0
    registry_url: str | None = None

    def check(self) -> None:
        """ValueError saying what is wrong (a missing package included)."""
        if self.format not in TABLE_FORMATS:
            raise ValueError(f"brokkr.sink.format {self.format!r} is not one of {', '.join(FORMATS)}")
        for module in NEEDS[self.format]:
            if not installed(module):
                raise ValueError(f"brokkr.sink.format={self.format} needs {module}: pip install 'brokkr[lake]'")
        if self.mode not in MODES:
            raise ValueError(f"brokkr.sink.table.mode {self.mode!r} is not one of {', '.join(MODES)}")
        if (module := missing_for(self.mode)) is not None:
            raise ValueError(f"brokkr.sink.table.mode={self.mode} needs {module}: pip install 'brokkr[lake]'")
        fields = parse_partition_spec(self.partition, self.columns())
        if self.format == "delta" and any(f.transform in ("bucket", "truncate") for f in fields):
            raise ValueError(
                "brokkr.sink.table.partition: bucket and truncate are Iceberg's; Delta takes identity, "
                "year, month, day and hour"
            )
        if fields and self.format == "iceberg" and not installed("pyiceberg_core"):
            raise ValueError("brokkr.sink.table.partition needs pyiceberg-core: pip install 'brokkr[lake]'")
        if self.format == "iceberg" and "uri" not in self.catalog and _local(self.lake) is None:
            raise ValueError(
                f"the lake {self.lake} is not local: give an Iceberg catalog (brokkr.sink.iceberg.catalog.uri ...)"
            )
        for name, value, least in (
            ("brokkr.sink.table.flush.records", self.flush_records, 1),
            ("brokkr.sink.table.flush.bytes", self.flush_bytes, 1),
            ("brokkr.sink.table.compact.min.files", self.compact_min_files, 1),
            ("brokkr.sink.table.target.file.bytes", self.target_file_bytes, 1),
            ("brokkr.sink.table.compact.interval.ms", self.compact_interval_s * 1000, 0),
            ("brokkr.sink.table.snapshot.retention.ms", self.snapshot_retention_s * 1000, 0),
        ):
            if value < least:
                raise ValueError(f"{name} must be {'positive' if least else 'zero or more'}, not {value:g}")
        if self.format == "iceberg" and ("type" in self.catalog or "uri" in self.catalog):
            from pyiceberg.catalog import CatalogType, infer_catalog_type

            kinds = [c.value for c in CatalogType]
            kind = self.catalog.get("type")
            if kind is not None and kind.lower() not in kinds:
                raise ValueError(f"brokkr.sink.iceberg.catalog.type {kind!r} is not one of {', '.join(kinds)}")
            if kind is None:
                try:
                    infer_catalog_type("brokkr", dict(self.catalog))
                except ValueError as exc:
                    raise ValueError(f"brokkr.sink.iceberg.catalog.uri: {exc} (or give catalog.type)") from None

    def columns(self) -> tuple[str, ...] | None:
        """The tables' columns a partition spec may name (None: the value's, not known yet)."""
        return ("key", "value") if self.mode == KEY_VALUE else None

    def catalog_properties(self) -> dict[str, str]:
        """pyiceberg's catalog properties: the given ones over the default SQL catalog in a
        SQLite file under the (local) lake, its warehouse the lake."""
        props = dict(self.catalog)
        if "uri" not in props and "type" not in props:
            local = _local(self.lake)
            assert local is not None
            props = {"type": "sql", "uri": f"sqlite:///{local / CATALOG_FILE}", **props}
        if "warehouse" not in props and (local := _local(self.lake)) is not None:
            props["warehouse"] = local.absolute().as_uri()
        elif "warehouse" not in props:
            props["warehouse"] = self.lake
        return props


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (a dotted name's parent package is imported to tell)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def missing_for(mode: str) -> str | None:
    """The first package the table mode ``mode`` needs that is not installed (None: none)."""
    return next((m for m in TYPED_NEEDS if not installed(m)), None) if mode in TYPED_MODES else None


def _local(uri: str) -> Path | None:
    from .mirror import local_path

    return local_path(uri) if uri else None


# -- rows -----------------------------------------------------------------------------------


def key_value_rows(table: pa.Table) -> pa.Table:
    """Rows as Spark handed them over (``key``, ``value``, ``kafka``) in :data:`KEY_VALUE_SCHEMA`."""
    return table.select(["key", "value", "kafka"]).cast(KEY_VALUE_SCHEMA)


def decode_batches(typer: Any, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """On an executor (``mapInArrow``): each row's value decoded by ``typer``
    (:class:`~brokkr.plugins.sinks.spark.typed.ValueTyper`), added as ``schema_id``,
    ``reason`` (why it goes to the dead-letter table) and ``row`` (the decoded fields, pickled:
    their columns are known only on the driver, per schema id)."""
    import pickle

    for batch in batches:
        ids, reasons, rows = [], [], []
        for value in batch.column("value").to_pylist():
            row, schema_id, reason = typer.decode(value)
            ids.append(schema_id)
            reasons.append(reason)
            rows.append(None if row is None else pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL))
        yield pa.RecordBatch.from_arrays(
            [*batch.columns, pa.array(ids, pa.int32()), pa.array(reasons, pa.string()), pa.array(rows, pa.binary())],
            names=[*batch.schema.names, "schema_id", "reason", "row"],
        )


def typed_rows(
    decoded: pa.Table,
    typer: Any,
    table_schema: pa.Schema | None,
    topic: str,
    tombstones: bool = False,
    widen: bool = True,
) -> tuple[pa.Table, pa.Table]:
    """(the table's rows: ``key``, the value's columns, ``kafka``; the dead-letter rows: key,
    value, reason, ``kafka``) from :func:`decode_batches`' output. The rows' columns are the
    table's evolved (:func:`~brokkr.plugins.sinks.spark.typed.evolve`) by each schema id's
    in turn; the records of a schema id the table cannot evolve to are dead letters, with why.
    With ``tombstones`` (an upsert table) a record with a key and a null value is a row, its
    value columns null and :data:`TOMBSTONE` true (the rows then have that column). Without
    ``widen`` (a Delta table) a schema that widens a column's type is refused too."""
    import pickle

    from .typed import DLQ_SCHEMA, IncompatibleSchema, evolve

    kafka = decoded.column("kafka").cast(KAFKA)
    ids, reasons = decoded.column("schema_id").to_pylist(), decoded.column("reason").to_pylist()
    groups: dict[int, list[int]] = {}
    dead: list[tuple[int, str]] = []
    tombs: list[int] = []
    deletes = pc.and_(pc.is_null(decoded.column("value")), pc.is_valid(decoded.column("key"))).to_pylist()
    for i, (schema_id, reason) in enumerate(zip(ids, reasons)):
        if tombstones and deletes[i]:
            tombs.append(i)
        elif reason is not None:
            dead.append((i, reason))
        else:
            groups.setdefault(schema_id, []).append(i)
    values = None if table_schema is None else pa.schema([f for f in table_schema if f.name not in ("key", "kafka")])
    parts = []
    for schema_id, rows in sorted(groups.items()):
        try:
            columns = typer.arrow_schema(schema_id)
            taken = [n for n in columns.names if n in RESERVED]
            if taken:
                raise IncompatibleSchema(
                    f"its field {taken[0]!r} has the name of the table's own {taken[0]} column "
                    "(rename the field, or use the key_value mode)"
                )
            merged = columns if values is None else evolve(values, columns, widen)
        except IncompatibleSchema as exc:
            log.error(
                "%s: schema id %d cannot be the table's: %s (its records go to %s%s)",
                topic,
                schema_id,
                exc,
                topic,
                DLQ_SUFFIX,
            )
            dead += [(i, f"schema id {schema_id} cannot be the table's: {exc}") for i in rows]
            continue
        values = merged
        row_data = decoded.column("row").take(pa.array(rows, pa.int64())).to_pylist()
        part = pa.Table.from_pylist([pickle.loads(r) for r in row_data], schema=columns)
        take = pa.array(rows, pa.int64())
        parts.append((part, decoded.column("key").take(take), kafka.take(take)))
    values = values if values is not None else pa.schema([])
    schema = pa.schema([pa.field("key", pa.binary()), *values, pa.field("kafka", KAFKA)])
    tables = []
    for part, keys, kafkas in parts:
        columns = [keys]
        for field in values:
            if field.name in part.column_names:
                columns.append(part.column(field.name).cast(field.type))
            else:
                columns.append(pa.nulls(len(part), field.type))
        tables.append(pa.Table.from_arrays([*columns, kafkas], schema=schema))
    good = pa.concat_tables(tables) if tables else schema.empty_table()
    if tombstones:
        take = pa.array(tombs, pa.int64())
        dropped = pa.Table.from_arrays(
            [decoded.column("key").take(take), *(pa.nulls(len(tombs), f.type) for f in values), kafka.take(take)],
            schema=schema,
        )
        good = pa.concat_tables([good, dropped])
        good = good.append_column(TOMBSTONE, pa.array([False] * (len(good) - len(tombs)) + [True] * len(tombs)))
    dead.sort()
    take = pa.array([i for i, _ in dead], pa.int64())
    dlq = pa.Table.from_arrays(
        [
            decoded.column("key").take(take),
            decoded.column("value").take(take),
            pa.array([r for _, r in dead], pa.string()),
            kafka.take(take),
        ],
        schema=pa.schema([*DLQ_SCHEMA, pa.field("kafka", KAFKA)]),
    )
    return good, dlq


def latest_per_key(rows: pa.Table) -> tuple[pa.Table, list[bytes], int]:
    """For an upsert: the last row of each key (by offset, whatever the rows' order), the
    keys whose last record is a tombstone (a null ``value``, or :data:`TOMBSTONE` where the
    rows have it: typed rows), and how many rows had no key (not kept: a compacted topic
    has none). The rows come back without :data:`TOMBSTONE`."""
    keys = rows.column("key").to_pylist()
    offsets = pc.struct_field(rows.column("kafka"), "offset").to_pylist()
    if TOMBSTONE in rows.column_names:
        dropped = rows.column(TOMBSTONE).fill_null(False).to_pylist()
        rows = rows.drop_columns([TOMBSTONE])
    else:
        dropped = pc.is_null(rows.column("value")).to_pylist()
    last: dict[bytes, int] = {}
    no_key = 0
    for i, k in enumerate(keys):
        if k is None:
            no_key += 1
        elif k not in last or offsets[i] > offsets[last[k]]:
            last[k] = i
    live = [i for k, i in last.items() if not dropped[i]]
    deleted = [k for k, i in last.items() if dropped[i]]
    return rows.take(pa.array(sorted(live), pa.int64())), deleted, no_key


def not_yet_mirrored(rows: pa.Table, first: int, end: int, done: int) -> tuple[pa.Table, int] | None:
    """The rows of ``[first, end)`` the table does not hold yet, given that it records
    ``done`` as mirrored (``(rows, first)`` trimmed; None: nothing is left). A replayed range,
    or another mirror that committed it meanwhile, never adds an offset twice."""
    if done >= end:
        return None
    if done > first:
        rows = rows.filter(pc.greater_equal(pc.struct_field(rows.column("kafka"), "offset"), done))
        first = done
    return rows, first


def with_partition_columns(rows: pa.Table, fields: list[PartitionField]) -> pa.Table:
    """Delta's partition columns, derived from the rows (Iceberg derives its own)."""
    for f in fields:
        if f.name in rows.column_names:  # identity of a column: the column itself
            continue
        source = rows.column(f.source) if "." not in f.source else _nested(rows, f.source)
        if f.transform == "identity":
            column = source
        elif f.transform == "year":
            column = pc.year(source).cast(pa.int32())
        elif f.transform == "month":
            column = pc.strftime(source, "%Y-%m")
        elif f.transform == "day":
            column = source.cast(pa.timestamp("us", tz="UTC")).cast(pa.date32())
        else:  # hour
            column = pc.strftime(source, "%Y-%m-%d-%H")
        rows = rows.append_column(f.name, column)
    return rows


def _nested(rows: pa.Table, path: str) -> pa.ChunkedArray:
    first, *rest = path.split(".")
    column = rows.column(first)
    for name in rest:
        column = pc.struct_field(column, name)
    return column


# -- the tables -------------------------------------------------------------------------------


class Tables:
    """One format's tables: the offsets each records, commits, maintenance, reading."""

    def __init__(self, settings: TableSettings):
        self.settings = settings
        self.partition_fields = parse_partition_spec(settings.partition, settings.columns())

    def mirrored_offset(self, topic: str, partition: int) -> int:
        """The offset the table says ``topic``'s partition is mirrored up to (0: none)."""
        raise NotImplementedError

    def commit(
        self, topic: str, partition: int, first: int, end: int, rows: pa.Table, upsert: bool = False, crash=None
    ) -> int:
        """Add ``rows`` (offsets ``[first, end)`` of the partition, as far as they exist)
        and record ``end``, in one commit; return the rows written."""
        raise NotImplementedError

    def read(self, topic: str) -> pa.Table:
        raise NotImplementedError

    def schema(self, topic: str) -> pa.Schema | None:
        """The table's columns as Arrow (None: no table yet)."""
        raise NotImplementedError

    def data_files(self, topic: str) -> list[str]:
        raise NotImplementedError

    def compact(self, topic: str) -> int:
        """Rewrite the small files of ``topic``'s table (fewer than compact_min_files: nothing);
        return how many files were replaced."""
        raise NotImplementedError

    def expire(self, topic: str) -> None:
        raise NotImplementedError

    def topics(self) -> list[str]:
        raise NotImplementedError


def tables_for(settings: TableSettings) -> Tables:
    return IcebergTables(settings) if settings.format == "iceberg" else DeltaTables(settings)


#: pyiceberg retries a commit that lost a race by re-applying its files on the winner's
#: snapshot, with the summary (the offsets record) it computed before: a second copy of the
#: rows, or an older record. Off: a conflict fails the commit, and the mirror starts over
#: from what the table then says.
NO_RETRIES = {"commit.retry.num-retries": "0"}


def _no_blind_retries(table: Any) -> Any:
    if table.metadata.properties.get("commit.retry.num-retries") != "0":
        table = table.transaction().set_properties(NO_RETRIES).commit_transaction()
    return table


class IcebergTables(Tables):
    def __init__(self, settings: TableSettings):
        super().__init__(settings)
        from pyiceberg.catalog import load_catalog

        if "uri" not in settings.catalog and (local := _local(settings.lake)) is not None:
            local.mkdir(parents=True, exist_ok=True)  # the default catalog's SQLite file is there
        self.catalog = load_catalog("brokkr", **settings.catalog_properties())
        self.catalog.create_namespace_if_not_exists(settings.namespace)

    def identifier(self, topic: str) -> str:
        return f"{self.settings.namespace}.{topic}"

    def table(self, topic: str, schema: pa.Schema | None = None) -> Any:
        """The topic's table; created with ``schema`` (and the partition spec) when missing."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return _no_blind_retries(self.catalog.load_table(self.identifier(topic)))
        except NoSuchTableError:
            if schema is None:
                return None
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            table = self.catalog.create_table(self.identifier(topic), schema=schema, properties=NO_RETRIES)
        except TableAlreadyExistsError:
            return _no_blind_retries(self.catalog.load_table(self.identifier(topic)))
        if self.partition_fields:
            from pyiceberg import transforms as T

            with table.update_spec() as spec:
                for f in self.partition_fields:
                    transform = {
                        "identity": T.IdentityTransform(),
                        "year": T.YearTransform(),
                        "month": T.MonthTransform(),
                        "day": T.DayTransform(),
                        "hour": T.HourTransform(),
                        "bucket": T.BucketTransform(f.width or 1),
                        "truncate": T.TruncateTransform(f.width or 1),
                    }[f.transform]
                    spec.add_field(f.source, transform, f.name)
            table = self.catalog.load_table(self.identifier(topic))
        return table

    @staticmethod
    def _recorded(table: Any) -> dict[str, str]:
        snapshot = table.current_snapshot() if table is not None else None
        if snapshot is None:
            return {}
        return {k: v for k, v in snapshot.summary.additional_properties.items() if k.startswith(MIRRORED_KEY)}

    def mirrored_offset(self, topic: str, partition: int) -> int:
        return int(self._recorded(self.table(topic)).get(f"{MIRRORED_KEY}{partition}", 0))

    def commit(self, topic, partition, first, end, rows, upsert=False, crash=None):
        from pyiceberg.expressions import In

        columns = pa.schema([f for f in rows.schema if f.name != TOMBSTONE])
        table = self.table(topic, columns)
        table = self._evolve(table, columns)
        # the record this commit builds on: a concurrent commit fails it (CommitFailedException)
        recorded = self._recorded(table)
        left = not_yet_mirrored(rows, first, end, int(recorded.get(f"{MIRRORED_KEY}{partition}", 0)))
        if left is None:
            return 0
        rows, first = left
        properties = {**recorded, f"{MIRRORED_KEY}{partition}": str(end)}
        properties[f"{RANGE_KEY}{partition}"] = f"{first}-{end - 1}"
        deleted: list[bytes] = []
        if upsert:
            rows, deleted, _ = latest_per_key(rows)
        rows = rows.select(columns.names)
        with table.transaction() as tx:
            if upsert:
                keys = [*deleted, *rows.column("key").to_pylist()]
                if keys:
                    tx.delete(In("key", keys), snapshot_properties=properties)
            tx.append(rows, snapshot_properties=properties)
            if crash is not None:
                crash()  # the data files are written; the commit is this block's end
        return len(rows)

    def _evolve(self, table: Any, schema: pa.Schema) -> Any:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        current = schema_to_pyarrow(table.schema(), include_field_ids=False)
        if set(schema.names) <= set(current.names) and all(
            current.field(n).type == schema.field(n).type for n in schema.names
        ):
            return table
        with table.update_schema() as update:
            update.union_by_name(schema)
        return self.catalog.load_table(self.identifier(table.name()[-1]))

    def read(self, topic: str) -> pa.Table:
        table = self.table(topic)
        return table.scan().to_arrow() if table is not None else KEY_VALUE_SCHEMA.empty_table()

    def schema(self, topic: str) -> pa.Schema | None:
        from pyiceberg.io.pyarrow import schema_to_pyarrow

        table = self.table(topic)
        return None if table is None else _small(schema_to_pyarrow(table.schema(), include_field_ids=False))

    def data_files(self, topic: str) -> list[str]:
        table = self.table(topic)
        if table is None or table.current_snapshot() is None:
            return []
        return [task.file.file_path for task in table.scan().plan_files()]

    def compact(self, topic: str) -> int:
        """Rewrite one round's small files (:func:`one_round`) into new ones, in one overwrite
        snapshot that carries the recorded offsets forward (pyiceberg has no rewrite action)."""
        from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

        table = self.table(topic)
        if table is None or table.current_snapshot() is None:
            return 0
        scan = table.scan()
        small = one_round(
            self.settings,
            [t.file for t in scan.plan_files()],
            lambda f: f.file_size_in_bytes,
            lambda f: str(f.partition),
        )
        if not small:
            return 0
        wanted = {f.file_path for f in small}
        tasks = [t for t in scan.plan_files() if t.file.file_path in wanted]
        rows = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter).to_table(tasks)
        properties = self._recorded(table)
        with table.transaction() as tx:
            with tx.update_snapshot(snapshot_properties=properties).overwrite() as rewrite:
                for f in small:
                    rewrite.delete_data_file(f)
                for f in _dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io):
                    rewrite.append_data_file(f)
        log.info("compacted %d files of the Iceberg table %s", len(small), self.identifier(topic))
        return len(small)

    def expire(self, topic: str) -> None:
        table = self.table(topic)
        if table is None or table.current_snapshot() is None:
            return
        cutoff = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=self.settings.snapshot_retention_s)
        old = [s.snapshot_id for s in table.snapshots() if s.timestamp_ms < cutoff.timestamp() * 1000]
        old = [s for s in old if s != table.current_snapshot().snapshot_id]
        if old:
            table.maintenance.expire_snapshots().by_ids(old).commit()
            log.info("expired %d snapshots of the Iceberg table %s", len(old), self.identifier(topic))

    def topics(self) -> list[str]:
        return sorted(name[-1] for name in self.catalog.list_tables(self.settings.namespace))


class DeltaTables(Tables):
    def uri(self, topic: str) -> str:
        return f"{self.settings.lake.rstrip('/')}/{topic}"

    def table(self, topic: str) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.uri(topic))
        except TableNotFoundError:
            return None

    def mirrored_offset(self, topic: str, partition: int) -> int:
        table = self.table(topic)
        version = table.transaction_version(f"{topic}-{partition}") if table is not None else None
        return version or 0

    def commit(self, topic, partition, first, end, rows, upsert=False, crash=None):
        from deltalake import CommitProperties, Transaction, write_deltalake

        done = CommitProperties(app_transactions=[Transaction(f"{topic}-{partition}", end)])
        partition_by = [f.name for f in self.partition_fields] or None
        # the version this commit builds on: a concurrent commit of the partition fails it
        table = self.table(topic)
        recorded = (table.transaction_version(f"{topic}-{partition}") or 0) if table is not None else 0
        left = not_yet_mirrored(rows, first, end, recorded)
        if left is None:
            return 0
        rows, first = left
        rows = with_partition_columns(rows, self.partition_fields)
        if crash is not None:
            crash()
        if not upsert:
            if TOMBSTONE in rows.column_names:
                rows = rows.drop_columns([TOMBSTONE])
            write_deltalake(
                table if table is not None else self.uri(topic),
                rows,
                mode="append",
                partition_by=partition_by,
                commit_properties=done,
                schema_mode="merge",
            )
            return len(rows)
        latest, deleted, _ = latest_per_key(rows)
        if table is None:
            write_deltalake(self.uri(topic), latest.schema.empty_table(), mode="append", partition_by=partition_by)
            table = self.table(topic)
        gone = _tombstones(rows.select(latest.column_names), deleted)
        source = pa.concat_tables([latest, gone]).append_column(
            TOMBSTONE, pa.array([False] * len(latest) + [True] * len(gone))
        )
        (
            table.merge(
                source,
                predicate="t.key = s.key",
                source_alias="s",
                target_alias="t",
                commit_properties=done,
                merge_schema=True,
            )
            .when_matched_delete(predicate=f"s.{TOMBSTONE}")
            .when_matched_update_all(predicate=f"NOT s.{TOMBSTONE}", except_cols=[TOMBSTONE])
            .when_not_matched_insert_all(predicate=f"NOT s.{TOMBSTONE}", except_cols=[TOMBSTONE])
            .execute()
        )
        return len(latest)

    def read(self, topic: str) -> pa.Table:
        table = self.table(topic)
        return table.to_pyarrow_table() if table is not None else KEY_VALUE_SCHEMA.empty_table()

    def schema(self, topic: str) -> pa.Schema | None:
        table = self.table(topic)
        return None if table is None else pa.schema(table.schema().to_arrow())

    def data_files(self, topic: str) -> list[str]:
        table = self.table(topic)
        return table.file_uris() if table is not None else []

    def compact(self, topic: str) -> int:
        """Rewrite one round's small files (:func:`one_round`, all of one table partition)
        into one new file, in one commit that removes them (``dataChange`` false: the rows are the
        same). deltalake's ``optimize.compact`` would rewrite every small file of the table
        at once, however many. A table with deletion vectors or a column mapping (brokkr
        makes neither) is not compacted: its files are not plain Parquet of its columns."""
        import json
        import time
        import uuid

        import pyarrow.parquet as pq
        from deltalake.transaction import AddAction, RemoveAction

        table = self.table(topic)
        if table is None:
            return 0
        features = table.protocol().writer_features or []
        if (
            "deletionVectors" in features
            or table.metadata().configuration.get("delta.columnMapping.mode", "none") != "none"
        ):
            log.warning("the Delta table %s has deletion vectors or a column mapping: not compacted", self.uri(topic))
            return 0
        small = one_round(
            self.settings,
            _add_actions(table),
            lambda a: a["size_bytes"],
            lambda a: json.dumps(a["partition"], default=str),
        )
        if not small:
            return 0
        fs, root = _filesystem(self.uri(topic))
        columns = pa.schema(table.schema().to_arrow())
        partition_by = table.metadata().partition_columns
        in_files = pa.schema([f for f in columns if f.name not in partition_by])  # partition values: in the log
        parts = [pq.read_table(f"{root}/{_unquote(a['path'])}", filesystem=fs) for a in small]
        rows = _conform(pa.concat_tables(parts, promote_options="permissive"), in_files)
        directory = small[0]["path"].rpartition("/")[0]  # the partition's own directory (as the log spells it)
        path = f"{directory}/" * bool(directory) + f"part-compacted-{uuid.uuid4()}.zstd.parquet"
        pq.write_table(rows, f"{root}/{_unquote(path)}", filesystem=fs, compression="zstd")
        size = fs.get_file_info(f"{root}/{_unquote(path)}").size
        values = {k: _partition_value(v) for k, v in (small[0]["partition"] or {}).items()}
        now = int(time.time() * 1000)
        added = AddAction(path, size, values, now, False, json.dumps({"numRecords": len(rows)}))
        removed = [RemoveAction(a["path"], False, now, a["size_bytes"], values) for a in small]
        table.create_write_transaction([added, *removed], "append", columns, partition_by or None)
        log.info("compacted %d files of the Delta table %s", len(small), self.uri(topic))
        return len(small)

    def expire(self, topic: str) -> None:
        table = self.table(topic)
        if table is None:
            return
        hours = max(int(self.settings.snapshot_retention_s // 3600), 0)
        removed = table.vacuum(retention_hours=hours, enforce_retention_duration=False, dry_run=False)
        if removed:
            log.info("vacuumed %d files of the Delta table %s", len(removed), self.uri(topic))

    def topics(self) -> list[str]:
        local = _local(self.settings.lake)
        if local is None or not local.is_dir():
            return []
        return sorted(p.name for p in local.iterdir() if (p / "_delta_log").is_dir())


def _small(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Arrow's large string, binary and list types as the plain ones (what
    the rows are made of; pyiceberg reads a table's strings as large ones)."""

    def small(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_large_list(t) or pa.types.is_list(t):
            return pa.list_(t.value_field.with_type(small(t.value_type)))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(small(f.type)) for f in t])
        if pa.types.is_map(t):
            return pa.map_(t.key_field.with_type(small(t.key_type)), t.item_field.with_type(small(t.item_type)))
        return t

    return pa.schema([f.with_type(small(f.type)) for f in schema], metadata=schema.metadata)


def _tombstones(rows: pa.Table, keys: list[bytes]) -> pa.Table:
    """One row per deleted key, for a merge's delete clause."""
    if not keys:
        return rows.schema.empty_table()
    wanted = set(keys)
    keep, seen = [], set()
    for i, k in enumerate(rows.column("key").to_pylist()):
        if k in wanted and k not in seen:
            seen.add(k)
            keep.append(i)
    return rows.take(pa.array(keep, pa.int64()))


def _add_actions(table: Any) -> list[dict]:
    """A Delta table's files: ``path`` (as its log spells it), ``size_bytes``, ``partition`` (typed values)."""
    actions = table.get_add_actions(flatten=False)
    actions = pa.table(actions) if not isinstance(actions, pa.Table) else actions
    names = ["path", "size_bytes", *(["partition"] if "partition" in actions.column_names else [])]
    return [{"partition": None, **a} for a in actions.select(names).to_pylist()]


def one_round(settings: TableSettings, files: list, size: Any, partition: Any) -> list:
    """The files one maintenance round of a table rewrites, all of one table partition (files
    of two would make as many files again): the partition with the most files under
    ``target.file.bytes``, if it has ``compact.min.files`` of them (2 at least); its smallest,
    up to one target file's worth (at least ``compact.min.files``). So a round's work is
    bounded however much the table holds; the next round takes the next ones."""
    least = max(settings.compact_min_files, 2)
    groups: dict[str, list] = {}
    for f in files:
        if size(f) < settings.target_file_bytes:
            groups.setdefault(partition(f), []).append(f)
    small = sorted(max(groups.values(), key=len, default=[]), key=size)
    if len(small) < least:
        return []
    chosen, total = [], 0
    for f in small:
        if len(chosen) >= least and total + size(f) > settings.target_file_bytes:
            break
        chosen.append(f)
        total += size(f)
    return chosen


def _filesystem(uri: str) -> tuple[Any, str]:
    """(a pyarrow filesystem, the path on it) of a table's location."""
    import pyarrow.fs

    local = _local(uri)
    return pyarrow.fs.FileSystem.from_uri(str(local.absolute()) if local is not None else uri)


def _unquote(path: str) -> str:
    """A Delta log's file path (a relative URI: ``%`` escapes) as the file's name on its filesystem."""
    from urllib.parse import unquote

    return unquote(path)


def _partition_value(value: Any) -> str | None:
    """A typed partition value as a Delta log spells it (the protocol's partition value serialization)."""
    from deltalake._util import encode_partition_value

    return None if value is None else encode_partition_value(value)


def _conform(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` (files of several schema versions) in the table's columns: a column a file lacks is null."""
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(len(rows), f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def maintain(tables: Tables, topics: Iterable[str]) -> dict[str, int]:
    """One maintenance round: compact and expire every table; returns files replaced per table."""
    out = {}
    for topic in topics:
        try:
            out[topic] = tables.compact(topic)
            tables.expire(topic)
        except Exception:
            log.exception("maintenance of the %s table of %s failed", tables.settings.format, topic)
    return out
