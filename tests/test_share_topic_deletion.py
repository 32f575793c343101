"""A deleted topic's share state goes with it (Kafka's onMetadataUpdate of the share and group
coordinators for deleted topic ids): the share coordinator deletes the state of its
partitions (tombstones in ``__share_group_state``: a restart does not bring it back), the
share group forgets the topic in its share-state metadata (even an empty group, which no
heartbeat reaches), the data broker drops its share partitions; a topic recreated under the
same name starts where ``share.auto.offset.reset`` says. A real ShareConsumer and AdminClient."""

from __future__ import annotations

import pytest
from brokkr.plugins.groups import coordinator_of
from brokkr.plugins.share import share_coordinator_of, share_manager_of

from tests.test_share_consumer import FAST, poll_until, produce, set_group, share_consumer
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def consume(address: str, want: int) -> list:
    """What a share consumer of ``g`` gets of topic ``t``, acknowledged (implicitly, by a last poll)."""
    c = share_consumer(address, "g")
    try:
        got = [m for _, m in poll_until([c], want, 20)]
        got += [m for _, m in poll_until([c], 1, 1.5)]
    finally:
        c.close()
    return got


def test_a_deleted_topics_share_state_is_deleted_and_a_recreated_topic_starts_afresh(brokkr_broker_factory, tmp_path):
    settings = {**FAST, "log.dirs": str(tmp_path / "data")}
    b = brokkr_broker_factory(settings)
    address = b.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": address})
    admin.create_topics([NewTopic("t", 1)])["t"].result(10)
    set_group(address, "g", share_auto_offset_reset="earliest")
    produce(address, "t", [b"old-%d" % i for i in range(5)])
    assert [m.offset() for m in consume(address, 5)] == [0, 1, 2, 3, 4]

    old_id = b.broker.topics["t"].topic_id
    coordinator, groups = share_coordinator_of(b.broker), coordinator_of(b.broker)

    def state():
        s = coordinator.state(("g", old_id, 0))
        return s.start_offset if s is not None else None

    wait_for("all five acknowledged", lambda: state() == 5)
    assert old_id in groups.groups["g"].initialized
    admin.delete_topics(["t"])["t"].result(10)
    wait_for("t's share state deleted", lambda: state() is None, timeout=5)
    wait_for("the group forgot t", lambda: old_id not in groups.groups["g"].initialized, timeout=5)
    assert not [k for k in share_manager_of(b.broker).partitions if k[1] == old_id], "its share partitions dropped"

    admin.create_topics([NewTopic("t", 1)])["t"].result(10)
    produce(address, "t", [b"new-%d" % i for i in range(3)])
    again = consume(address, 3)
    assert [(m.offset(), m.value(), m.delivery_count()) for m in again] == [(i, b"new-%d" % i, 1) for i in range(3)], (
        "the new t from share.auto.offset.reset (earliest)"
    )
    new_id = b.broker.topics["t"].topic_id
    wait_for("the new t's records acknowledged", lambda: coordinator.state(("g", new_id, 0)).start_offset == 3)

    b.stop()
    restarted = brokkr_broker_factory(settings)
    coordinator = share_coordinator_of(restarted.broker)
    restarted.call(coordinator.wait_loaded)
    assert coordinator.state(("g", old_id, 0)) is None, "the tombstones stay: the old state is not loaded again"
    assert coordinator.state(("g", new_id, 0)).start_offset == 3
