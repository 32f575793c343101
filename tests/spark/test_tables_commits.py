"""Fast checks of :mod:`brokkr.plugins.sinks.spark.tables` without Spark: Arrow rows as the
executors shape them, committed with pyiceberg and deltalake into a temporary lake, read back
with them."""

from __future__ import annotations

import datetime
import json
import os

import pyarrow as pa
import pytest
from brokkr.plugins.sinks.spark.tables import KEY_VALUE_SCHEMA, TableSettings, tables_for

from tests.spark.test_typed_rows import registry  # noqa: F401  (the fixture: a broker serving its registry)

pytest.importorskip("pyiceberg")
pytest.importorskip("deltalake")

FORMATS = ("iceberg", "delta")
T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def rows(partition: int, offsets, keys=None, values=None) -> pa.Table:
    """key_value rows of ``offsets`` (key ``k<offset>`` and value ``v<offset>`` unless given)."""
    offsets = list(offsets)
    keys = keys if keys is not None else [f"k{o}".encode() for o in offsets]
    values = values if values is not None else [f"v{o}".encode() for o in offsets]
    kafka = [
        {
            "partition": partition,
            "offset": o,
            "timestamp": T0 + datetime.timedelta(seconds=o),
            "timestamp_type": 0,
            "headers": [],
            "producer_id": -1,
        }
        for o in offsets
    ]
    return pa.Table.from_pydict({"key": keys, "value": values, "kafka": kafka}, schema=KEY_VALUE_SCHEMA)


