"""Segment storage: append throughput against the disk's raw write speed, and crash recovery
time against a sequential read of the same log.

Append: the same record batches (one pre-built batch of ``--batch-bytes``, its offsets
patched in place before each append as ``Partition.append`` does) go once through
``SegmentLog.append`` of the real segment storage (opened through ``Broker.open_storage``
with ``brokkr.storage=segment``) and once through plain ``os.write`` to a file in the same
directory. Both report MiB/s and batches/s over the writes alone (the OS decides when data
reaches the disk, Kafka's default flush policy) and over the writes plus a final fsync.

Recovery: a child process writes a ``--recovery-mb`` log through the storage and dies
with ``os._exit`` (no close, no checkpoint, no clean-shutdown marker), the recovery point
is set to 0, then further child processes time opening the storage and the partition, which
re-validates every batch (CRC-32C) and rebuilds the indexes; each of them dies the same
way, so every run recovers the same crashed log. The reference is a sequential read of
the same ``.log`` files in 1 MiB chunks, in the same page cache state: cold (evicted with
``posix_fadvise(DONTNEED)``, where the OS allows it) and warm (read once just before).

Why ratios: absolute numbers on shared machines and disks move by tens of percent from
run to run; the raw write and the plain read run on the same disk at the same time, so
segment/raw and recovery/read cancel most of that noise. ``--repeat`` interleaves the
targets and reports medians.

    /work/venv/bin/python benchmarks/storage.py [--batch-bytes 16384] [--total-mb 512] [--json out.json]
"""

from __future__ import annotations

import argparse
import cProfile
import ctypes
import json
import logging
import mmap
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path

from brokkr.core.broker import Broker
from brokkr.core.log import StoredTopic
from brokkr.core.protocol.records import build_batch, iter_batches_untrusted, patch_batch
from brokkr.plugins.storage.segment import files
from brokkr.plugins.storage.segment.segment import LogSegment

MiB = 1 << 20
READ_CHUNK = MiB
TOPIC = "bench"
LEADER_EPOCH = 0
PROFILE_LINES = 20
APPEND_METRICS = ("mib_per_s", "batches_per_s", "mib_per_s_fsync")


# -- the batch --------------------------------------------------------------------------------


