"""Produce throughput per codec and per conversion case, against the no-codec path and the
codec's own speed.

A brokkr broker runs as a subprocess (as in ``produce.py``). For each case this process
builds one record batch (``--records`` records with ``--value-size``-byte values, some
repetition in them as in real payloads) compressed with the producer's codec, then sends
the same Produce request ``--requests`` times over one connection, ``--in-flight`` at a
time, to a topic whose ``compression.type`` (and, for the LogAppendTime cases,
``message.timestamp.type``) sets the conversion. No client library is involved: what is
measured is the broker's produce path, from request bytes to response bytes.

Two ratios per case:

- **vs none**: throughput over the uncompressed in-place case (the fast path) in the same run.
- **vs codec**: throughput (uncompressed MB/s) over the raw speed of the codec work the
  case needs (decompress, compress, or both in a row), measured in this process, in the
  same run, on the same records with brokkr's own codec objects. 1.0 would mean the
  codec is all the broker spends time on; the rest is the produce path around it.

    /work/venv/bin/python benchmarks/codecs.py [--requests 200] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from functools import partial

import attrs
from brokkr.core.compression import Codec
from brokkr.core.protocol.records import HEADER_SIZE, build_batch
from brokkr.plugins.codecs.gzip import GzipCodec
from brokkr.plugins.codecs.lz4 import Lz4Codec
from brokkr.plugins.codecs.none import NoneCodec
from brokkr.plugins.codecs.snappy import SnappyCodec
from brokkr.plugins.codecs.zstd import ZstdCodec
from produce import create_topic, event_records, free_port, mb_per_s, start_broker, stop_broker
from raw_produce import PRODUCE_VERSION, produce_frame, timed_run

CODECS: dict[str, Codec] = {c.name: c for c in (NoneCodec(), GzipCodec(), SnappyCodec(), Lz4Codec(), ZstdCodec())}
COMPRESSED = [name for name in CODECS if name != "none"]


@attrs.frozen
class Case:
    """A producer codec sent to a topic with a compression.type (and timestamp type)."""

    codec: str
    topic_type: str  # compression.type
    log_append_time: bool = False

    @property
    def label(self) -> str:
        if self.topic_type == "producer":
            label = f"{self.codec} in place"
        else:
            label = f"{self.codec} -> {self.topic_type}"
        return label + (", LogAppendTime" if self.log_append_time else "")

    @property
    def stored_codec(self) -> str:
        if self.topic_type == "producer":
            return self.codec
        return "none" if self.topic_type == "uncompressed" else self.topic_type

    def codec_work(self) -> list[tuple[str, str]]:
        """The codec operations the broker runs per batch: (codec, "decompress"|"compress")."""
        work = []
        if self.codec != "none":
            work.append((self.codec, "decompress"))
        if self.stored_codec != self.codec and self.stored_codec != "none":
            work.append((self.stored_codec, "compress"))
        return work


def default_cases() -> list[Case]:
    cases = [Case(name, "producer") for name in CODECS]
    cases += [Case("none", name) for name in COMPRESSED]
    cases += [Case(name, "uncompressed") for name in COMPRESSED]
    cases += [Case("gzip", "zstd"), Case("zstd", "gzip"), Case("snappy", "lz4"), Case("lz4", "snappy")]
    cases += [Case("none", "producer", log_append_time=True), Case("zstd", "producer", log_append_time=True)]
    return cases


def run_case(bootstrap: str, pid: int, case: Case, topic: str, section: bytes, records, args) -> dict:
    config = {"compression.type": case.topic_type}
    if case.log_append_time:
        config["message.timestamp.type"] = "LogAppendTime"
    create_topic(bootstrap, topic, config)
    codec = CODECS[case.codec]
    payload = None if case.codec == "none" else codec.compress(section)
    batch = build_batch(records, timestamp=int(time.time() * 1000), attributes=codec.id, compressed_payload=payload)
    frame = produce_frame(topic, batch)
    elapsed, cpu = timed_run(bootstrap, pid, frame, args.warmup, args.requests, args.in_flight)
    return {
        "records_per_s": args.requests * len(records) / elapsed,
        "mb_per_s": args.requests * len(section) / elapsed / 1e6,
        "batch_bytes": len(batch),
        "broker_cpu_pct": cpu,
    }


def raw_codec_speeds(section: bytes) -> dict[tuple[str, str], float]:
    """MB/s of uncompressed bytes for each codec's compress and (bounded) decompress."""
    speeds = {}
    for name in COMPRESSED:
        codec = CODECS[name]
        compressed = codec.compress(section)
        speeds[(name, "compress")] = mb_per_s(partial(codec.compress, section), len(section))
        speeds[(name, "decompress")] = mb_per_s(partial(codec.decompress, compressed, len(section)), len(section))
    return speeds


