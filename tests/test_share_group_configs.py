"""Groups' own settings (GROUP config resources, type 32) through confluent-kafka's
AdminClient: set, described with their sources, refused outside the broker's bounds with
Kafka's messages, deleted back to the broker's value, kept across a restart; and taken by
the groups they name (a consumer group's heartbeat interval)."""

from __future__ import annotations

import pytest
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient

from tests.serve import Served
from tests.test_share_group_membership import find_coordinator, member_id
from tests.waiting import wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

SET, DELETE = AlterConfigOpType.SET, AlterConfigOpType.DELETE


def alter(admin: AdminClient, group: str, *entries: tuple[str, str | None, AlterConfigOpType]) -> None:
    configs = [ConfigEntry(name, value, incremental_operation=op) for name, value, op in entries]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=configs)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()


def described(admin: AdminClient, group: str) -> dict:
    for future in admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values():
        return future.result()


def refusal(admin: AdminClient, group: str, name: str, value: str) -> str:
    with pytest.raises(KafkaException) as raised:
        alter(admin, group, (name, value, SET))
    error = raised.value.args[0]
    assert error.name() == "INVALID_CONFIG"
    return error.str()


def test_group_settings_are_set_described_bounded_and_deleted(brokkr_broker_factory):
    b = brokkr_broker_factory({"group.share.max.record.lock.duration.ms": 40000})
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    alter(admin, "g", ("share.auto.offset.reset", "earliest", SET), ("share.record.lock.duration.ms", "20000", SET))
    configs = described(admin, "g")
    assert (configs["share.auto.offset.reset"].value, configs["share.auto.offset.reset"].source) == (
        "earliest",
        ConfigSource.GROUP_CONFIG.value,
    )
    assert configs["share.record.lock.duration.ms"].value == "20000"
    assert configs["share.isolation.level"].value == "read_uncommitted"
    assert configs["share.renew.acknowledge.enable"].value == "true"
    assert configs["share.session.timeout.ms"].value == "45000"
    assert configs["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert described(admin, "other")["share.auto.offset.reset"].value == "latest", "another group keeps the default"
    # What S1's share partitions ask: the group's value, else the broker's.
    assert b.broker.group_configs.value("g", "share.record.lock.duration.ms") == "20000"
    assert b.broker.group_configs.value("other", "share.record.lock.duration.ms") == "30000"

    assert refusal(admin, "g", "share.record.lock.duration.ms", "50000") == (
        "share.record.lock.duration.ms must be in the range 15000 to 40000 inclusive."
    )
    assert refusal(admin, "g", "share.heartbeat.interval.ms", "50000") == (
        "share.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive."
    )
    assert refusal(admin, "g", "share.no.such.setting", "1") == "Unknown group config name: share.no.such.setting"
    assert "share.auto.offset.reset" in refusal(admin, "g", "share.auto.offset.reset", "by_duration:yesterday")
    assert "share.isolation.level" in refusal(admin, "g", "share.isolation.level", "read_everything")
    assert described(admin, "g")["share.record.lock.duration.ms"].value == "20000", "a refusal changes nothing"

    alter(admin, "g", ("share.record.lock.duration.ms", None, DELETE))
    configs = described(admin, "g")
    assert configs["share.record.lock.duration.ms"].value == "30000"
    assert configs["share.auto.offset.reset"].value == "earliest", "the other setting stays"


def test_a_consumer_group_takes_its_own_heartbeat_interval(brokkr_broker_factory):
    b = brokkr_broker_factory({})
    b.call(b.broker.create_topic, "t", 1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    alter(admin, "own", ("consumer.heartbeat.interval.ms", "7000", SET))
    assert refusal(admin, "own", "consumer.session.timeout.ms", "5000") == (
        "consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive."
    )
    spec = request_spec(68)
    with RawClient(b.bootstrap_servers) as client:
        intervals = {}
        for group in ("own", "default"):
            find_coordinator(client, group)
            body = spec.cls(
                group_id=group, member_id=member_id(), member_epoch=0, rebalance_timeout_ms=30000,
                subscribed_topic_names=["t"], topic_partitions=[],
            )  # fmt: skip
            answer = client.request(68, 1, body)
            assert answer.error_code == 0
            intervals[group] = answer.heartbeat_interval_ms
    assert intervals == {"own": 7000, "default": 5000}


def test_group_settings_survive_a_sigkill(tmp_path):
    args = ("--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}")
    served = Served(*args, cwd=tmp_path)
    try:
        alter(AdminClient({"bootstrap.servers": served.address}), "g", ("share.isolation.level", "read_committed", SET))
    finally:
        served.kill()
    restarted = Served(*args, cwd=tmp_path)
    try:
        configs = described(AdminClient({"bootstrap.servers": restarted.address}), "g")
        assert (configs["share.isolation.level"].value, configs["share.isolation.level"].source) == (
            "read_committed",
            ConfigSource.GROUP_CONFIG.value,
        )
    finally:
        restarted.kill()


def test_a_broker_refuses_share_settings_that_do_not_hold_together(tmp_path):
    from tests.test_tools import brokkr

    for setting, message in [
        ("group.share.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms must be greater than or equal to group.share.min.heartbeat.interval.ms"),
        ("group.share.session.timeout.ms=90000", "group.share.session.timeout.ms must be less than or equal to group.share.max.session.timeout.ms"),
        ("group.share.assignors=simple,simple", "group.share.assignors must contain exactly one assignor, but found 2"),
        ("group.share.record.lock.duration.ms=10000", "group.share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
        ("group.share.max.delivery.count.limit=4", "group.share.max.delivery.count.limit must be greater than or equal to group.share.delivery.count.limit"),
    ]:  # fmt: skip
        args = ("serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path}")
        refused = brokkr(*args, "--override", setting)
        assert refused.returncode != 0 and message in refused.stderr, refused.stderr


def test_group_settings_set_on_one_broker_reach_every_broker(brokkr_cluster):
    brokers = brokkr_cluster(2)
    alter(
        AdminClient({"bootstrap.servers": brokers[0].bootstrap_servers}),
        "g.1/x",
        ("share.delivery.count.limit", "7", SET),
    )
    for b in brokers:  # where S1's share partitions read it: on whichever broker leads the partition
        wait_for(
            "the setting on every broker",
            lambda b=b: b.call(b.broker.group_configs.value, "g.1/x", "share.delivery.count.limit") == "7",
        )
    configs = described(AdminClient({"bootstrap.servers": brokers[1].bootstrap_servers}), "g.1/x")
    assert (configs["share.delivery.count.limit"].value, configs["share.delivery.count.limit"].source) == (
        "7",
        ConfigSource.GROUP_CONFIG.value,
    )
    alter(
        AdminClient({"bootstrap.servers": brokers[1].bootstrap_servers}),
        "g.1/x",
        ("share.delivery.count.limit", None, DELETE),
    )
    wait_for(
        "the default again",
        lambda: brokers[0].call(brokers[0].broker.group_configs.value, "g.1/x", "share.delivery.count.limit") == "5",
    )


def test_a_groups_assignment_interval_is_taken_at_zero_only(brokkr_broker_factory):
    b = brokkr_broker_factory({})
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
    configs = described(admin, "g")
    for name in ("share.assignment.interval.ms", "consumer.assignment.interval.ms"):
        assert (configs[name].value, configs[name].source) == ("0", ConfigSource.DEFAULT_CONFIG.value), name
    alter(admin, "g", ("share.assignment.interval.ms", "0", SET), ("consumer.assignment.interval.ms", "0", SET))
    assert described(admin, "g")["share.assignment.interval.ms"].source == ConfigSource.GROUP_CONFIG.value
    for name in ("share.assignment.interval.ms", "consumer.assignment.interval.ms"):
        assert refusal(admin, "g", name, "1000") == (
            f"invalid value '1000' for configuration {name}: brokkr takes only 0: "
            "a group's target assignment is computed at once, in the heartbeat that finds it out of date"
        )
