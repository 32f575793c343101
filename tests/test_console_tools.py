"""``brokkr console-producer`` and ``brokkr console-consumer``, run as a user runs them
(standard input in, standard output out) against a running broker, checked against a real
client (confluent-kafka) and Kafka's documented formats: keys, headers and separators,
``--from-beginning``, ``--max-messages``, ``--partition``/``--offset``, a ``--group``
that commits what was printed, ``--isolation-level read_committed``, compression, the
partition of a key, and the errors Kafka's tools report."""

from __future__ import annotations

import re

import pytest

from tests.test_tools import brokkr

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402


@pytest.fixture
def broker(brokkr_broker_factory):
    return brokkr_broker_factory({"group.initial.rebalance.delay.ms": 0})


def server(broker) -> tuple[str, str]:
    return ("--bootstrap-server", broker.bootstrap_servers)


def produce(broker, topic: str, lines: str, *options: str):
    done = brokkr("console-producer", *server(broker), "--topic", topic, *options, input=lines)
    assert done.returncode == 0, done.stderr
    return done


def consume(broker, topic: str, *options: str) -> list[str]:
    done = brokkr("console-consumer", *server(broker), "--topic", topic, *options)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def read_all(broker, topic: str, count: int) -> list:
    """The first ``count`` records of partition 0 of ``topic``, read by confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "checker"})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got = []
    try:
        while len(got) < count:
            msg = consumer.poll(10)
            assert msg is not None, f"only {len(got)} of {count} records"
            assert not msg.error(), msg.error()
            got.append(msg)
    finally:
        consumer.close()
    return got


def test_keys_and_headers_round_trip_in_kafkas_formats(broker):
    broker.call(broker.broker.create_topic, "t", 1)
    lines = "h1:v1,h2:v2\tk1\tfirst value\nh3:\tk2\tsecond\nNULL\tNULL\tNULL\n"
    produce(broker, "t", lines, "--property", "parse.key=true", "--property", "parse.headers=true",
            "--property", "null.marker=NULL")  # fmt: skip
    records = read_all(broker, "t", 3)  # what a real client reads
    assert [(m.key(), m.value(), m.headers()) for m in records] == [
        (b"k1", b"first value", [("h1", b"v1"), ("h2", b"v2")]),
        (b"k2", b"second", [("h3", b"")]),
        (None, None, None),
    ]
    printed = consume(broker, "t", "--from-beginning", "--max-messages", "3",
                      "--property", "print.timestamp=true", "--property", "print.partition=true",
                      "--property", "print.offset=true", "--property", "print.headers=true",
                      "--property", "print.key=true")  # fmt: skip
    stamps = [m.timestamp()[1] for m in records]
    assert printed == [
        f"CreateTime:{stamps[0]}\tPartition:0\tOffset:0\th1:v1,h2:v2\tk1\tfirst value",
        f"CreateTime:{stamps[1]}\tPartition:0\tOffset:1\th3:\tk2\tsecond",
        f"CreateTime:{stamps[2]}\tPartition:0\tOffset:2\tNO_HEADERS\tnull\tnull",
    ]


def test_separators_and_null_literal_are_kafkas_properties(broker):
    broker.call(broker.broker.create_topic, "t", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    producer.produce("t", value=None, key=b"k", headers=[("a", b"1"), ("b", None)])
    assert producer.flush(10) == 0
    printed = consume(broker, "t", "--from-beginning", "--max-messages", "1",
                      "--formatter-property", "print.key=true", "--formatter-property", "print.headers=true",
                      "--property", "key.separator= | ", "--property", "headers.separator=;",
                      "--property", "null.literal=<none>")  # fmt: skip
    assert printed == ["a:1;b:<none> | k | <none>"]
    only_key = consume(broker, "t", "--from-beginning", "--max-messages", "1",
                       "--property", "print.key=true", "--property", "print.value=false")  # fmt: skip
    assert only_key == ["k"]


def test_from_beginning_max_messages_and_timeout(broker):
    broker.call(broker.broker.create_topic, "t", 1)
    produce(broker, "t", "".join(f"m{i}\n" for i in range(5)))
    assert consume(broker, "t", "--timeout-ms", "500") == []  # from the end, as Kafka's tool starts
    done = brokkr("console-consumer", *server(broker), "--topic", "t", "--from-beginning", "--max-messages", "3")
    assert (done.returncode, done.stdout) == (0, "m0\nm1\nm2\n")
    assert done.stderr.endswith("Processed a total of 3 messages\n")
    assert consume(broker, "t", "--partition", "0", "--offset", "3", "--timeout-ms", "500") == ["m3", "m4"]
    assert consume(broker, "t", "--partition", "0", "--offset", "earliest", "--max-messages", "1") == ["m0"]


def test_a_group_continues_where_it_stopped(broker):
    broker.call(broker.broker.create_topic, "t", 2)
    produce(broker, "t", "".join(f"k{i}\tv{i}\n" for i in range(10)), "--property", "parse.key=true")
    first = consume(broker, "t", "--group", "g", "--from-beginning", "--max-messages", "6")
    second = consume(broker, "t", "--group", "g", "--timeout-ms", "1000")  # no --from-beginning: the group's offsets
    assert len(first) == 6 and sorted(first + second) == sorted(f"v{i}" for i in range(10))
    assert consume(broker, "t", "--group", "g", "--timeout-ms", "500") == []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    try:
        committed = consumer.committed([confluent_kafka.TopicPartition("t", p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    assert sum(tp.offset for tp in committed) == 10


def test_read_committed_hides_an_aborted_transaction(broker):
    broker.call(broker.broker.create_topic, "t", 1)
    txn = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "tx"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce("t", b"aborted-1")
    txn.produce("t", b"aborted-2")
    assert txn.flush(10) == 0  # written, then aborted (librdkafka drops what it has not sent)
    txn.abort_transaction(10)
    txn.begin_transaction()
    txn.produce("t", b"committed")
    txn.commit_transaction(10)
    produce(broker, "t", "plain\n")
    committed = consume(broker, "t", "--from-beginning", "--isolation-level", "read_committed", "--timeout-ms", "1000")
    assert committed == ["committed", "plain"]
    everything = consume(broker, "t", "--from-beginning", "--timeout-ms", "1000")
    assert everything == ["aborted-1", "aborted-2", "committed", "plain"]


def test_keys_go_to_the_partitions_kafkas_partitioner_picks(broker):
    from kafka.partitioner.default import murmur2  # kafka-python's port of Kafka's Utils.murmur2

    broker.call(broker.broker.create_topic, "t", 4)
    keys = [f"key-{i}" for i in range(20)]
    produce(broker, "t", "".join(f"{k}:{k}\n" for k in keys), "--property", "parse.key=true",
            "--property", "key.separator=:")  # fmt: skip
    printed = consume(broker, "t", "--from-beginning", "--max-messages", "20", "--property", "print.partition=true")
    placed = {value: int(part.removeprefix("Partition:")) for part, value in (line.split("\t") for line in printed)}
    assert placed == {k: (murmur2(k.encode()) & 0x7FFFFFFF) % 4 for k in keys}
    assert len(set(placed.values())) > 1


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_compressed_batches_both_ways(broker, codec):
    broker.call(broker.broker.create_topic, "t", 1)
    produce(broker, "t", "a\nb\n", "--compression-codec", codec)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "compression.type": codec})
    producer.produce("t", b"c")
    assert producer.flush(10) == 0
    assert [m.value() for m in read_all(broker, "t", 3)] == [b"a", b"b", b"c"]
    assert consume(broker, "t", "--from-beginning", "--max-messages", "3") == ["a", "b", "c"]


def test_producer_errors_are_reported_per_record(broker):
    broker.call(broker.broker.create_topic, "t", 1)
    big = "x" * 300
    done = brokkr("console-producer", *server(broker), "--topic", "t", "--producer-property", "max.request.size=200",
                  input=f"small\n{big}\nlast\n")  # fmt: skip
    assert done.returncode == 1
    assert re.search(
        r"Error when sending message to topic t with key: null, value: 300 bytes with error: RECORD_TOO_LARGE: "
        r"The message is \d+ bytes when serialized which is larger than 200, which is the value of the "
        r"max.request.size configuration.",
        done.stderr,
    ), done.stderr
    unparsable = brokkr("console-producer", *server(broker), "--topic", "t", "--property", "parse.key=true",
                        input="k\tv\nno separator\nnever\n")  # fmt: skip
    assert unparsable.returncode == 1
    assert "No key separator found on line number 2: 'no separator'" in unparsable.stderr
    assert consume(broker, "t", "--from-beginning", "--timeout-ms", "500") == ["small", "last", "v"]


def test_a_refused_record_and_its_batch_are_reported(broker):
    broker.call(broker.broker.create_topic, "compacted", 1, {"cleanup.policy": "compact"})
    done = brokkr("console-producer", *server(broker), "--topic", "compacted", "--property", "parse.key=true",
                  "--property", "ignore.error=true", input="k\tkept\nwithout a key\n")  # fmt: skip
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines == [
        "Error when sending message to topic compacted with key: 1 bytes, value: 4 bytes with error: INVALID_RECORD: "
        "Failed to append record because it was part of a batch which had one more more invalid records",
        "Error when sending message to topic compacted with key: null, value: 13 bytes with error: INVALID_RECORD: "
        "Compacted topic cannot accept message without key in topic partition compacted-0",
    ]


@pytest.mark.parametrize(
    "options,message",
    [
        (("--offset", "3"), "The partition is required when offset is specified."),
        (("--partition", "0", "--offset", "3", "--from-beginning"), "Options from-beginning and offset cannot"),
        (("--partition", "0", "--offset", "-1"), "The provided offset value '-1' is incorrect."),
        (("--partition", "0", "--group", "g"), "Options group and partition cannot be specified together."),
        (("--group", "a", "--consumer-property", "group.id=b"), "Detected group ids: 'a', 'b'"),
        (
            ("--from-beginning", "--consumer-property", "auto.offset.reset=latest"),
            "Can't simultaneously specify --from-beginning and 'auto.offset.reset=latest'",
        ),
    ],
)
def test_consumer_option_errors_are_kafkas(options, message):
    done = brokkr("console-consumer", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", *options)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_reader_properties_that_clash_are_refused():
    done = brokkr("console-producer", "--bootstrap-server", "127.0.0.1:1", "--topic", "t",
                  "--property", "headers.separator=:", input="x\n")  # fmt: skip
    assert done.returncode == 2 and "headers.separator and headers.key.separator may not be equal" in done.stderr
