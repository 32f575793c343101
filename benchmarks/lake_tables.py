"""Records per second into an Iceberg and a Delta table through the mirror, against
pyarrow + pyiceberg / deltalake writing the same rows directly; files before and after
compaction.

A log is written straight to disk in Kafka's format by ``spark_source.write_log`` (same
options: ``--total-mb``, ``--partitions``, ``--codec``, ...). Then, per format:

- ``mirror``: ``brokkr.plugins.sinks.spark.mirror.TableMirror`` over every range of the log
  (``backfill``): Spark (``--master``) decodes and shapes the rows, the driver commits them
  to the table with their offsets, at most ``--flush-records`` offsets per commit.
- ``direct``: the same segments decoded in this process by the same reader
  (``datasource.read_split``) into the same key_value rows, appended to a fresh table with
  one pyiceberg ``append`` / ``deltalake.write_deltalake`` per ``--flush-records`` rows.

Reported per format: records/s of each and their ratio (mirror / direct), and the mirror
table's data files before and after one compaction (``Tables.compact``, every file under
the target size). Spark's session is started and warmed up before the clock starts.

    .venv/bin/python benchmarks/lake_tables.py [--total-mb 16] [--master local[2]] [--json f]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).parent))

from brokkr.plugins.sinks.spark import mirror, session  # noqa: E402
from brokkr.plugins.sinks.spark.datasource import plan_splits, read_split  # noqa: E402
from brokkr.plugins.sinks.spark.tables import KAFKA, KEY_VALUE_SCHEMA, TableSettings, tables_for  # noqa: E402
from spark_source import CODEC_IDS, write_log  # noqa: E402

TOPIC = "bench"


def key_value(batch: pa.RecordBatch) -> pa.Table:
    """The data source's columns shaped as the tables' key_value rows (what Spark's
    executors do with ``KAFKA_SQL``)."""
    kafka = pa.StructArray.from_arrays(
        [
            batch.column("partition"),
            batch.column("offset"),
            batch.column("timestamp"),
            batch.column("timestampType"),
            batch.column("headers"),
            batch.column("producerId"),
        ],
        fields=list(KAFKA),
    )
    return pa.Table.from_arrays([batch.column("key"), batch.column("value"), kafka], schema=KEY_VALUE_SCHEMA)


def run_mirror(spark, log: Path, settings: TableSettings) -> tuple[float, int]:
    start = time.perf_counter()
    m = mirror.TableMirror(spark, settings)
    for _ in mirror.backfill(m, log, [TOPIC]):
        pass
    elapsed = time.perf_counter() - start
    return elapsed, len(m.tables.read(TOPIC))


def run_direct(log: Path, settings: TableSettings) -> tuple[float, int]:
    start = time.perf_counter()
    tables = tables_for(settings)
    rows = 0
    pending: list[pa.Table] = []

    def flush() -> None:
        data = pa.concat_tables(pending)
        pending.clear()
        if settings.format == "iceberg":
            tables.table(TOPIC, data.schema).append(data)
        else:
            from deltalake import write_deltalake

            write_deltalake(tables.uri(TOPIC), data, mode="append")

    for split in plan_splits(log):
        for batch in read_split(split):
            pending.append(key_value(batch))
            rows += batch.num_rows
            if sum(len(t) for t in pending) >= settings.flush_records:
                flush()
    if pending:
        flush()
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mb", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--segment-mb", type=int, default=4)
    parser.add_argument("--batch-records", type=int, default=200)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--index-interval", type=int, default=4096)
    parser.add_argument("--codec", choices=sorted(CODEC_IDS), default="lz4")
    parser.add_argument("--flush-records", type=int, default=50_000)
    parser.add_argument("--formats", default="iceberg,delta")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="brokkr-lake-bench-"))
    figures: dict = {"cpus": os.cpu_count(), "master": args.master, "codec": args.codec}
    try:
        log = work / "log"
        size = write_log(log, args)
        # write_log names the partition directories bench-<p>: the topic "bench"
        print(f"log: {size / 1e6:.1f} MB, {args.partitions} partitions, codec {args.codec}")
        spark = session(
            master=args.master,
            app_name="brokkr-lake-bench",
            conf={"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": "false"},
        )
        spark.sparkContext.setLogLevel("ERROR")
        warm = work / "warm"
        write_log(warm, argparse.Namespace(**{**vars(args), "total_mb": 1, "partitions": 1, "segment_mb": 1}))
        run_mirror(spark, warm, TableSettings(format="delta", lake=str(work / "warm-lake")))
        for fmt in args.formats.split(","):
            mirrored = TableSettings(
                format=fmt, lake=str(work / f"{fmt}-mirror"), flush_records=args.flush_records, compact_min_files=2
            )
            direct = TableSettings(format=fmt, lake=str(work / f"{fmt}-direct"), flush_records=args.flush_records)
            mirror_s, mirror_rows = run_mirror(spark, log, mirrored)
            direct_s, direct_rows = run_direct(log, direct)
            if mirror_rows != direct_rows:
                sys.exit(f"{fmt}: row counts differ: mirror {mirror_rows}, direct {direct_rows}")
            tables = tables_for(mirrored)
            before = len(tables.data_files(TOPIC))
            start = time.perf_counter()
            tables.compact(TOPIC)
            compact_s = time.perf_counter() - start
            after = len(tables.data_files(TOPIC))
            figures[fmt] = {
                "rows": mirror_rows,
                "mirror_s": round(mirror_s, 2),
                "mirror_rec_s": round(mirror_rows / mirror_s),
                "direct_s": round(direct_s, 2),
                "direct_rec_s": round(direct_rows / direct_s),
                "ratio": round(direct_s / mirror_s, 2),
                "files_before_compaction": before,
                "files_after_compaction": after,
                "compaction_s": round(compact_s, 2),
            }
            f = figures[fmt]
            print(
                f"{fmt}: mirror {f['mirror_rec_s']} rec/s, direct {f['direct_rec_s']} rec/s, ratio {f['ratio']}; "
                f"files {before} -> {after} after compaction ({f['compaction_s']} s)"
            )
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
