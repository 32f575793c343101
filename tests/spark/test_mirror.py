"""The Spark sink: a real client produces, the broker's mirror process writes Parquet
through Spark (local[2]), crashes and kills included; ``brokkr mirror`` backfills and
reports status; retention waits for sinks."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from brokkr.core.log import SegmentInfo
from brokkr.core.plugins import hookimpl
from brokkr.core.sinks import SinkProgress, retention_limit
from brokkr.plugins.sinks.spark import mirror
from brokkr.plugins.sinks.spark.sink import sink_of

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


# -- without Spark ----------------------------------------------------------------------


def _segs(*bases: int, end: int = 100) -> list[SegmentInfo]:
    return [SegmentInfo(b, n, 10) for b, n in zip(bases, [*bases[1:], end])]


def test_retention_limit_keeps_the_segment_holding_the_mirrored_offset():
    segs = _segs(0, 10, 20, 30)
    assert retention_limit(30, [None], segs) == 30
    assert retention_limit(30, [], segs) == 30
    assert retention_limit(30, [25], segs) == 20
    assert retention_limit(30, [25, 12], segs) == 10
    assert retention_limit(30, [5], segs) is None  # the first segment is not mirrored through
    assert retention_limit(30, [30], segs) == 30
    assert retention_limit(None, [5], segs) is None


def test_sink_progress_forgets_mirrored_segments():
    progress = SinkProgress()
    progress.seed("t", 0, _segs(0, 10, 20), 20)
    progress.segment_closed("t", 0, SegmentInfo(10, 20, 10))  # told twice: kept once
    assert [s.base_offset for s in progress.work[("t", 0)].closed] == [0, 10]
    progress.mark_mirrored("t", 0, 10)
    assert [s.base_offset for s in progress.work[("t", 0)].closed] == [10]
    assert progress.mirrored_offset("t", 0) == 10 and progress.mirrored_offset("t", 1) == 0


class HoldAt:
    def __init__(self, offset):
        self.offset = offset

    @hookimpl
    def brokkr_sink_mirrored_offset(self, partition, broker):
        return self.offset


def test_retention_never_deletes_what_a_sink_has_not_mirrored(brokkr_broker_factory, tmp_path):
    holder = HoldAt(0)
    broker = brokkr_broker_factory(
        {"log.dirs": str(tmp_path), "log.segment.bytes": "1024", "log.retention.check.interval.ms": "3600000"},
        plugins=(holder,),
    )
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for i in range(60):
        producer.produce("held", value=b"x" * 100, key=str(i).encode(), partition=0)
        producer.flush()
    producer.flush()
    p = broker.broker.topics["held"].partitions[0]
    segments = p.log.segments()
    assert len(segments) > 3

    def apply():  # as if every segment were far past retention.ms
        broker.call(lambda: broker.broker.apply_retention(now_ms=int(time.time() * 1000) + 10**12))

    apply()
    assert p.log.log_start_offset == 0  # retention.ms would drop every segment: held at 0
    holder.offset = segments[2].base_offset + 1
    apply()
    assert p.log.log_start_offset == segments[2].base_offset  # the segment holding the offset stays
    holder.offset = None
    apply()
    assert p.log.log_start_offset == p.log.log_end_offset  # the active segment too, as in Kafka


# -- with Spark -------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, start: int, count: int, sent: dict) -> None:
    """``count`` records over every codec, 2 partitions, keys/values/headers/timestamps
    recorded by (partition, offset) from the delivery reports."""
    for n, codec in enumerate(CODECS):
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "enable.idempotence": True,
                "linger.ms": 5,
                "batch.num.messages": 20,
            }
        )

        def report(headers, err, msg):
            assert err is None, err
            sent[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), headers, msg.timestamp()[1])

        for i in range(start + n, start + count, len(CODECS)):
            headers = [("h", f"{i}".encode()), ("codec", codec.encode())] if i % 3 else []
            producer.produce(
                topic,
                key=None if i % 7 == 0 else f"k{i}".encode(),
                value=None if i % 11 == 0 else f"value {i} ".encode() * (i % 5 + 1),
                headers=headers or None,
                partition=i % 2,
                timestamp=1_700_000_000_000 + i,
                on_delivery=functools.partial(report, headers),
            )
        assert producer.flush(30) == 0


def _wait_mirrored(commit_dir: Path, ends: dict, timeout: float = 90) -> None:
    commits = mirror.CommitLog(commit_dir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = commits.all()
        if all(done.get(("orders", p), 0) >= end for p, end in ends.items()):
            return
        time.sleep(0.2)
    raise AssertionError(f"not mirrored in time: {commits.all()} < {ends}")


def _check_lake(lake: Path, sent: dict, spark) -> None:
    table = pq.read_table(lake / "orders")  # hive partitioning: partition=<p> from the path
    rows = table.to_pylist()
    got = {(int(r["partition"]), r["offset"]): r for r in rows}
    assert len(got) == len(rows), "duplicates in the lake"
    assert set(got) == set(sent)
    for p in (0, 1):
        offsets = sorted(o for q, o in got if q == p)
        assert offsets == list(range(len(offsets))), "gap"
    for key, (k, v, headers, ts) in sent.items():
        r = got[key]
        assert (r["key"], r["value"], r["topic"]) == (k, v, "orders")
        assert [(h["key"], h["value"]) for h in r["headers"]] == list(headers)
        assert int(r["timestamp"].timestamp() * 1000) == ts and r["timestampType"] == 0
    df = spark.read.parquet(str(lake / "orders"))
    assert df.count() == len(sent)
    assert df.select("partition", "offset").distinct().count() == len(sent)
    sample = {(r["partition"], r["offset"]): r for r in df.where("offset < 5").collect()}
    for key, r in sample.items():
        assert (r["key"], r["value"]) == sent[key][:2]
        assert [(h["key"], bytes(h["value"])) for h in r["headers"]] == list(sent[key][2])


def test_sink_mirrors_exactly_once_through_a_kill(brokkr_broker_factory, tmp_path, spark):
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory(
        {
            "log.dirs": str(logs),
            "num.partitions": "2",
            "log.segment.bytes": "2048",  # several segments, lz4 and zstd batches included
            "brokkr.sink.lake": str(lake),
            "brokkr.sink.spark.master": "local[2]",
            "brokkr.sink.active.interval.ms": "300",
            "brokkr.sink.poll.ms": "200",
            "brokkr.sink.spark.conf.spark.sql.shuffle.partitions": "2",
            "brokkr.sink.spark.conf.spark.hadoop.fs.s3a.secret.key": "s3a-secret-9f2",
        }
    )
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, 500, sent)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    sink = sink_of(broker.broker)
    assert sink is not None
    commits = mirror.CommitLog(lake / mirror.COMMITS)
    deadline = time.monotonic() + 60
    while not commits.all() and time.monotonic() < deadline:  # the mirror process starts and commits...
        time.sleep(0.02)
    assert commits.all() and sink.restarts == 0
    pid = sink.process.pid
    # Spark settings reach the mirror in its environment, never on its command line (ps)
    assert b"s3a-secret-9f2" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"fs.s3a.secret.key" in Path(f"/proc/{pid}/environ").read_bytes()
    os.kill(pid, signal.SIGKILL)  # ...and is killed mid-way; the sink starts another, which finishes
    assert sum(commits.all().values()) < sum(ends.values())
    _wait_mirrored(lake / mirror.COMMITS, ends)
    assert sink.restarts == 1 and sink.process.pid != pid
    p0 = broker.broker.topics["orders"].partitions[0]
    assert len(p0.log.segments()) > 2  # closed segments and the active one were mirrored
    _check_lake(lake, sent, spark)
    broker.stop()
    assert sink.process.poll() is not None  # stopped with the broker
    out = _cli(logs, lake, "--status")
    lines = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [(t, int(p), int(end), int(m), int(lag)) for t, p, end, m, lag in lines] == [
        ("orders", p, ends[p], ends[p], 0) for p in (0, 1)
    ]


class Crash(Exception):
    pass


def test_crash_between_parquet_write_and_commit(brokkr_broker_factory, tmp_path, monkeypatch, spark):
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs), "num.partitions": "2", "log.segment.bytes": "4096"})
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, 300, sent)
    broker.stop()
    path = str(mirror.scan_log_dir(logs)[("orders", 0)][0])

    def crash():
        raise Crash

    monkeypatch.setattr(mirror, "_maybe_crash", crash)
    m = mirror.Mirror(spark, str(lake))
    with pytest.raises(Crash):
        m.mirror(mirror.Range("orders", 0, 0, 40, path))
    part = lake / "orders" / "partition=0"
    assert [f.name for f in part.iterdir()] == [mirror.data_name("orders", 0, 0, 39)]  # written, not committed
    assert m.commits.mirrored_offset("orders", 0) == 0
    monkeypatch.undo()
    restarted = mirror.Mirror(spark, str(lake))
    assert restarted.mirror(mirror.Range("orders", 0, 0, 30, path)) == 30  # a different range after the restart
    assert [f.name for f in part.iterdir()] == [mirror.data_name("orders", 0, 0, 29)]  # the leftover is gone
    assert restarted.mirror(mirror.Range("orders", 0, 0, 30, path)) == 0  # a replay: nothing to do
    for _ in mirror.backfill(restarted, logs):
        pass
    _check_lake(lake, sent, spark)


def _cli(logs: Path, lake: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    env.pop(mirror.CRASH_ONCE_ENV, None)
    cmd = [sys.executable, "-m", "brokkr.core.cli", "mirror", "--log-dir", str(logs), "--lake", str(lake), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_brokkr_mirror_backfills_and_reports_status(brokkr_broker_factory, tmp_path, spark):
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs), "num.partitions": "2", "log.segment.bytes": "4096"})
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, 500, sent)
    broker.stop()
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    out = _cli(logs, lake, "--status")
    assert [int(line.split()[-1]) for line in out.stdout.splitlines()[1:]] == [ends[0], ends[1]]  # all lagging
    done = _cli(logs, lake, "--master", "local[2]", "--topic", "orders")
    assert "mirroring" in done.stderr  # the progress bar
    _check_lake(lake, sent, spark)
    entry = json.loads((lake / mirror.COMMITS / "orders-0.json").read_text())
    assert entry["mirrored_offset"] == ends[0]
    assert len(entry["files"]) == len(list((lake / "orders" / "partition=0").iterdir())) > 1
    out = _cli(logs, lake, "--status")
    assert [int(line.split()[-1]) for line in out.stdout.splitlines()[1:]] == [0, 0]


def test_typed_columns_from_a_value_schema(brokkr_broker_factory, tmp_path, spark):
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs)})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})
    values = [b'{"item": "axe", "qty": 1}', b"not json", None, b'{"item": "hammer", "qty": 2}', b"[1, 2"]
    for value in values:
        producer.produce("orders", value=value, partition=0)
    assert producer.flush(10) == 0
    broker.stop()
    m = mirror.Mirror(spark, str(lake), value_schemas={"orders": "item STRING, qty INT"})
    for _ in mirror.backfill(m, logs):
        pass
    rows = sorted(spark.read.parquet(str(lake / "orders")).collect(), key=lambda r: r["offset"])
    assert [r["value"] for r in rows] == values  # raw bytes always kept
    assert [r["value_parse_error"] for r in rows] == [False, True, False, False, True]
    assert [r["value_parsed"] and (r["value_parsed"]["item"], r["value_parsed"]["qty"]) for r in rows] == [
        ("axe", 1),
        None,
        None,
        ("hammer", 2),
        None,
    ]
    assert json.loads((lake / mirror.COMMITS / "orders-0.json").read_text())["unparsable"] == 2


def listening_addresses(pid: int) -> set[str]:
    """The addresses process ``pid`` and its descendants (the mirror's JVM) listen on, from /proc."""
    pids, inodes = [pid], set()
    for p in pids:  # grows as children are found
        for tasks in Path(f"/proc/{p}").glob("task/*/children"):
            pids += [int(child) for child in tasks.read_text().split()]
        for fd in Path(f"/proc/{p}/fd").iterdir():
            with contextlib.suppress(OSError):  # closed meanwhile
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                address = ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
                found.add(str(getattr(address, "ipv4_mapped", None) or address))
    return found


def test_the_mirror_process_listens_on_loopback_only_and_keeps_spark_out_of_the_log(
    brokkr_broker_factory, tmp_path, capfd
):
    """The mirror's Spark driver (a local master) binds 127.0.0.1, not every interface; what
    it shares with the broker's log (standard error) holds no Spark warnings, start-up lines
    or progress bars."""
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory(
        {
            "log.dirs": str(logs),
            "num.partitions": "2",
            "log.segment.bytes": "2048",
            "brokkr.sink.lake": str(lake),
            "brokkr.sink.spark.master": "local[1]",
            "brokkr.sink.poll.ms": "200",
        }
    )
    _produce(broker.bootstrap_servers, "orders", 0, 50, {})
    commits = mirror.CommitLog(lake / mirror.COMMITS)
    deadline = time.monotonic() + 60
    while not commits.all() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert commits.all(), "mirrored"
    listening = listening_addresses(sink_of(broker.broker).process.pid)
    broker.stop()
    logged = capfd.readouterr().err
    assert listening == {"127.0.0.1"}, logged[-3000:]
    spark_lines = [line for line in logged.splitlines() if "INFO brokkr" not in line]
    assert "INFO brokkr.sink.spark: mirror process: Spark " in logged and "driver on 127.0.0.1" in logged
    assert not [line for line in spark_lines if "WARN" in line and "incubator modules" not in line], spark_lines
    assert not [line for line in spark_lines if "log4j" in line or "log level" in line or "[Stage" in line]
