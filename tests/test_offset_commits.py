"""Offset commits as a real client makes them: many asynchronous commits in flight from one
librdkafka consumer, each answered, the last one the group's offset; what the coordinator
applied to memory (without decoding the records it wrote) is what a restart reads back
from ``__consumer_offsets``. A coordinator's cache of key hashes stays bounded."""

from __future__ import annotations

import time

import pytest
from brokkr.plugins.coordinator_partitions import HASHES_KEPT, partition_for
from brokkr.plugins.groups import coordinator_of

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, TopicPartition  # noqa: E402

COMMITS = 200


def _consumer(bootstrap: str, answers: list) -> Consumer:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g",
            "enable.auto.commit": False,
            "on_commit": lambda err, partitions: answers.append((err, partitions)),
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition("t", 0)])
    return consumer


def test_asynchronous_commits_are_all_answered_and_the_last_survives_a_restart(tmp_path, brokkr_broker_factory):
    config = {"group.initial.rebalance.delay.ms": 0, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(config)
    b.call(b.broker.create_topic, "t", 1)
    answers: list = []
    consumer = _consumer(b.bootstrap_servers, answers)
    try:
        consumer.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)  # finds it; no on_commit
        for i in range(1, COMMITS + 1):
            consumer.commit(offsets=[TopicPartition("t", 0, i, f"m{i}", 3)], asynchronous=True)
            consumer.poll(0)
        deadline = time.monotonic() + 20
        while len(answers) < COMMITS and time.monotonic() < deadline:
            consumer.poll(0.05)
        assert [err for err, _ in answers] == [None] * COMMITS
        assert [p[0].offset for _, p in answers] == list(range(1, COMMITS + 1)), "answered in order"
        (committed,) = consumer.committed([TopicPartition("t", 0)], timeout=10)
        assert (committed.offset, committed.metadata, committed.leader_epoch) == (COMMITS, f"m{COMMITS}", 3)
    finally:
        consumer.close()
    applied = b.call(lambda: dict(coordinator_of(b.broker).offsets.get("g")))
    b.stop()

    again = brokkr_broker_factory(config)
    again.call(coordinator_of(again.broker).wait_loaded)
    assert again.call(lambda: dict(coordinator_of(again.broker).offsets.get("g"))) == applied
    consumer = _consumer(again.bootstrap_servers, [])
    try:
        (committed,) = consumer.committed([TopicPartition("t", 0)], timeout=10)
        assert (committed.offset, committed.metadata, committed.leader_epoch) == (COMMITS, f"m{COMMITS}", 3)
    finally:
        consumer.close()


def test_a_coordinators_key_hashes_are_kept_bounded(brokkr_broker):
    coordinator = coordinator_of(brokkr_broker.broker)
    keys = [f"group-{i}-ü" for i in range(HASHES_KEPT + 100)]
    assert [coordinator.partition_for(k) for k in keys] == [partition_for(k, coordinator.num_partitions) for k in keys]
    assert 0 < len(coordinator._hashes) <= HASHES_KEPT
