"""Reading the mirror's lake tables back in Spark without the JVM connectors: the
``brokkr_table`` Python data source, over pyiceberg and deltalake scans::

    spark = session()   # registers it
    df = (spark.read.format("brokkr_table")
          .option("format", "iceberg")                       # or delta
          .option("lake", "/data/lake")                      # Delta: <lake>/<topic>; Iceberg: its default catalog
          .option("catalog.uri", "sqlite:////data/lake/_brokkr_iceberg.db")   # any pyiceberg property
          .option("namespace", "brokkr")
          .load("orders"))                                   # the topic (its table)

The schema is the table's (taken on the driver); one input partition per data file, read
on an executor through pyiceberg (``ArrowScan`` of that file's scan task: schema evolution
and deletes applied) or deltalake (its dataset, that file only). Users whose Spark has the
JVM connectors read the same tables with ``format("iceberg")`` / ``format("delta")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .tables import TableSettings, _small, tables_for

NAME = "brokkr_table"
CATALOG_OPTION = "catalog."


@dataclass(frozen=True)
class DataFile(InputPartition):
    path: str


def settings_of(options: dict[str, str]) -> tuple[TableSettings, str]:
    """(the table settings, the topic) of the data source's options (case-insensitive)."""
    options = {k.lower(): v for k, v in options.items()}
    topic = options.get("path") or options.get("topic")
    if not topic:
        raise ValueError('the brokkr_table data source needs a topic: .load("<topic>")')
    fmt = options.get("format", "iceberg").lower()
    if fmt not in ("iceberg", "delta"):
        raise ValueError(f"option format: {fmt!r} is not iceberg or delta")
    catalog = {k[len(CATALOG_OPTION) :]: v for k, v in options.items() if k.startswith(CATALOG_OPTION)}
    settings = TableSettings(
        format=fmt, lake=options.get("lake", ""), catalog=catalog, namespace=options.get("namespace", "brokkr")
    )
    if not settings.lake and "uri" not in catalog:
        raise ValueError("the brokkr_table data source needs the lake (option lake) or a catalog (catalog.uri)")
    return settings, topic


class BrokkrTableDataSource(DataSource):
    """``spark.read.format("brokkr_table")``: see the module documentation."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        from pyspark.sql.pandas.types import from_arrow_schema

        settings, topic = settings_of(dict(self.options))
        schema = tables_for(settings).schema(topic)
        if schema is None:
            raise ValueError(f"no {settings.format} table for the topic {topic}")
        return from_arrow_schema(schema)

    def reader(self, schema: StructType) -> BrokkrTableReader:
        return BrokkrTableReader(dict(self.options), schema)


class BrokkrTableReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType):
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        settings, topic = settings_of(self.options)
        files = tables_for(settings).data_files(topic)
        return [DataFile(path) for path in files] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, DataFile):
            return iter(())
        from pyspark.sql.pandas.types import to_arrow_schema

        settings, topic = settings_of(self.options)
        target = to_arrow_schema(self.schema, timezone="UTC")
        return (_conform(batch, target) for batch in _file_batches(settings, topic, partition.path))


def _file_batches(settings: TableSettings, topic: str, path: str) -> Iterator[pa.RecordBatch]:
    tables: Any = tables_for(settings)
    if settings.format == "iceberg":
        from pyiceberg.io.pyarrow import ArrowScan

        table = tables.table(topic)
        scan = table.scan()
        tasks = [t for t in scan.plan_files() if t.file.file_path == path]
        yield from ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter).to_record_batches(tasks)
    else:
        import pyarrow.dataset as ds

        dataset = tables.table(topic).to_pyarrow_dataset()
        for fragment in dataset.get_fragments():
            if path.endswith("/" + fragment.path.lstrip("/")):  # its partition columns come from its path
                one = ds.FileSystemDataset([fragment], dataset.schema, dataset.format, dataset.filesystem)
                yield from one.to_batches()


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """The batch in the columns and types Spark expects (pyiceberg reads large types)."""
    columns = [batch.column(f.name) if f.name in batch.schema.names else pa.nulls(len(batch), f.type) for f in target]
    small = _small(pa.schema([pa.field(f.name, c.type) for f, c in zip(target, columns)]))
    columns = [c.cast(s.type).cast(f.type) for c, s, f in zip(columns, small, target)]
    return pa.RecordBatch.from_arrays(columns, schema=target)