def codec_bound(case: Case, speeds: dict[tuple[str, str], float]) -> float | None:
    """MB/s the case's codec work alone would allow: operations in a row add their times."""
    work = case.codec_work()
    return 1 / sum(1 / speeds[op] for op in work) if work else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500, help="records per batch (default 500)")
    parser.add_argument("--value-size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--requests", type=int, default=200, help="measured Produce requests per case (default 200)")
    parser.add_argument("--warmup", type=int, default=10, help="unmeasured requests first (default 10)")
    parser.add_argument("--in-flight", type=int, default=8, help="unanswered requests at a time (default 8)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; medians are reported (default 3)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument(
        "--case",
        action="append",
        metavar="TEXT",
        help="run only the cases whose label contains TEXT (repeatable; the baseline always runs)",
    )
    args = parser.parse_args(argv)

    baseline = Case("none", "producer")
    cases = [c for c in default_cases() if c == baseline or not args.case or any(t in c.label for t in args.case)]
    records = event_records(args.records, args.value_size)
    section = build_batch(records)[HEADER_SIZE:]
    runs: dict[str, list[dict]] = {c.label: [] for c in cases}
    speed_samples: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    broker_log = tempfile.TemporaryFile(mode="w+")
    with tempfile.TemporaryDirectory(prefix="brokkr-bench-") as data_dir:
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        broker = start_broker(port, data_dir, broker_log)
        try:
            for r in range(args.repeat):  # interleaved, so slow drifts hit every case alike
                for i, case in enumerate(cases):
                    topic = f"codecs-{r}-{i}"
                    runs[case.label].append(run_case(bootstrap, broker.pid, case, topic, section, records, args))
                for key, speed in raw_codec_speeds(section).items():
                    speed_samples[key].append(speed)
        except (RuntimeError, TimeoutError, OSError) as exc:
            print(f"benchmark failed: {exc}", file=sys.stderr)
            return 1
        finally:
            stop_broker(broker)
            broker_log.seek(0)
            stderr = broker_log.read().strip()
            if stderr:
                print(f"--- broker stderr ---\n{stderr}", file=sys.stderr)

    raw_speeds = {key: statistics.median(samples) for key, samples in speed_samples.items()}
    summary = {}
    for case in cases:
        rs = runs[case.label]
        cpu = [r["broker_cpu_pct"] for r in rs if r["broker_cpu_pct"] is not None]
        summary[case.label] = {
            "records_per_s": statistics.median(r["records_per_s"] for r in rs),
            "mb_per_s": statistics.median(r["mb_per_s"] for r in rs),
            "batch_bytes": rs[0]["batch_bytes"],
            "broker_cpu_pct": statistics.median(cpu) if cpu else None,
            "codec_work": " + ".join(f"{name} {op}" for name, op in case.codec_work()) or "-",
            "codec_mb_per_s": codec_bound(case, raw_speeds),
        }
    for m in summary.values():
        m["vs_none"] = m["mb_per_s"] / summary[baseline.label]["mb_per_s"]
        m["vs_codec"] = m["mb_per_s"] / m["codec_mb_per_s"] if m["codec_mb_per_s"] else None
    print_table(summary, raw_speeds, args, len(section))
    if args.json:
        doc = {
            "config": vars(args),
            "section_bytes": len(section),
            "runs": runs,
            "median": summary,
            "raw_codec_mb_per_s": {f"{name} {op}": v for (name, op), v in raw_speeds.items()},
        }
        with open(args.json, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
    return 0


def print_table(summary: dict, raw_speeds: dict, args: argparse.Namespace, section_bytes: int) -> None:
    print(
        f"\ncodecs: batches of {args.records} records x {args.value_size} B values ({section_bytes:,} B of records "
        f"uncompressed), {args.requests} Produce v{PRODUCE_VERSION} requests per case, {args.in_flight} in flight, "
        f"acks=1, median of {args.repeat} run(s)"
    )
    header = (
        f"{'case':<28}{'batch B':>9}{'records/s':>12}{'MB/s':>8}{'vs none':>9}"
        f"  {'codec work':<30}{'codec MB/s':>11}{'vs codec':>10}{'broker CPU':>12}"
    )
    print(header)
    print("-" * len(header))
    for label, m in summary.items():
        codec_mb = "-" if m["codec_mb_per_s"] is None else f"{m['codec_mb_per_s']:.1f}"
        vs_codec = "-" if m["vs_codec"] is None else f"{m['vs_codec']:.3f}"
        cpu = "-" if m["broker_cpu_pct"] is None else f"{m['broker_cpu_pct']:.0f}%"
        print(
            f"{label:<28}{m['batch_bytes']:>9,}{m['records_per_s']:>12,.0f}{m['mb_per_s']:>8.1f}{m['vs_none']:>9.3f}"
            f"  {m['codec_work']:<30}{codec_mb:>11}{vs_codec:>10}{cpu:>12}"
        )
    print("\nraw codec speed in this process (MB/s of uncompressed records):")
    for name in COMPRESSED:
        compress, decompress = raw_speeds[(name, "compress")], raw_speeds[(name, "decompress")]
        print(f"  {name:<7} compress {compress:>8.1f}   decompress {decompress:>8.1f}")
    print(
        "(MB/s: uncompressed record bytes per second; vs none: over the uncompressed in-place case; vs codec:\n"
        " over the raw speed of the codec work the case needs; broker CPU is of one core, near 100% = broker-bound)"
    )


if __name__ == "__main__":
    sys.exit(main())
