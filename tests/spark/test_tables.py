"""Topics as Iceberg and Delta tables (:mod:`brokkr.plugins.sinks.spark.tables`): real
producers, a real broker, Spark (local[2]) decoding, pyiceberg and deltalake committing;
the tables read back with pyiceberg and deltalake themselves."""

from __future__ import annotations

import functools
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pytest
from brokkr.plugins.sinks.spark import mirror
from brokkr.plugins.sinks.spark.sink import sink_of
from brokkr.plugins.sinks.spark.tables import TableSettings, tables_for

from tests.spark.test_mirror import _cli, _produce
from tests.waiting import wait_for

pytest.importorskip("pyspark")
pytest.importorskip("pyiceberg")
pytest.importorskip("deltalake")
confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("confluent_kafka.admin")

FORMATS = ("iceberg", "delta")


def settings(fmt: str, lake, **kwargs) -> TableSettings:
    return TableSettings(format=fmt, lake=str(lake), **kwargs)


def check_table(tables, topic: str, sent: dict) -> None:
    """Exactly the records sent: every (partition, offset) once, no gap, every field."""
    rows = tables.read(topic).to_pylist()
    got = {(r["kafka"]["partition"], r["kafka"]["offset"]): r for r in rows}
    assert len(got) == len(rows), "duplicates in the table"
    assert set(got) == set(sent)
    for key, (k, v, headers, ts) in sent.items():
        r = got[key]
        assert (r["key"], r["value"]) == (k, v)
        assert [(h["key"], h["value"]) for h in r["kafka"]["headers"]] == list(headers)
        assert int(r["kafka"]["timestamp"].timestamp() * 1000) == ts and r["kafka"]["timestamp_type"] == 0
        assert r["kafka"]["producer_id"] >= 0


def produced(brokkr_broker_factory, tmp_path, count: int = 300, **config) -> tuple:
    logs = tmp_path / "logs"
    broker = brokkr_broker_factory(
        {"log.dirs": str(logs), "num.partitions": "2", "log.segment.bytes": "4096", **config}
    )
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, count, sent)
    broker.stop()
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    return logs, sent, ends


@pytest.mark.parametrize("fmt", FORMATS)
def test_backfill_into_a_table_records_its_offsets_in_the_table(brokkr_broker_factory, tmp_path, spark, fmt):
    logs, sent, ends = produced(brokkr_broker_factory, tmp_path)
    lake = tmp_path / "lake"
    m = mirror.TableMirror(spark, settings(fmt, lake, flush_records=70))
    for _ in mirror.backfill(m, logs):
        pass
    check_table(m.tables, "orders", sent)
    fresh = tables_for(settings(fmt, lake))  # what the table itself says, nothing else
    assert {p: fresh.mirrored_offset("orders", p) for p in (0, 1)} == ends
    files = fresh.data_files("orders")
    for _ in mirror.backfill(mirror.TableMirror(spark, settings(fmt, lake)), logs):
        pass  # a replay: nothing to do
    assert fresh.data_files("orders") == files
    check_table(fresh, "orders", sent)


def test_a_commit_carries_at_most_flush_bytes_of_the_log(brokkr_broker_factory, tmp_path, spark):
    """What one commit brings from Spark's executors into the driver is bounded by bytes too
    (brokkr.sink.table.flush.bytes, batches as stored), not only by flush.records: 10 KB
    records, at most 35,000 bytes a commit, so 3 a commit; a batch larger than that alone
    goes in a commit of its own. The table's own record of each commit says so."""
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs)})
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "enable.idempotence": True}
    )
    sent: dict = {}

    def report(err, msg):
        assert err is None, err
        sent[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), [], msg.timestamp()[1])

    for i in range(20):
        size = 50_000 if i == 10 else 10_000  # offset 10: one batch over the bound
        producer.produce("big", key=b"k%d" % i, value=bytes([i]) * size, timestamp=1_700_000_000_000 + i,
                         on_delivery=report)  # fmt: skip
        assert producer.flush(10) == 0  # a batch per record
    del producer
    broker.stop()
    m = mirror.TableMirror(spark, settings("iceberg", lake, flush_bytes=35_000))
    for _ in mirror.backfill(m, logs):
        pass
    check_table(m.tables, "big", sent)
    table = m.tables.table("big")
    ranges = sorted(
        tuple(int(o) for o in s.summary.additional_properties["brokkr.range.0"].split("-")) for s in table.snapshots()
    )
    assert ranges == [(0, 2), (3, 5), (6, 8), (9, 9), (10, 10), (11, 13), (14, 16), (17, 19)]


