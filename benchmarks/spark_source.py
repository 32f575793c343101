"""Segment-to-Parquet throughput: the ``brokkr`` PySpark data source on Spark ``local[*]``
against the same decoder driven by pyarrow alone, in one process.

A log of ``--partitions`` partition directories is written straight to disk in Kafka's
format (``--total-mb`` of segments of ``--segment-mb``, batches of ``--batch-records``
records with ``--value-bytes`` values, a key and a header each, compressed with
``--codec``, an offset index entry every ``--index-interval`` bytes as the segment storage
writes them). Then, timed over the same files in the same page-cache state (read once
before either run):

- ``spark``: ``spark.read.format("brokkr").load(log).write.parquet(out)`` on a session
  from ``brokkr.plugins.sinks.spark.session(master)``: one input partition per segment
  (or per ``--max-bytes-per-partition`` range of one), decoded in Spark's Python workers,
  written by Spark's Parquet writer. The session is started, and its Python workers
  warmed up on a small log, before the clock starts.
- ``pyarrow``: the same input partitions, one after another in this process, each
  decoded by the same reader (``datasource.read_split``: brokkr's codec plugins and record
  decoder into Arrow batches) and written with ``pyarrow.parquet.ParquetWriter``, one file
  per input partition.

Both write snappy-compressed Parquet (each library's default). Reported: MB of log per
second for each and their ratio (spark / pyarrow); the row counts must agree. With
``--noop``, also Spark reading into its ``noop`` sink (decode and hand-over to the JVM,
no Parquet), which tells the read's cost from the write's.

    /work/venv/bin/python benchmarks/spark_source.py [--total-mb 128] [--codec lz4] [--master local[*]] [--json f]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
from brokkr.core.protocol.records import build_batch
from brokkr.plugins.sinks.spark import session
from brokkr.plugins.sinks.spark.datasource import arrow_schema, load_codecs, plan_splits, read_split
from brokkr.plugins.storage.segment.files import INDEX_SUFFIX, LOG_SUFFIX, segment_file

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
INDEX_ENTRY = struct.Struct(">ii")
MB = 1_000_000


def write_log(root: Path, args: argparse.Namespace) -> int:
    """Write the log; returns its size in bytes (the .log files)."""
    codec_id = CODEC_IDS[args.codec]
    codec = load_codecs()[codec_id] if codec_id else None
    rng = os.urandom(1 << 16)
    per_partition = args.total_mb * MB // args.partitions
    total = 0
    for p in range(args.partitions):
        directory = root / f"bench-{p}"
        directory.mkdir(parents=True)
        offset, written, seg_base, seg_size = 0, 0, 0, 0
        log = index = None
        since_index = 0
        while written < per_partition:
            if log is None or seg_size >= args.segment_mb * MB:
                if log is not None:
                    log.close()
                    index.close()
                seg_base, seg_size, since_index = offset, 0, 0
                log = open(segment_file(directory, seg_base, LOG_SUFFIX), "wb")
                index = open(segment_file(directory, seg_base, INDEX_SUFFIX), "wb")
            records = []
            for i in range(args.batch_records):
                n = offset + i
                start = (n * 7919) % (len(rng) - args.value_bytes)
                # half random, half repeated text: compresses about as well as JSON does
                half = args.value_bytes // 2
                value = rng[start : start + half] + (b"event %d " % n * args.value_bytes)[: args.value_bytes - half]
                records.append((b"user-%d" % (n % 10_000), value, [("source", b"bench")]))
            batch = build_batch(records, base_offset=offset, timestamp=1_700_000_000_000 + offset)
            if codec is not None:
                section = batch[61:]
                batch = build_batch(
                    records,
                    base_offset=offset,
                    timestamp=1_700_000_000_000 + offset,
                    attributes=codec_id,
                    compressed_payload=codec.compress(section),
                )
            if since_index > args.index_interval:
                index.write(INDEX_ENTRY.pack(offset + len(records) - 1 - seg_base, seg_size))
                since_index = 0
            log.write(batch)
            seg_size += len(batch)
            since_index += len(batch)
            written += len(batch)
            offset += len(records)
        log.close()
        index.close()
        total += written
    return total


def read_all(root: Path) -> None:
    """Read every file once so that both runs start from a warm page cache."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                while f.read(1 << 22):
                    pass