def make_batch(batch_bytes: int, record_bytes: int) -> tuple[bytearray, int, int]:
    """The largest batch of null-key records with ``record_bytes`` values that fits in
    ``batch_bytes`` (at least one record): (bytes, record count, max timestamp)."""
    now_ms = int(time.time() * 1000)
    value = b"x" * record_bytes

    def build(n: int) -> bytes:
        return build_batch([(None, value)] * n, timestamp=now_ms)

    one, two = len(build(1)), len(build(2))
    per_record, overhead = two - one, 2 * one - two
    n = max(1, (batch_bytes - overhead) // per_record)
    batch = build(n)
    while len(batch) > batch_bytes and n > 1:  # offset/length varints grow with n
        n = max(1, n - 1 - (len(batch) - batch_bytes) // per_record)
        batch = build(n)
    (header,) = iter_batches_untrusted(batch)
    return bytearray(batch), n, header.max_timestamp


# -- the page cache -----------------------------------------------------------------------------


def evict(paths: list[Path]) -> bool:
    """Write the files back and ask the kernel to drop them from the page cache (no root
    needed). False where posix_fadvise does not exist."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def read_all(paths: list[Path]) -> int:
    """Read the files sequentially in 1 MiB chunks with plain reads; returns the bytes read."""
    total = 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            while chunk := os.read(fd, READ_CHUNK):
                total += len(chunk)
        finally:
            os.close(fd)
    return total


def resident_fraction(paths: list[Path]) -> float | None:
    """The fraction of the files' pages in the page cache, from mincore(2); None where
    that cannot be asked (not Linux/BSD, no libc through ctypes)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        c_mmap, c_munmap, c_mincore = libc.mmap, libc.munmap, libc.mincore
    except (OSError, AttributeError):
        return None
    c_mmap.restype = ctypes.c_void_p
    c_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    c_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    c_mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    failed = ctypes.c_void_p(-1).value
    resident = total = 0
    for path in paths:
        size = path.stat().st_size
        if not size:
            continue
        pages = -(-size // mmap.PAGESIZE)
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = c_mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr is None or addr == failed:
                return None
            try:
                vec = (ctypes.c_ubyte * pages)()
                if c_mincore(addr, size, vec) != 0:
                    return None
                resident += sum(b & 1 for b in bytes(vec))
                total += pages
            finally:
                c_munmap(addr, size)
        finally:
            os.close(fd)
    return resident / total if total else None


def filesystem_of(path: Path) -> str:
    """The filesystem type holding ``path``, from /proc/mounts ("?" elsewhere)."""
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                fields = line.split()
                inside = str(path) == fields[1] or str(path).startswith(fields[1].rstrip("/") + "/")
                if len(fields) > 2 and inside and len(fields[1]) > len(best):
                    best, fstype = fields[1], fields[2]
    except OSError:
        pass
    return fstype


# -- the storage ------------------------------------------------------------------------------


def storage_broker(log_dir: Path, args: argparse.Namespace) -> Broker:
    """A broker object that is never started: only its config, plugins and
    ``open_storage`` (codecs, then the brokkr_open_storage hook) are used."""
    config = {"brokkr.storage": "segment", "log.dirs": str(log_dir), "log.segment.bytes": str(args.segment_bytes)}
    return Broker(config, entry_points=False)


def topic_overrides(args: argparse.Namespace) -> dict[str, str]:
    return {"flush.messages": str(args.flush_messages)} if args.flush_messages else {}


def open_new_log(log_dir: Path, args: argparse.Namespace):
    broker = storage_broker(log_dir, args)
    storage = broker.open_storage()
    topic = StoredTopic(TOPIC, uuid.uuid4(), 1, topic_overrides(args))
    storage.save_topics([topic])
    return storage, storage.open_log(topic, 0, broker.config.topic_config(topic.configs))


def append_batches(plog, batch: bytearray, records: int, max_timestamp: int, first: int, count: int) -> int:
    """Append ``count`` copies of ``batch`` from offset ``first``; returns the next offset.
    SegmentLog.append writes the bytes out before it returns and keeps no reference, so
    one buffer is reused (patched in place, as Partition.append patches each batch)."""
    offset = first
    last_delta = records - 1
    for _ in range(count):
        patch_batch(batch, 0, offset, LEADER_EPOCH)
        plog.append(batch, offset, offset + last_delta, max_timestamp, records)
        offset += records
    return offset


def run_segment_append(
    directory: Path, batch: bytearray, records: int, max_ts: int, args, n_batches: int, profile: bool = False
) -> dict:
    log_dir = directory / "segment-append"
    storage, plog = open_new_log(log_dir, args)
    try:
        offset = append_batches(plog, batch, records, max_ts, 0, 1)  # warm-up: creates files, epoch checkpoint
        profiler = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        offset = append_batches(plog, batch, records, max_ts, offset, n_batches)
        if profiler:
            profiler.disable()
        written = time.perf_counter()
        plog.flush()
        storage.flusher.submit(int).result()  # and any fsync of rolled segments still queued
        synced = time.perf_counter()
        if offset != plog.log_end_offset or offset != (n_batches + 1) * records:
            raise RuntimeError(f"log end offset {plog.log_end_offset}, expected {offset}")
        segments = len(plog.segments())
    finally:
        plog.close()
        storage.close()
        shutil.rmtree(log_dir)
    if profiler:
        print_profile(profiler, "segment append")
    return timings("segment", written - start, synced - start, n_batches, len(batch), segments)


def run_raw_write(directory: Path, batch: bytearray, records: int, args, n_batches: int) -> dict:
    """The reference: the same bytes, the same flags as a segment file (O_APPEND), the
    same flush policy."""
    path = directory / "raw-write.bin"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    flush_every = args.flush_messages or 0
    size = len(batch)
    try:
        os.write(fd, batch)  # warm-up, as for the segment log
        unflushed = 0
        start = time.perf_counter()
        for _ in range(n_batches):
            if os.write(fd, batch) != size:  # a regular file takes it whole, unless the disk is full
                raise RuntimeError("short write")
            unflushed += records
            if flush_every and unflushed >= flush_every:
                os.fsync(fd)
                unflushed = 0
        written = time.perf_counter()
        os.fsync(fd)
        synced = time.perf_counter()
    finally:
        os.close(fd)
        path.unlink()
    return timings("raw", written - start, synced - start, n_batches, len(batch), 1)


def timings(target: str, write_s: float, synced_s: float, n_batches: int, batch_len: int, segments: int) -> dict:
    size = n_batches * batch_len
    return {
        "target": target,
        "mib_per_s": size / MiB / write_s,
        "batches_per_s": n_batches / write_s,
        "mib_per_s_fsync": size / MiB / synced_s,
        "write_s": write_s,
        "write_fsync_s": synced_s,
        "bytes": size,
        "segments": segments,
    }


# -- recovery -----------------------------------------------------------------------------------


def in_child(fn: Callable[[], dict]) -> dict:
    """Run ``fn`` in a forked child that ends with os._exit: nothing is closed or flushed,
    exactly as when a broker process dies. Returns what ``fn`` returned."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        code = 0
        try:
            out = fn()
        except BaseException:
            out, code = {"error": traceback.format_exc()}, 1
        sys.stderr.flush()
        os.write(write_end, json.dumps(out).encode())
        os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    out = json.loads(b"".join(chunks) or b"{}")
    if os.waitstatus_to_exitcode(status) != 0 or "error" in out:
        raise RuntimeError(f"child process failed: {out.get('error', f'wait status {status}')}")
    return out


def write_crashed_log(log_dir: Path, batch: bytearray, records: int, max_ts: int, args, n_batches: int) -> dict:
    def write() -> dict:
        _, plog = open_new_log(log_dir, args)
        end = append_batches(plog, batch, records, max_ts, 0, n_batches)
        return {"log_end_offset": end, "segments": len(plog.segments())}  # then os._exit: a crash

    out = in_child(write)
    # What a crash leaves, and the recovery point at 0 so that every segment is recovered.
    if (log_dir / files.CLEAN_SHUTDOWN).exists():
        raise RuntimeError("the clean-shutdown marker exists after a crash")
    files.write_offset_checkpoint(log_dir / files.RECOVERY_POINT_CHECKPOINT, {(TOPIC, 0): 0})
    return out


def recover_once(log_dir: Path, args, profile: bool) -> dict:
    """In a child: open the storage and the partition after the crash, timed. The child
    dies without closing anything, so the next run finds the same unclean state."""

    def recover() -> dict:
        broker = storage_broker(log_dir, args)
        recovered: list[tuple[int, int]] = []
        plain_recover = LogSegment.recover

        def counting_recover(segment: LogSegment) -> int:  # proof that the recovery path ran
            truncated = plain_recover(segment)
            recovered.append((segment.size, truncated))
            return truncated

        LogSegment.recover = counting_recover  # this child only; it exits right after
        profiler = cProfile.Profile() if profile else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        storage = broker.open_storage()
        (topic,) = storage.load_topics()
        plog = storage.open_log(topic, 0, broker.config.topic_config(topic.configs))
        if profiler:
            profiler.disable()
        elapsed = time.perf_counter() - start
        if profiler:
            print_profile(profiler, "recovery")
        return {
            "seconds": elapsed,
            "clean": any(storage.clean.values()),
            "segments": len(plog.segments()),
            "recovered_segments": len(recovered),
            "recovered_bytes": sum(size for size, _ in recovered),
            "truncated_bytes": sum(t for _, t in recovered),
            "log_end_offset": plog.log_end_offset,
        }

    return in_child(recover)


def prepare_cache(state: str, paths: list[Path], logs: list[Path]) -> float | None:
    """Put the partition's files in the page cache state asked for; returns the resident
    fraction of the ``.log`` files."""
    if state == "cold":
        evict(paths)
    else:
        read_all(paths)
    return resident_fraction(logs)


def run_recovery(directory: Path, batch: bytearray, records: int, max_ts: int, args) -> dict:
    log_dir = directory / "recovery"
    n_batches = max(1, args.recovery_mb * MiB // len(batch))
    written = write_crashed_log(log_dir, batch, records, max_ts, args, n_batches)
    part_dir = log_dir / f"{TOPIC}-0"
    logs = sorted(part_dir.glob(f"*{files.LOG_SUFFIX}"))
    size = sum(p.stat().st_size for p in logs)
    everything = sorted(p for p in part_dir.iterdir() if p.is_file())
    states = ["warm"]
    cold_note = None
    if evict(everything):
        resident = resident_fraction(logs)
        if resident is None or resident < 0.05:
            states.insert(0, "cold")
            if resident is None:
                cold_note = "evicted with posix_fadvise(DONTNEED); residency not verifiable here"
        else:
            cold_note = f"posix_fadvise(DONTNEED) left {resident:.0%} of the log cached: cold runs skipped"
    else:
        cold_note = "no posix_fadvise here: cold runs skipped"

    runs: dict[str, list[dict]] = {state: [] for state in states}
    for r in range(args.repeat):
        for state in states:
            pair = {}
            order = ("read", "recovery") if r % 2 == 0 else ("recovery", "read")  # cancel order effects
            for what in order:
                resident = prepare_cache(state, everything, logs)
                if what == "read":
                    start = time.perf_counter()
                    n = read_all(logs)
                    pair["read_s"] = time.perf_counter() - start
                    pair["read_resident"] = resident
                    if n != size:
                        raise RuntimeError(f"read {n} bytes of {size}")
                else:
                    out = recover_once(log_dir, args, profile=False)
                    check_recovered(out, written, size)
                    pair["recovery_s"] = out["seconds"]
                    pair["recovery_resident"] = resident
            runs[state].append(pair)
    if args.profile:
        prepare_cache("warm", everything, logs)
        recover_once(log_dir, args, profile=True)
    shutil.rmtree(log_dir)

    summary = {}
    for state, pairs in runs.items():
        read_s = statistics.median(p["read_s"] for p in pairs)
        recovery_s = statistics.median(p["recovery_s"] for p in pairs)
        residents = [p[k] for p in pairs for k in ("read_resident", "recovery_resident") if p[k] is not None]
        summary[state] = {
            "read_s": read_s,
            "recovery_s": recovery_s,
            "read_mib_per_s": size / MiB / read_s,
            "recovery_mib_per_s": size / MiB / recovery_s,
            "recovery_over_read": recovery_s / read_s,
            "resident_min": min(residents) if residents else None,
            "resident_max": max(residents) if residents else None,
        }
    return {
        "bytes": size,
        "batches": n_batches,
        "segments": written["segments"],
        "cold_note": cold_note,
        "runs": runs,
        "median": summary,
    }


def check_recovered(out: dict, written: dict, size: int) -> None:
    """Every segment went through LogSegment.recover, nothing was cut, nothing was lost."""
    if (
        out["clean"]
        or out["recovered_segments"] != out["segments"]
        or out["recovered_bytes"] != size
        or out["truncated_bytes"]
    ):
        raise RuntimeError(f"the recovery path did not run as expected: {out}")
    if out["log_end_offset"] != written["log_end_offset"]:
        raise RuntimeError(f"recovered log end offset {out['log_end_offset']}, wrote {written['log_end_offset']}")


# -- output -------------------------------------------------------------------------------------


def print_profile(profiler: cProfile.Profile, title: str) -> None:
    print(f"\n--- cProfile: {title} (by own time) ---", file=sys.stderr)
    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(PROFILE_LINES)
    sys.stderr.flush()


def resident_text(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "?"
    return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}-{high:.0%}"


def print_tables(result: dict, args: argparse.Namespace, out) -> None:
    a = result["append"]
    flush = (
        f"flush.messages={args.flush_messages}" if args.flush_messages else "flush: left to the OS (Kafka's default)"
    )
    print(
        f"\nappend: {a['batches']:,} batches x {a['batch_len']:,} B ({a['records']} records x {args.record_bytes} B "
        f"values) = {a['bytes'] / MiB:,.0f} MiB, segment.bytes={args.segment_bytes}, {flush},\n"
        f"        in {result['dir']} ({result['filesystem']}), median of {args.repeat} run(s)",
        file=out,
    )
    header = f"{'target':<16}{'MiB/s':>10}{'batches/s':>12}{'MiB/s incl. fsync':>20}{'segments':>10}"
    print(header, file=out)
    print("-" * len(header), file=out)
    names = {"raw": "raw os.write", "segment": "SegmentLog"}
    for target, m in a["median"].items():
        print(
            f"{names[target]:<16}{m['mib_per_s']:>10,.0f}{m['batches_per_s']:>12,.0f}"
            f"{m['mib_per_s_fsync']:>20,.0f}{m['segments']:>10}",
            file=out,
        )
    ratio = a["ratio_segment_over_raw"]
    print(
        f"{'segment/raw':<16}{ratio['mib_per_s']:>10.3f}{ratio['batches_per_s']:>12.3f}{ratio['mib_per_s_fsync']:>20.3f}",
        file=out,
    )
    print("(higher is better; 1.0 = as fast as writing the bytes with os.write)", file=out)

    r = result["recovery"]
    print(
        f"\nrecovery: {r['bytes'] / MiB:,.0f} MiB log, {r['batches']:,} batches of {a['batch_len']:,} B, "
        f"{r['segments']} segment(s), unclean shutdown, recovery point 0, median of {args.repeat} run(s)",
        file=out,
    )
    header = (
        f"{'cache':<7}{'resident':>10}{'read s':>9}{'read MiB/s':>12}{'recovery s':>12}"
        f"{'recovery MiB/s':>16}{'recovery/read':>15}"
    )
    print(header, file=out)
    print("-" * len(header), file=out)
    for state, m in r["median"].items():
        print(
            f"{state:<7}{resident_text(m['resident_min'], m['resident_max']):>10}{m['read_s']:>9.2f}"
            f"{m['read_mib_per_s']:>12,.0f}{m['recovery_s']:>12.2f}{m['recovery_mib_per_s']:>16,.0f}"
            f"{m['recovery_over_read']:>15.2f}",
            file=out,
        )
    print(
        "(lower recovery/read is better; resident = share of the .log pages in the page cache when each timed\n"
        " phase started; read = plain 1 MiB reads of the .log files)",
        file=out,
    )
    if r["cold_note"]:
        print(f"note: {r['cold_note']}", file=out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-bytes", type=int, default=16384, help="largest batch size in bytes (default 16384)")
    parser.add_argument("--record-bytes", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--total-mb", type=int, default=512, help="MiB appended per append run (default 512)")
    parser.add_argument("--recovery-mb", type=int, default=1024, help="MiB in the recovered log (default 1024)")
    parser.add_argument(
        "--segment-bytes", type=int, default=1 << 30, help="log.segment.bytes (default 1073741824, Kafka's)"
    )
    parser.add_argument(
        "--flush-messages",
        type=int,
        default=0,
        help="flush.messages for the log, and an fsync every as many records for the raw writes "
        "(default: none, the OS decides, as Kafka's default)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per target; medians are reported (default 3)")
    parser.add_argument("--dir", help="where to put the temporary directory (default: the system's temp dir)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile one extra append run and one extra (warm) recovery with cProfile; the top "
        f"{PROFILE_LINES} functions go to stderr, the profiled runs stay out of the figures",
    )
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout, tables to stderr)"
    )
    args = parser.parse_args(argv)
    # Recovery warns once per run ("not shut down cleanly"): expected here, and checked instead.
    logging.getLogger("brokkr").setLevel(logging.ERROR)
    if not hasattr(os, "fork"):
        print("this benchmark needs os.fork (to simulate a crash)", file=sys.stderr)
        return 1

    batch, records, max_ts = make_batch(args.batch_bytes, args.record_bytes)
    n_batches = max(1, args.total_mb * MiB // len(batch))
    result: dict = {"config": vars(args)}
    try:
        with tempfile.TemporaryDirectory(prefix="brokkr-storage-bench-", dir=args.dir) as tmp:
            directory = Path(tmp)
            result["dir"], result["filesystem"] = str(directory), filesystem_of(directory.resolve())
            runs: dict[str, list[dict]] = {"raw": [], "segment": []}
            for _ in range(args.repeat):  # interleaved, so slow drifts hit both alike
                runs["raw"].append(run_raw_write(directory, batch, records, args, n_batches))
                runs["segment"].append(run_segment_append(directory, batch, records, max_ts, args, n_batches))
            if args.profile:
                run_segment_append(directory, batch, records, max_ts, args, n_batches, profile=True)
            median = {
                target: {m: statistics.median(r[m] for r in rs) for m in APPEND_METRICS}
                | {"segments": rs[0]["segments"]}
                for target, rs in runs.items()
            }
            result["append"] = {
                "batches": n_batches,
                "batch_len": len(batch),
                "records": records,
                "bytes": n_batches * len(batch),
                "runs": runs,
                "median": median,
                "ratio_segment_over_raw": {m: median["segment"][m] / median["raw"][m] for m in APPEND_METRICS},
            }
            result["recovery"] = run_recovery(directory, batch, records, max_ts, args)
    except (OSError, RuntimeError) as exc:
        print(f"benchmark failed: {exc}", file=sys.stderr)
        return 1

    print_tables(result, args, sys.stderr if args.json == "-" else sys.stdout)  # keep stdout pure JSON
    if args.json:
        text = json.dumps(result, indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