def test_hand_overs_cut_at_batches_by_bytes_and_inside_batches_by_records(brokkr_broker_factory, tmp_path):
    """The ranges a table mirror commits, on a real segment of 4 batches of 5 records: each
    reads at most flush.bytes of batches (one larger batch alone) and covers at most
    flush.records offsets, from a start inside a batch too, with no gap and no overlap."""
    from brokkr.core.protocol.records import iter_batches_untrusted

    broker = brokkr_broker_factory({"log.dirs": str(tmp_path / "logs")})
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1000, "compression.type": "none"}
    )
    for _ in range(4):
        for _ in range(5):
            producer.produce("t", value=b"x" * 1000, partition=0)
        assert producer.flush(10) == 0  # one batch of 5
    del producer
    broker.stop()
    segment = tmp_path / "logs" / "t-0" / f"{0:020d}.log"
    batches = [(h.base_offset, h.last_offset + 1, h.size) for h in iter_batches_untrusted(segment.read_bytes())]
    assert [(a, b) for a, b, _ in batches] == [(0, 5), (5, 10), (10, 15), (15, 20)]
    one = batches[0][2]
    assert mirror.hand_overs(segment, 0, 20, 1000, 2 * one) == [(0, 10), (10, 20)]
    assert mirror.hand_overs(segment, 3, 20, 1000, 2 * one) == [(3, 10), (10, 20)]
    assert mirror.hand_overs(segment, 0, 12, 1000, 1) == [(0, 5), (5, 10), (10, 12)]  # a batch alone
    assert mirror.hand_overs(segment, 0, 20, 7, 2 * one) == [(0, 7), (7, 14), (14, 20)]
    for start, records, most in [(0, 1, one), (2, 3, one), (4, 6, 3 * one), (1, 100, one + 1), (0, 20, 10**9)]:
        ranges = mirror.hand_overs(segment, start, 20, records, most)
        assert [lo for lo, _ in ranges] == [start, *(hi for _, hi in ranges[:-1])] and ranges[-1][1] == 20
        for lo, hi in ranges:
            read = sum(size for first, after, size in batches if first < hi and after > lo)
            assert hi - lo <= records and (read <= most or hi - lo <= 5 and read == one), (lo, hi)


def mirrored(tables, ends: dict) -> bool:
    return all(tables.mirrored_offset("orders", p) >= end for p, end in ends.items())


def reported(lake) -> int:
    """The offsets mirrored so far, as the mirror reports them to the broker (a cheap
    file read to wait on; the table's own record is what the checks use)."""
    return sum(mirror.CommitLog(lake / mirror.COMMITS).all().values())


