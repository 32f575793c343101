"""What Kafka's broker must do per record that librdkafka's mock cluster skips, each part
timed alone in the C a broker calls for it, beside the mock's whole broker CPU per record.

The mock keeps the batches it is sent in heap memory it reuses and checks nothing inside
them. Kafka's broker (brokkr too) writes every batch into the page cache, checks its
CRC-32C, and decompresses a compressed batch to validate its records (Kafka's
LogValidator). This script times each of those with nothing of a broker around it, for
the records of ``suite.py``'s produce rows:

- the page-cache write: 1 MB ``os.write`` calls, this process's CPU (user and system).
  Twice: 2 GB into a new file, then, once that file is deleted, 256 MB into another
  (pages the kernel just freed). On a VM that gives freed memory back to its host, the
  first pass pays for faulting pages in on the host again, as a broker's log does once it
  has outgrown the memory freed last;
- the CRC-32C of the batch (the ``crc32c`` package, hardware-accelerated);
- decompressing the records as librdkafka compresses them (lz4 frame and zstd at their
  default levels), with the ``lz4`` and ``zstandard`` packages, one thread. This and
  the CRC are called over and over for 0.3 s, as ``codecs.py`` times its codecs
  (``produce.mb_per_s``).

With ``--suite-json`` (a file from ``suite.py --json``) it prints each produce row's
mock CPU per record (its broker CPU over its rate) beside the sum of the parts that row
needs. Where the parts cost more than the mock's whole CPU, no broker that does Kafka's
work can match the mock's CPU per record on that row.

    .venv-test/bin/python benchmarks/kafka_work.py [--suite-json suite.json] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from functools import partial

import crc32c
import lz4.frame
import zstandard
from brokkr.core.protocol.records import HEADER_SIZE, build_batch
from produce import event_records, mb_per_s

RECORDS = 1000  # a 1 MB batch of 1 KB records, as produce-1k-1m, produce-lz4 and -zstd send
VALUE_SIZE = 1000
WRITE_MB = (2048, 256)  # the new file, then the one in its freed pages
#: Linux's free page reporting hands freed memory back to the host after about 2 s; the
#: first write waits longer, so that what was freed before the script started is gone
REPORTING_WAIT_S = 5
#: suite.py's produce rows: (value size, codec) of their records
ROWS = {
    "produce-1k-1m": (1000, None),
    "produce-100b-16k": (100, None),
    "produce-lz4": (1000, "lz4"),
    "produce-zstd": (1000, "zstd"),
}


def write_us_per_mb(directory: str) -> tuple[float, float]:
    """CPU microseconds (user and system) a MB written into the page cache: 2 GB into a
    new file, then 256 MB into another once the first is deleted."""
    chunk = os.urandom(1 << 20)
    figures = []
    time.sleep(REPORTING_WAIT_S)
    for n, megabytes in enumerate(WRITE_MB):
        path = os.path.join(directory, f"kafka-work-{os.getpid()}-{n}")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            start = time.process_time()
            for _ in range(megabytes):
                os.write(fd, chunk)
            figures.append((time.process_time() - start) / megabytes * 1e6)
        finally:
            os.close(fd)
            os.unlink(path)
    return figures[0], figures[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite-json", help="a suite.py --json file: compare with its mock's CPU per record")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where the page-cache write goes (a temp dir)")
    args = parser.parse_args()

    batch = build_batch(event_records(RECORDS, VALUE_SIZE), timestamp=int(time.time() * 1000))
    records = batch[HEADER_SIZE:]
    lz4_frame = lz4.frame.compress(records)
    zstd_frame = zstandard.ZstdCompressor().compress(records)
    record_bytes = len(batch) / RECORDS

    write_new, write_again = write_us_per_mb(args.dir)
    per_record = {
        "write, new file": write_new * record_bytes / 1e6,
        "write, freed pages": write_again * record_bytes / 1e6,
        # MB/s is bytes a microsecond: a record's bytes over it are its microseconds
        "crc32c": record_bytes / mb_per_s(partial(crc32c.crc32c, batch), len(batch)),
        "lz4 decompress": record_bytes / mb_per_s(partial(lz4.frame.decompress, lz4_frame), len(batch)),
        "zstd decompress": record_bytes
        / mb_per_s(partial(zstandard.ZstdDecompressor().decompress, zstd_frame), len(batch)),
    }
    ratios = {"lz4": len(lz4_frame) / len(records), "zstd": len(zstd_frame) / len(records)}
    print(f"{RECORDS} records of {VALUE_SIZE} B (JSON-ish events), a {len(batch):,} B batch")
    print(f"compressed: lz4 {ratios['lz4']:.2f}, zstd {ratios['zstd']:.2f} of the records' bytes")
    print(f"page-cache write: {write_new:.0f} us a MB into a new file, {write_again:.0f} into freed pages")
    for name, us in per_record.items():
        print(f"  {name:<20}{us:8.3f} us a 1 KB record")
    if args.suite_json:
        compare(args.suite_json, per_record, ratios)


def compare(path: str, per_record: dict, ratios: dict) -> None:
    """Each produce row of a suite run: the mock's broker CPU per record against the parts
    of Kafka's work the row needs (the write at both page costs, the CRC, decompression)."""
    with open(path) as f:
        table = {row["scenario"]: row for row in json.load(f)["table"]}
    print(f"\n{'scenario':<18}{'mock CPU':>10}{'Kafka work, freed':>19}{'new pages':>11}   (us a record)")
    for scenario, (value_size, codec) in ROWS.items():
        row = table.get(scenario)
        if row is None or not row.get("mock_broker_cpu_pct"):
            continue
        mock = row["mock_broker_cpu_pct"] / 100 / row["mock"] * 1e6
        scale = (value_size + len(b"key-1000") + 10) / (len(b"key-1000") + VALUE_SIZE + 10)  # ~10 B of framing
        stored = scale * (ratios[codec] if codec else 1.0)  # the share of a 1 KB record's bytes written
        fixed = per_record["crc32c"] * stored + (per_record[f"{codec} decompress"] if codec else 0.0)
        freed = fixed + per_record["write, freed pages"] * stored
        new = fixed + per_record["write, new file"] * stored
        print(f"{scenario:<18}{mock:10.3f}{freed:19.3f}{new:11.3f}")


if __name__ == "__main__":
    main()