def run_pyarrow(log: Path, out: Path, max_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    schema = arrow_schema()
    rows = 0
    out.mkdir()
    for i, split in enumerate(plan_splits(log, max_bytes_per_partition=max_bytes)):
        with pq.ParquetWriter(out / f"part-{i:05d}.parquet", schema, compression="snappy") as writer:
            for batch in read_split(split, schema):
                writer.write_batch(batch)
                rows += batch.num_rows
    return time.perf_counter() - start, rows


def run_spark(spark, log: Path, out: Path, max_bytes: int) -> tuple[float, int]:
    start = time.perf_counter()
    df = spark.read.format("brokkr").option("maxBytesPerPartition", max_bytes).load(str(log))
    df.write.mode("overwrite").parquet(str(out))
    elapsed = time.perf_counter() - start
    return elapsed, spark.read.parquet(str(out)).count()


def run_spark_noop(spark, log: Path, max_bytes: int) -> float:
    """Spark's read alone: decoded and handed to the JVM, written nowhere (the noop format)."""
    start = time.perf_counter()
    df = spark.read.format("brokkr").option("maxBytesPerPartition", max_bytes).load(str(log))
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total-mb", type=int, default=128)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-mb", type=int, default=16)
    parser.add_argument("--batch-records", type=int, default=200)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--index-interval", type=int, default=4096)
    parser.add_argument("--codec", choices=sorted(CODEC_IDS), default="lz4")
    parser.add_argument("--max-bytes-per-partition", type=int, default=128 * 1024 * 1024)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--noop", action="store_true", help="also time Spark reading into the noop sink")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="brokkr-spark-bench-"))
    try:
        log = work / "log"
        t0 = time.perf_counter()
        size = write_log(log, args)
        segments = len(list(log.rglob("*.log")))
        print(
            f"log: {size / MB:.1f} MB in {segments} segments of {args.partitions} partitions, codec {args.codec} "
            f"(written in {time.perf_counter() - t0:.1f} s)"
        )

        spark = session(master=args.master, app_name="brokkr-bench", conf={"spark.driver.memory": "2g"})
        spark.sparkContext.setLogLevel("ERROR")
        warm = work / "warm"
        small = argparse.Namespace(**{**vars(args), "total_mb": 1, "partitions": 2, "segment_mb": 1})
        write_log(warm, small)
        spark.read.format("brokkr").load(str(warm)).write.mode("overwrite").parquet(str(work / "warm-out"))

        read_all(log)
        arrow_s, arrow_rows = run_pyarrow(log, work / "out-pyarrow", args.max_bytes_per_partition)
        read_all(log)
        spark_s, spark_rows = run_spark(spark, log, work / "out-spark", args.max_bytes_per_partition)
        noop_s = None
        if args.noop:
            read_all(log)
            noop_s = run_spark_noop(spark, log, args.max_bytes_per_partition)
        cores = spark.sparkContext.defaultParallelism
        spark.stop()
        if arrow_rows != spark_rows:
            sys.exit(f"row counts differ: pyarrow {arrow_rows}, spark {spark_rows}")

        figures = {
            "log_mb": round(size / MB, 1),
            "segments": segments,
            "rows": arrow_rows,
            "codec": args.codec,
            "master": args.master,
            "spark_cores": cores,
            "cpus": os.cpu_count(),
            "pyarrow_s": round(arrow_s, 2),
            "pyarrow_mb_s": round(size / MB / arrow_s, 1),
            "spark_s": round(spark_s, 2),
            "spark_mb_s": round(size / MB / spark_s, 1),
            "spark_over_pyarrow": round(arrow_s / spark_s, 2),
        }
        if noop_s is not None:
            figures["spark_noop_s"] = round(noop_s, 2)
            figures["spark_noop_mb_s"] = round(size / MB / noop_s, 1)
        print(f"rows: {arrow_rows}")
        print(f"pyarrow alone : {figures['pyarrow_mb_s']:8.1f} MB/s of log ({arrow_s:.2f} s)")
        print(f"spark {args.master:8s}: {figures['spark_mb_s']:8.1f} MB/s of log ({spark_s:.2f} s, {cores} cores)")
        if noop_s is not None:
            print(f"spark, no write: {figures['spark_noop_mb_s']:8.1f} MB/s of log ({noop_s:.2f} s)")
        print(f"spark / pyarrow: {figures['spark_over_pyarrow']:.2f}x")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