@pytest.mark.timeout(400)
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_sink_writes_a_table_exactly_once_through_kills_of_its_mirror(brokkr_broker_factory, tmp_path, fmt):
    """The mirror process is SIGKILLed at random moments while it commits (small commits:
    flush.records 40); each restart resumes from the table's own record."""
    lake = tmp_path / "lake"
    broker = brokkr_broker_factory(
        {
            "log.dirs": str(tmp_path / "logs"),
            "num.partitions": "2",
            "log.segment.bytes": "4096",
            "brokkr.sink.lake": str(lake),
            "brokkr.sink.format": fmt,
            "brokkr.sink.table.flush.records": "40",
            "brokkr.sink.spark.master": "local[1]",
            "brokkr.sink.active.interval.ms": "300",
            "brokkr.sink.poll.ms": "200",
        }
    )
    sent: dict = {}
    _produce(broker.bootstrap_servers, "orders", 0, 300, sent)
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    sink = sink_of(broker.broker)
    rng = random.Random(37)
    for _ in range(2):
        before = reported(lake)
        wait_for("a commit", lambda before=before: reported(lake) > before, 90)
        time.sleep(rng.uniform(0, 1.0))  # between two commits, or in one
        pid = sink.process.pid
        os.kill(pid, signal.SIGKILL)
        wait_for("the restarted mirror", lambda pid=pid: sink.process.pid != pid, 30)
    tables = tables_for(settings(fmt, lake))
    assert not mirrored(tables, ends)  # killed mid-way: the restarts finish the work
    wait_for("everything mirrored", lambda: reported(lake) >= sum(ends.values()), 150)
    assert mirrored(tables, ends)
    check_table(tables, "orders", sent)
    assert sink.restarts == 2
    broker.stop()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_compacted_topic_is_an_upsert_table(brokkr_broker_factory, tmp_path, spark, fmt):
    """The sink tells its mirror that a compacted topic's table holds the latest row per
    key; a tombstone deletes the key's row, also one written in an earlier commit."""
    lake = tmp_path / "lake"
    broker = brokkr_broker_factory(
        {
            "log.dirs": str(tmp_path / "logs"),
            "log.segment.bytes": "2048",
            "brokkr.sink.lake": str(lake),
            "brokkr.sink.format": fmt,
            "brokkr.sink.poll.ms": "100",
        }
    )
    sink = sink_of(broker.broker)
    broker.call(sink.stop)  # no mirror process: this test runs the mirror itself, on the shared Spark
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    new = confluent_kafka.admin.NewTopic("prices", 1, 1, config={"cleanup.policy": "compact"})
    typed = confluent_kafka.admin.NewTopic("typed", 1, 1, config={"brokkr.sink.table.mode": "value_schema_latest"})
    for future in admin.create_topics([new, typed]).values():
        future.result(10)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    producer.produce("typed", value=b"\x00")  # a partition the sink is told about
    latest: dict = {}
    for i in range(120):
        key = f"k{i % 10}".encode()
        value = None if i in (33, 113, 117, 118) else f"v{i}".encode()  # last ones for k3, k7, k8
        producer.produce("prices", key=key, value=value)
        latest[key] = value
        if i in (60, 119):
            producer.flush(10)
            broker.call(lambda: sink._refresh(sink._work_document()))
            work = json.loads(sink.work_file.read_text())
            tables = {p["topic"]: p["table"] for p in work["partitions"]}
            assert tables["prices"] == {"mode": None, "upsert": True}  # compacted: upserts
            assert tables["typed"] == {"mode": "value_schema_latest"}  # the topic's own mode
            m = mirror.TableMirror(spark, settings(fmt, lake, flush_records=50))
            deadline = time.monotonic() + 60
            done = functools.partial(lambda end, m: m.tables.mirrored_offset("prices", 0) == end, i + 1, m)
            mirror.follow(m, sink.work_file, 0.05, 0, lambda d=deadline, done=done: done() or time.monotonic() > d)
            assert done()
    rows = tables_for(settings(fmt, lake)).read("prices").to_pylist()
    assert {r["key"]: r["value"] for r in rows} == {k: v for k, v in latest.items() if v is not None}
    assert len(rows) == 7 and all(r["kafka"]["offset"] >= 110 for r in rows)