def offsets(tables, topic: str) -> list[tuple[int, int]]:
    return sorted((r["kafka"]["partition"], r["kafka"]["offset"]) for r in tables.read(topic).to_pylist())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_replayed_range_adds_no_offset_twice(tmp_path, fmt):
    """The table's own record is read again on the snapshot the commit builds on: a range
    committed already (a mirror that read the record before another committed it, a replay)
    adds only what the table lacks."""
    tables = tables_for(TableSettings(format=fmt, lake=str(tmp_path / "lake")))
    assert tables.commit("t", 0, 0, 10, rows(0, range(10))) == 10
    assert tables.commit("t", 0, 0, 10, rows(0, range(10))) == 0  # the same range again
    assert tables.commit("t", 0, 5, 15, rows(0, range(5, 15))) == 5  # overlapping: its new half
    assert tables.mirrored_offset("t", 0) == 15
    assert offsets(tables, "t") == [(0, o) for o in range(15)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_mirrors_on_one_lake_never_duplicate(tmp_path, fmt):
    """Two writers, each sure from its own earlier read that nothing is mirrored, commit the
    same offsets of a partition: the second adds nothing; other partitions keep their record."""
    lake = str(tmp_path / "lake")
    a, b = (tables_for(TableSettings(format=fmt, lake=lake)) for _ in range(2))
    assert a.mirrored_offset("t", 0) == b.mirrored_offset("t", 0) == 0
    a.commit("t", 0, 0, 20, rows(0, range(20)))
    a.commit("t", 1, 0, 4, rows(1, range(4)))
    assert b.commit("t", 0, 0, 20, rows(0, range(20))) == 0
    b.commit("t", 1, 4, 6, rows(1, range(4, 6)))
    assert offsets(a, "t") == [(0, o) for o in range(20)] + [(1, o) for o in range(6)]
    assert (b.mirrored_offset("t", 0), b.mirrored_offset("t", 1)) == (20, 6)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_replayed_upsert_range_keeps_the_latest_row_per_key(tmp_path, fmt):
    """Upserts: the last record of a key (by offset) wins within a commit and across commits,
    a tombstone deletes it, a record with no key is not kept (and breaks nothing), and a
    replayed older range does not bring old values back."""
    tables = tables_for(TableSettings(format=fmt, lake=str(tmp_path / "lake")))
    first = rows(0, range(6), keys=[b"a", b"b", b"a", None, b"c", b"b"], values=[b"1", b"2", b"3", b"x", b"4", None])
    tables.commit("t", 0, 0, 6, first, upsert=True)
    second = rows(0, range(6, 8), keys=[b"a", b"c"], values=[b"5", None])
    tables.commit("t", 0, 6, 8, second, upsert=True)
    tables.commit("t", 0, 0, 6, first, upsert=True)  # replayed: the table has it already
    got = {r["key"]: (r["value"], r["kafka"]["offset"]) for r in tables.read("t").to_pylist()}
    assert got == {b"a": (b"5", 6)}
    assert tables.mirrored_offset("t", 0) == 8


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_commit_that_loses_a_race_fails_and_adds_nothing(tmp_path, fmt):
    """Two mirrors on one lake: the other commits the same range while this one's files are
    written and its commit pending (Iceberg: inside its transaction). Optimistic concurrency
    fails this one's commit (pyiceberg must not retry it on the winner's snapshot); each
    offset is in the table once, and every partition's record is intact."""
    lake = str(tmp_path / "lake")
    a, b = (tables_for(TableSettings(format=fmt, lake=lake)) for _ in range(2))
    a.commit("t", 1, 0, 2, rows(1, range(2)))
    from deltalake.exceptions import CommitFailedError
    from pyiceberg.exceptions import CommitFailedException

    with pytest.raises(CommitFailedException if fmt == "iceberg" else CommitFailedError):
        a.commit("t", 0, 0, 10, rows(0, range(10)), crash=lambda: b.commit("t", 0, 0, 10, rows(0, range(10))))
    assert offsets(a, "t") == [(0, o) for o in range(10)] + [(1, 0), (1, 1)]
    assert (a.mirrored_offset("t", 0), a.mirrored_offset("t", 1)) == (10, 2)
    assert a.commit("t", 0, 0, 12, rows(0, range(12))) == 2  # the loser, started over: the rest


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_latest_row_of_a_key_is_the_one_of_the_highest_offset(tmp_path, fmt):
    """Typed rows come grouped by schema id, not in offset order: the row kept is the
    key's record of the highest offset, wherever it stands among the rows."""
    tables = tables_for(TableSettings(format=fmt, lake=str(tmp_path / "lake")))
    shuffled = pa.concat_tables(
        [rows(0, [3, 4], keys=[b"a", b"b"], values=[b"new", None]), rows(0, [0, 1], keys=[b"a", b"b"])]
    )
    tables.commit("t", 0, 0, 5, shuffled, upsert=True)
    assert [(r["key"], r["value"]) for r in tables.read("t").to_pylist()] == [(b"a", b"new")]


AVRO = {
    "type": "record",
    "name": "Price",
    "fields": [{"name": "sku", "type": "string"}, {"name": "cents", "type": "long"}],
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_typed_upsert_table_takes_tombstones_as_deletes(registry, tmp_path, fmt):  # noqa: F811
    """Typed rows have no ``value`` column: a compacted topic's tombstone (a key, a null
    value) still deletes the key's row instead of crashing the commit or going to the
    dead-letter table; a null value without a key is a dead letter."""
    from brokkr.plugins.sinks.spark.tables import decode_batches, typed_rows
    from brokkr.plugins.sinks.spark.typed import ValueTyper
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    url, client = registry
    serialize = AvroSerializer(client, json.dumps(AVRO))

    def value(sku: str, cents: int) -> bytes:
        return serialize({"sku": sku, "cents": cents}, SerializationContext("prices", MessageField.VALUE))

    sent = rows(
        0,
        range(5),
        keys=[b"a", b"b", b"a", b"b", None],
        values=[value("a", 1), value("b", 2), value("a", 3), None, None],
    )
    typer = ValueTyper(url, "prices", "value_schema_id_prefix")
    decoded = pa.Table.from_batches(list(decode_batches(typer, sent.to_batches())))
    tables = tables_for(TableSettings(format=fmt, lake=str(tmp_path / "lake"), mode="value_schema_id_prefix"))
    good, dead = typed_rows(decoded, typer, tables.schema("prices"), "prices", tombstones=True)
    assert [(r["kafka"]["offset"], r["reason"]) for r in dead.to_pylist()] == [(4, "the value is null")]
    tables.commit("prices", 0, 0, 5, good, upsert=True)
    table = tables.read("prices")
    assert table.column_names == ["key", "sku", "cents", "kafka"]
    assert [(r["key"], r["sku"], r["cents"]) for r in table.to_pylist()] == [(b"a", "a", 3)]


def test_a_value_field_named_kafka_or_key_sends_its_records_to_the_dead_letters(registry, tmp_path, caplog):  # noqa: F811
    """The table's own ``key`` and ``kafka`` columns are not shadowed: a schema whose record
    has such a field is refused for the table with a logged error naming it, and its records
    are dead letters with why; the other schema's records are rows."""
    from brokkr.plugins.sinks.spark.tables import decode_batches, typed_rows
    from brokkr.plugins.sinks.spark.typed import ValueTyper
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    url, client = registry
    ctx = SerializationContext("clash", MessageField.VALUE)
    clash = {**AVRO, "fields": [*AVRO["fields"], {"name": "kafka", "type": "string", "default": ""}]}
    good = AvroSerializer(client, json.dumps(AVRO))({"sku": "a", "cents": 1}, ctx)
    bad = AvroSerializer(client, json.dumps(clash))
    bad_value = bad({"sku": "b", "cents": 2, "kafka": "x"}, ctx)
    sent = rows(0, range(2), values=[good, bad_value])
    typer = ValueTyper(url, "clash", "value_schema_id_prefix")
    decoded = pa.Table.from_batches(list(decode_batches(typer, sent.to_batches())))
    with caplog.at_level("ERROR", logger="brokkr.sink.spark"):
        table, dead = typed_rows(decoded, typer, None, "clash")
    assert table.column_names == ["key", "sku", "cents", "kafka"]
    assert [r["kafka"]["offset"] for r in table.to_pylist()] == [0]
    assert [(r["kafka"]["offset"], r["value"]) for r in dead.to_pylist()] == [(1, bad_value)]
    assert "'kafka' has the name of the table's own kafka column" in dead.column("reason")[0].as_py()
    assert "clash: schema id" in caplog.text and "go to clash_dlq" in caplog.text


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_widened_column_evolves_an_iceberg_table_and_is_refused_by_a_delta_one(registry, tmp_path, fmt):  # noqa: F811
    """A new schema version widens int to long: Iceberg widens the table's column before
    the rows that need it; deltalake cannot change a column's type (a long that does not
    fit an int would fail every commit), so there those records are dead letters, with why."""
    from brokkr.plugins.sinks.spark.tables import decode_batches, typed_rows
    from brokkr.plugins.sinks.spark.typed import ValueTyper
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    url, client = registry
    ctx = SerializationContext(f"widen-{fmt}", MessageField.VALUE)
    v1 = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "int"}]}
    v2 = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]}
    tables = tables_for(TableSettings(format=fmt, lake=str(tmp_path / "lake"), mode="value_schema_id_prefix"))
    typer = ValueTyper(url, f"widen-{fmt}", "value_schema_id_prefix")
    widen = fmt != "delta"
    for first, schema, n in ((0, v1, 1), (1, v2, 2**40)):
        sent = rows(0, [first], values=[AvroSerializer(client, json.dumps(schema))({"n": n}, ctx)])
        decoded = pa.Table.from_batches(list(decode_batches(typer, sent.to_batches())))
        good, dead = typed_rows(decoded, typer, tables.schema(f"widen-{fmt}"), f"widen-{fmt}", widen=widen)
        tables.commit(f"widen-{fmt}", 0, first, first + 1, good)
    got = [r["n"] for r in tables.read(f"widen-{fmt}").to_pylist()]
    if widen:
        assert tables.schema(f"widen-{fmt}").field("n").type == pa.int64() and sorted(got) == [1, 2**40]
        assert len(dead) == 0
    else:
        assert tables.schema(f"widen-{fmt}").field("n").type == pa.int32() and got == [1]
        assert "n: a column of int32 cannot become int64" in dead.column("reason")[0].as_py()
    assert tables.mirrored_offset(f"widen-{fmt}", 0) == 2


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_typed_table_is_partitioned_by_a_value_column(tmp_path, fmt):
    """The typed modes' columns come from the value's schema: a partition spec naming one is
    taken at start (a key_value table's still refuses it) and partitions the table."""
    spec = "identity(region), day(timestamp)"
    with pytest.raises(ValueError, match="no column 'region'"):
        TableSettings(format=fmt, lake=str(tmp_path / "kv"), partition=spec).check()
    settings = TableSettings(format=fmt, lake=str(tmp_path / "lake"), mode="value_schema_latest", partition=spec)
    settings.check()
    tables = tables_for(settings)
    kv = rows(0, range(4))
    typed = pa.table({"key": kv.column("key"), "region": ["eu", "us", "eu", "eu"], "kafka": kv.column("kafka")})
    tables.commit("t", 0, 0, 4, typed)
    assert sorted(r["region"] for r in tables.read("t").to_pylist()) == ["eu", "eu", "eu", "us"]
    if fmt == "iceberg":
        spec_fields = [f.name for f in tables.table("t").spec().fields]
        assert spec_fields == ["region", "kafka_timestamp_day"]
    else:
        assert tables.table("t").metadata().partition_columns == ["region", "kafka_timestamp_day"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_one_maintenance_round_rewrites_a_bounded_share_of_the_small_files(tmp_path, fmt):
    """However many small files a table holds, one compaction round rewrites about one target
    file's worth of them (at least compact.min.files), all of one table partition, into one:
    here 3 of 12; later rounds take the next ones. Rows, their partition values and the
    offsets record stay as they were, and the table takes commits after it."""
    lake = str(tmp_path / "lake")
    spec = "identity(kafka.partition)"
    writer = tables_for(TableSettings(format=fmt, lake=lake, partition=spec))
    for i in range(12):
        p = i % 2
        writer.commit("t", p, 10 * (i // 2), 10 * (i // 2 + 1), rows(p, range(10 * (i // 2), 10 * (i // 2 + 1))))
    files = writer.data_files("t")
    assert len(files) == 12
    sizes = {
        p: sorted(os.path.getsize(f.removeprefix("file://")) for f in files if f"kafka_partition={p}/" in f)
        for p in (0, 1)
    }
    target = max(sum(s[:3]) for s in sizes.values())  # three of a partition's smallest fit, a fourth would not
    settings = TableSettings(format=fmt, lake=lake, partition=spec, compact_min_files=2, target_file_bytes=target)
    tables = tables_for(settings)
    expected = [(p, o) for p in (0, 1) for o in range(60)]
    rounds, left = [], 12
    while replaced := tables.compact("t"):
        rounds.append(replaced)
        left += 1 - replaced  # the files of one partition into one
        assert len(tables.data_files("t")) == left
        assert offsets(tables, "t") == expected
        assert len(rounds) < 12
    assert rounds[0] == 3 and all(2 <= r <= 3 for r in rounds), rounds
    assert left <= 4  # at most one small file per partition left, and a compacted one
    read = tables.read("t").to_pylist()
    assert all(r["value"] == f"v{r['kafka']['offset']}".encode() for r in read)
    if fmt == "delta":  # the compacted files' partition values, in the log, select their rows
        ones = tables.table("t").to_pyarrow_table(filters=[("kafka_partition", "=", 1)]).to_pylist()
        assert sorted(r["kafka"]["offset"] for r in ones) == list(range(60))
        assert all(r["kafka"]["partition"] == r["kafka_partition"] == 1 for r in ones)
    assert (tables.mirrored_offset("t", 0), tables.mirrored_offset("t", 1)) == (60, 60)
    assert tables.commit("t", 0, 60, 62, rows(0, [60, 61])) == 2
    assert offsets(tables, "t") == sorted([*expected, (0, 60), (0, 61)])