@pytest.mark.parametrize("fmt", FORMATS)
def test_aborted_transactions_never_reach_a_table(brokkr_broker_factory, tmp_path, spark, fmt):
    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs), "transaction.state.log.replication.factor": "1"})
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "lake-txn", "linger.ms": 0}
    )
    producer.init_transactions(30)
    committed = []
    for n, outcome in enumerate(("commit", "abort", "commit", "abort")):
        producer.begin_transaction()
        values = [f"{outcome}-{n}-{i}".encode() for i in range(5)]
        for value in values:
            producer.produce("txns", key=b"k", value=value, partition=0)
        if outcome == "commit":
            producer.commit_transaction(30)
            committed += values
        else:
            assert producer.flush(30) == 0  # written, then aborted (abort alone purges what is unsent)
            producer.abort_transaction(30)
    del producer
    partition = broker.broker.partition("txns", 0)
    wait_for("the last markers", lambda: partition.last_stable_offset == 24)  # 20 records, 4 markers
    broker.stop()
    m = mirror.TableMirror(spark, settings(fmt, lake))
    for _ in mirror.backfill(m, logs, ["txns"]):
        pass
    rows = sorted(m.tables.read("txns").to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [r["value"] for r in rows] == committed
    assert m.tables.mirrored_offset("txns", 0) == 24


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"brokkr.sink.format": "hudi"}, "brokkr.sink.format: must be one of parquet, iceberg, delta"),
        (
            {"brokkr.sink.format": "delta", "brokkr.sink.table.partition": "bucket(4, key)"},
            "bucket and truncate are Iceberg's",
        ),
        ({"brokkr.sink.table.partition": "weekly(timestamp)"}, "'weekly' is not a partition transform"),
        ({"brokkr.sink.table.partition": "day(kafka.when)"}, "the kafka struct has no field 'when'"),
        ({"brokkr.sink.table.mode": "avro"}, "must be one of key_value, value_schema_id_prefix"),
        ({"brokkr.sink.format": "delta"}, r"needs no_such_module_brokkr: pip install 'brokkr\[lake\]'"),
        (
            {"brokkr.sink.iceberg.catalog.type": "nessie", "brokkr.sink.format": "iceberg"},
            "brokkr.sink.iceberg.catalog.type 'nessie' is not one of rest",
        ),
        (
            {"brokkr.sink.iceberg.catalog.uri": "ftp://catalog", "brokkr.sink.format": "iceberg"},
            "brokkr.sink.iceberg.catalog.uri: ",
        ),
        (
            {"brokkr.sink.table.snapshot.retention.ms": "-1", "brokkr.sink.format": "iceberg"},
            "brokkr.sink.table.snapshot.retention.ms must be zero or more, not -1",
        ),
        (
            {"brokkr.sink.table.compact.interval.ms": "-5000", "brokkr.sink.format": "iceberg"},
            "brokkr.sink.table.compact.interval.ms must be zero or more",
        ),
    ],
)
def test_table_settings_are_checked_at_start(brokkr_broker_factory, tmp_path, monkeypatch, config, message):
    from brokkr.core.errors import ConfigError
    from brokkr.plugins.sinks.spark import tables

    monkeypatch.setitem(tables.NEEDS, "delta", ("no_such_module_brokkr",))  # a package not installed
    if config.get("brokkr.sink.format") == "delta" and "brokkr.sink.table.partition" in config:
        monkeypatch.undo()
    with pytest.raises(ConfigError, match=message):
        brokkr_broker_factory({"brokkr.sink.lake": str(tmp_path / "lake"), **config})


def test_brokkr_mirror_backfills_a_table_and_reports_status_from_it(brokkr_broker_factory, tmp_path):
    """``brokkr mirror --format iceberg``: a backfill with a progress bar; ``--status`` from the
    table's own record (brokkr's commit logs deleted: not what it reads)."""
    logs, sent, ends = produced(brokkr_broker_factory, tmp_path, count=200)
    lake = tmp_path / "lake"
    table = ("--format", "iceberg", "--iceberg-namespace", "kafka")
    out = _cli(logs, lake, "--status", *table)
    assert [int(line.split()[3]) for line in out.stdout.splitlines()[1:]] == [0, 0]
    done = _cli(logs, lake, "--master", "local[1]", "--flush-records", "60", *table)
    assert "mirroring" in done.stderr  # the progress bar
    assert done.stdout.splitlines() == [
        f"orders-{p}: mirrored up to offset {ends[p]} (log end {ends[p]})" for p in (0, 1)
    ]
    shutil.rmtree(lake / mirror.COMMITS)
    out = _cli(logs, lake, "--status", *table)
    assert [line.split()[1:] for line in out.stdout.splitlines()[1:]] == [
        [str(p), str(ends[p]), str(ends[p]), "0"] for p in (0, 1)
    ]
    tables = tables_for(settings("iceberg", lake, namespace="kafka"))
    check_table(tables, "orders", sent)
    history = [s.summary.additional_properties for s in tables.table("orders").snapshots()]
    ranges = [tuple(map(int, h["brokkr.range.0"].split("-"))) for h in history if "brokkr.range.0" in h]
    assert ranges[0][0] == 0 and ranges[-1][1] == ends[0] - 1  # each commit's range, in order: no gap, no overlap
    assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:])) and all(b - a < 60 for a, b in ranges)


ITEM_V1 = {
    "type": "record",
    "name": "Item",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}],
}
ITEM_V2 = {**ITEM_V1, "fields": [*ITEM_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_typed_tables_from_the_schema_registry(brokkr_broker_factory, tmp_path, spark, fmt):
    """value_schema_id_prefix: Avro (and a new version adding an optional field: the table
    evolves), JSON Schema and Protobuf values serialized by confluent-kafka against brokkr's
    registry become typed columns; a value that is not framed goes to the dead-letter table."""
    from brokkr.plugins.schema_registry import registry_of
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.spark.test_typed_rows import json_values, protobuf_values

    logs, lake = tmp_path / "logs", tmp_path / "lake"
    broker = brokkr_broker_factory({"log.dirs": str(logs), "brokkr.schema.registry.listeners": "http://127.0.0.1:0"})
    url = registry_of(broker.broker).server.urls[0]
    client = SchemaRegistryClient({"url": url})
    ctx = SerializationContext("items", MessageField.VALUE)
    v1, v2 = (AvroSerializer(client, json.dumps(s)) for s in (ITEM_V1, ITEM_V2))
    values = {
        "items": [v1({"id": 1, "name": "axe"}, ctx), v1({"id": 2, "name": "saw"}, ctx), b"not framed",
                  v2({"id": 3, "name": "adze", "note": "sharp"}, ctx), v2({"id": 4, "name": "awl", "note": None}, ctx)],
        "invoices": json_values(client),
        "shapes": protobuf_values(client),
    }  # fmt: skip
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})
    for topic, vs in values.items():
        for i, value in enumerate(vs):
            producer.produce(topic, key=f"k{i}".encode(), value=value, partition=0)
    assert producer.flush(10) == 0
    del producer
    m = mirror.TableMirror(spark, settings(fmt, lake, mode="value_schema_id_prefix", registry_url=url, flush_records=3))
    for _ in mirror.backfill(m, logs, values):
        pass
    client.close()
    items = sorted(m.tables.read("items").to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [(r["key"], r["id"], r["name"], r["note"]) for r in items] == [
        (b"k0", 1, "axe", None), (b"k1", 2, "saw", None), (b"k3", 3, "adze", "sharp"), (b"k4", 4, "awl", None)
    ]  # fmt: skip
    assert set(m.tables.schema("items").names) == {"key", "id", "name", "note", "kafka"}  # evolved: note added
    dead = m.tables.read("items_dlq").to_pylist()
    assert [(r["key"], r["value"], r["kafka"]["offset"]) for r in dead] == [(b"k2", b"not framed", 2)]
    assert "magic byte" in dead[0]["reason"]
    assert m.tables.mirrored_offset("items", 0) == 5
    assert m.tables.mirrored_offset("items_dlq", 0) == 3  # the commit (offsets 0..2) that had a dead letter
    invoices = sorted(m.tables.read("invoices").to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [(r["number"], r["customer"]) for r in invoices] == [(1, "ada"), (2, None)]
    shapes = sorted(m.tables.read("shapes").to_pylist(), key=lambda r: r["kafka"]["offset"])
    assert [(r["id"], r["phone"], r["where"]) for r in shapes] == [(1, None, {"x": -1, "y": 2}), (2, "123", None)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_partition_spec_and_maintenance(brokkr_broker_factory, tmp_path, spark, fmt):
    """brokkr.sink.table.partition is the table's partition spec; the mirror's scheduled
    maintenance compacts the small files of many small commits (keeping every row and the
    offsets record) and expires old snapshots (Iceberg) or vacuums removed files (Delta)."""
    logs, sent, ends = produced(brokkr_broker_factory, tmp_path, count=200)
    lake = tmp_path / "lake"
    table = settings(
        fmt,
        lake,
        partition="identity(kafka.partition), day(timestamp)",
        flush_records=20,
        compact_interval_s=0.01,
        compact_min_files=4,
        snapshot_retention_s=0,
    )
    m = mirror.TableMirror(spark, table)
    for _ in mirror.backfill(m, logs):
        pass
    tables = m.tables
    before = tables.data_files("orders")
    assert len(before) >= 10 and all("kafka_partition=" in f for f in before)  # one directory per partition
    day = "timestamp_day=2023-11-14"  # the records' timestamps: 1_700_000_000_000 + i ms
    assert all(day in f for f in before)
    if fmt == "iceberg":
        assert [(f.name, str(f.transform)) for f in tables.table("orders").spec().fields] == [
            ("kafka_partition", "identity"),
            ("kafka_timestamp_day", "day"),
        ]
    for _ in range(2):  # a round compacts one table partition: kafka.partition 0, then 1
        time.sleep(0.02)
        m.tick()  # due: compaction and expiry
    after = tables.data_files("orders")
    assert len(after) == 2  # one file per table partition (kafka.partition 0 and 1, one day)
    check_table(tables, "orders", sent)
    assert {p: tables.mirrored_offset("orders", p) for p in (0, 1)} == ends  # the record survives compaction
    if fmt == "iceberg":
        assert len(tables.table("orders").snapshots()) == 1  # the older ones expired
    else:
        assert sorted(p.name for p in (lake / "orders").rglob("*.parquet")) == sorted(
            f.rsplit("/", 1)[1] for f in after
        )


@pytest.mark.parametrize("fmt", FORMATS)
def test_spark_reads_the_tables_through_the_brokkr_table_data_source(brokkr_broker_factory, tmp_path, spark, fmt):
    logs, sent, ends = produced(brokkr_broker_factory, tmp_path, count=150)
    lake = tmp_path / "lake"
    m = mirror.TableMirror(spark, settings(fmt, lake, partition="identity(kafka.partition)", flush_records=40))
    for _ in mirror.backfill(m, logs):
        pass
    df = spark.read.format("brokkr_table").option("format", fmt).option("lake", str(lake)).load("orders")
    assert df.count() == len(sent)
    assert df.select("kafka.partition", "kafka.offset").distinct().count() == len(sent)
    for r in df.where("kafka.offset < 6").collect():
        k, v, headers, ts = sent[(r["kafka"]["partition"], r["kafka"]["offset"])]
        assert (r["key"], r["value"]) == (k, v)
        assert [(h["key"], bytes(h["value"])) for h in r["kafka"]["headers"]] == list(headers)
        assert int(r["kafka"]["timestamp"].timestamp() * 1000) == ts
    with pytest.raises(Exception, match="no iceberg table for the topic nothing|no delta table for the topic nothing"):
        spark.read.format("brokkr_table").option("format", fmt).option("lake", str(lake)).load("nothing").count()


def test_a_sigkill_of_the_broker_loses_and_repeats_nothing(tmp_path):
    """``brokkr serve`` with an Iceberg sink is SIGKILLed while its mirror commits (the
    mirror dies with it); a restarted broker's mirror resumes from the table."""
    from serve import Served

    lake = tmp_path / "lake"
    overrides = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(tmp_path / "logs"),
        "num.partitions": "2",
        "log.segment.bytes": "4096",
        "brokkr.sink.lake": str(lake),
        "brokkr.sink.format": "iceberg",
        "brokkr.sink.table.flush.records": "40",
        "brokkr.sink.spark.master": "local[1]",
        "brokkr.sink.active.interval.ms": "300",
        "brokkr.sink.poll.ms": "200",
    }
    args = [a for k, v in overrides.items() for a in ("--override", f"{k}={v}")]
    sent: dict = {}
    broker = Served(*args, cwd=tmp_path)
    try:
        _produce(broker.address, "orders", 0, 300, sent)
        wait_for("a commit", lambda: reported(lake) > 0, 90)
        mirror_pids = [
            int(p) for p in Path(f"/proc/{broker.proc.pid}/task/{broker.proc.pid}/children").read_text().split()
        ]
    finally:
        broker.kill()  # SIGKILL
    wait_for("the mirror's end", lambda: not any(Path(f"/proc/{pid}").exists() for pid in mirror_pids), 10)
    tables = tables_for(settings("iceberg", lake))
    ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
    assert not mirrored(tables, ends)
    broker = Served(*args, cwd=tmp_path)
    try:
        _produce(broker.address, "orders", 300, 100, sent)  # and more after the restart
        ends = {p: 1 + max(o for q, o in sent if q == p) for p in (0, 1)}
        wait_for("everything mirrored", lambda: reported(lake) >= sum(ends.values()), 150)
    finally:
        broker.kill()
    check_table(tables, "orders", sent)


class Crash(Exception):
    pass


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_crash_between_writing_files_and_committing_them(brokkr_broker_factory, tmp_path, spark, monkeypatch, fmt):
    """The crash hook fires in the second commit, its files written (Iceberg: inside the
    table's transaction), not committed; a restarted mirror resumes after the first commit."""
    logs, sent, ends = produced(brokkr_broker_factory, tmp_path, count=120)
    lake = tmp_path / "lake"

    calls = []

    def crash():  # the second commit's
        calls.append(1)
        if len(calls) == 2:
            raise Crash

    monkeypatch.setattr(mirror, "_maybe_crash", crash)
    m = mirror.TableMirror(spark, settings(fmt, lake, flush_records=30))
    with pytest.raises(Crash):
        for _ in mirror.backfill(m, logs):
            pass
    assert m.tables.mirrored_offset("orders", 0) == 30 and len(m.tables.read("orders")) == 30  # the first commit
    if fmt == "iceberg":
        assert list((lake / "brokkr" / "orders" / "data").glob("*.parquet"))  # written, never committed
    monkeypatch.undo()
    restarted = mirror.TableMirror(spark, settings(fmt, lake, flush_records=30))
    for _ in mirror.backfill(restarted, logs):
        pass
    check_table(restarted.tables, "orders", sent)


def test_the_mirror_process_gets_the_brokers_own_registry_and_the_catalog_in_its_environment(
    brokkr_broker_factory, tmp_path
):
    """Typed modes: the mirror is told the broker's own registry unless
    brokkr.sink.schema.registry.url says otherwise; Iceberg catalog properties (credentials)
    go in its environment, never on its command line."""
    from brokkr.plugins.schema_registry import registry_of

    broker = brokkr_broker_factory(
        {
            "log.dirs": str(tmp_path / "logs"),
            "brokkr.schema.registry.listeners": "http://127.0.0.1:0",
            "brokkr.sink.lake": str(tmp_path / "lake"),
            "brokkr.sink.format": "iceberg",
            "brokkr.sink.table.mode": "value_schema_id_prefix",
            "brokkr.sink.iceberg.catalog.s3.secret-access-key": "catalog-secret-7a1",
            "brokkr.sink.poll.ms": "100",
        }
    )
    sink = sink_of(broker.broker)
    pid = wait_for("the mirror process", lambda: sink.process and sink.process.pid)
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    url = registry_of(broker.broker).server.urls[0]
    assert f"--registry-url={url}".encode() in command and b"--table-mode=value_schema_id_prefix" in command
    assert b"catalog-secret-7a1" not in b" ".join(command)
    assert b"catalog-secret-7a1" in Path(f"/proc/{pid}/environ").read_bytes()
    broker.stop()


# -- what the typed modes need installed (the lake extra) ---------------------------------------

BLOCK_FASTAVRO = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "fastavro" or name.startswith("fastavro."):
            raise ModuleNotFoundError("No module named 'fastavro'", name=name)
sys.meta_path.insert(0, _Block())
"""


@pytest.fixture
def without_fastavro(tmp_path, monkeypatch):
    """Child processes (a ``brokkr serve``) in which fastavro cannot be imported."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_FASTAVRO)
    monkeypatch.setenv("PYTHONPATH", f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def test_a_typed_mode_without_its_packages_stops_the_broker_from_starting(tmp_path, without_fastavro):
    from tests.test_plugin_failures import brokkr

    done = brokkr(
        "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}",
        "--override", f"brokkr.sink.lake={tmp_path / 'lake'}", "--override", "brokkr.sink.format=delta",
        "--override", "brokkr.sink.table.mode=value_schema_latest", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "brokkr.sink.table.mode=value_schema_latest needs fastavro: pip install 'brokkr[lake]'" in done.stderr
    assert "Traceback" not in done.stderr and "listening" not in done.stderr


def test_a_topic_asking_a_typed_mode_without_its_packages_is_refused(tmp_path, without_fastavro):
    """CreateTopics answers INVALID_CONFIG, naming what to install, instead of a mirror that fails later."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.serve import Served

    served = Served(
        "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}", cwd=tmp_path
    )
    try:
        admin = AdminClient({"bootstrap.servers": served.address})
        typed = NewTopic("typed", 1, 1, config={"brokkr.sink.table.mode": "value_schema_id_prefix"})
        plain = NewTopic("plain", 1, 1, config={"brokkr.sink.table.mode": "key_value"})
        futures = admin.create_topics([typed, plain], request_timeout=10)
        futures["plain"].result(10)
        with pytest.raises(KafkaException) as refused:
            futures["typed"].result(10)
        error = refused.value.args[0]
        assert error.name() == "INVALID_CONFIG"
        assert "needs fastavro: pip install 'brokkr[lake]'" in error.str()
    finally:
        served.kill()


def test_the_lake_extra_installs_what_the_typed_modes_need():
    """``pip install 'brokkr[lake]'`` pulls the schema registry's formats (fastavro, jsonschema, protobuf)."""
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    lake = extras["lake"]
    assert "brokkr[schema-registry]" in lake or set(extras["schema-registry"]) <= set(lake)
    needed = {"fastavro", "jsonschema", "protobuf"}
    assert needed <= {r.split(">")[0].split("=")[0].split("[")[0] for r in extras["schema-registry"]}
