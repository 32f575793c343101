"""Every hookspec is documented, and a plugin implementing every hook sees each one called
on a real broker driven by a real client."""

from __future__ import annotations

import inspect
from collections import Counter

import pytest
from brokkr.core import hookspecs
from brokkr.core.authorization import AuthorizationResult
from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.context import Principal
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import BUILTIN_PLUGINS, create_plugin_manager, hookimpl
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from confluent_kafka import Consumer, Producer, TopicPartition
from txn_wire import UNVERIFIED, end_txn, txn_batch, txn_produce
from wire import METADATA, PRODUCE, batch, metadata_body, produce_body

HOOKS = sorted(name for name in dir(hookspecs) if name.startswith("brokkr_"))


@pytest.mark.parametrize("name", HOOKS)
def test_hookspec_is_documented(name):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    assert len(doc) > 80, f"{name} needs a real docstring"
    assert "Called" in doc, f"{name} must say when and how often it is called"
    params = [p for p in inspect.signature(getattr(hookspecs, name)).parameters]
    for p in params:
        if p != "broker":
            assert p in doc, f"{name} must document its argument {p}"


class EveryHook:
    """Implements every hook; records each call; changes nothing that matters."""

    def __init__(self):
        self.calls: Counter[str] = Counter()
        self.principals: list[Principal] = []

    @hookimpl
    def brokkr_config_definitions(self):
        self.calls["brokkr_config_definitions"] += 1
        return [ConfigDef("every.hook.greeting", ConfigType.STRING, "hello", "A setting owned by a plugin.")]

    @hookimpl
    def brokkr_broker_started(self, broker):
        self.calls["brokkr_broker_started"] += 1
        assert broker.config["every.hook.greeting"] == "hi"

    @hookimpl
    def brokkr_broker_starting(self, broker):
        self.calls["brokkr_broker_starting"] += 1
        assert broker.storage is not None and not broker.listeners[0].port

    @hookimpl
    def brokkr_broker_stopping(self, broker):
        self.calls["brokkr_broker_stopping"] += 1

    @hookimpl
    def brokkr_cluster_membership(self, broker):
        self.calls["brokkr_cluster_membership"] += 1  # no answer: the broker runs alone

    @hookimpl
    def brokkr_decode_request(self, header, body):
        self.calls["brokkr_decode_request"] += 1
        return None  # defer to the built-in decoder

    @hookimpl
    def brokkr_authenticate(self, connection):
        self.calls["brokkr_authenticate"] += 1
        return Principal("User", f"client-at-{connection.client_host}")

    @hookimpl
    def brokkr_authorize(self, context, actions):
        self.calls["brokkr_authorize"] += 1
        self.principals.append(context.principal)
        return [AuthorizationResult.ALLOWED for _ in actions]

    @hookimpl
    def brokkr_acl_store(self, broker):
        self.calls["brokkr_acl_store"] += 1
        return None  # defer to the built-in ACL authorizer (off: SECURITY_DISABLED)

    @hookimpl
    def brokkr_quota_throttle_ms(self, usage):
        self.calls["brokkr_quota_throttle_ms"] += 1
        return 0

    @hookimpl
    def brokkr_client_quota_store(self, broker):
        self.calls["brokkr_client_quota_store"] += 1
        return None

    @hookimpl
    def brokkr_sasl_mechanisms(self, broker):
        self.calls["brokkr_sasl_mechanisms"] += 1
        return []

    @hookimpl
    def brokkr_apis(self):
        self.calls["brokkr_apis"] += 1
        return []

    @hookimpl
    def brokkr_internal_topics(self):
        self.calls["brokkr_internal_topics"] += 1
        return []

    @hookimpl
    def brokkr_codecs(self):
        self.calls["brokkr_codecs"] += 1
        return []

    @hookimpl
    def brokkr_validate_records(self, partition, records):
        self.calls["brokkr_validate_records"] += 1
        return None

    @hookimpl
    def brokkr_open_storage(self, broker):
        self.calls["brokkr_open_storage"] += 1
        return None

    @hookimpl
    def brokkr_produce_complete(self, partition, required_offset):
        self.calls["brokkr_produce_complete"] += 1
        return True

    @hookimpl
    def brokkr_after_log_append(self, partition, info):
        self.calls["brokkr_after_log_append"] += 1
        assert info.last_offset >= info.first_offset

    @hookimpl
    def brokkr_high_watermark_advanced(self, partition, old, new):
        self.calls["brokkr_high_watermark_advanced"] += 1
        assert new > old

    @hookimpl
    def brokkr_segment_rolled(self, partition, segment):
        self.calls["brokkr_segment_rolled"] += 1
        assert segment.next_offset > segment.base_offset

    @hookimpl
    def brokkr_sink_mirrored_offset(self, partition):
        self.calls["brokkr_sink_mirrored_offset"] += 1
        return None

    @hookimpl
    def brokkr_connection_closed(self, connection):
        self.calls["brokkr_connection_closed"] += 1
        assert connection.connection_id

    @hookimpl
    def brokkr_became_leader(self, partition):
        self.calls["brokkr_became_leader"] += 1
        assert partition.is_leader

    @hookimpl
    def brokkr_topic_deleted(self, topic, broker):
        self.calls["brokkr_topic_deleted"] += 1
        assert topic.name not in broker.topics and all(p.deleted for p in topic.partitions)

    @hookimpl
    def brokkr_request_completed(self, header, response, elapsed_ms):
        self.calls["brokkr_request_completed"] += 1
        assert elapsed_ms >= 0 and response is not None

    @hookimpl
    def brokkr_transaction_verify(self, transactional_id, producer_id, producer_epoch, partitions):
        self.calls["brokkr_transaction_verify"] += 1
        return None  # no coordinator here: no verification

    @hookimpl
    def brokkr_txn_marker_written(self, partition, marker, offset):
        self.calls["brokkr_txn_marker_written"] += 1
        assert offset < partition.log.log_end_offset and marker.committed

    @hookimpl
    def brokkr_metrics_collectors(self, broker):
        self.calls["brokkr_metrics_collectors"] += 1
        return []


def test_a_plugin_implementing_every_hook_sees_every_hook_called(brokkr_broker_factory):
    plugin = EveryHook()
    config = {"every.hook.greeting": "hi", "log.segment.bytes": "300", "brokkr.metrics.port": "0", **UNVERIFIED}
    broker = brokkr_broker_factory(config, plugins=[plugin])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "acks": "all", "linger.ms": 0})
    for i in range(10):
        producer.produce("hooks", key=b"k%d" % i, value=b"x" * 100)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("hooks", 0, 0)])
    got = [m for m in (consumer.poll(5) for _ in range(10)) if m is not None and not m.error()]
    consumer.close()
    assert len(got) == 10
    from brokkr.core.testing import RawClient

    with RawClient(broker.bootstrap_servers) as c:  # the ACL and quota admin APIs ask for their stores
        c.request(
            29, 3, request_spec(29).cls(resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1)
        )
        c.request(48, 1, request_spec(48).cls(components=[]))
    # A hand-driven transaction: a transactional batch, then its COMMIT marker.
    assert txn_produce(broker, "hooks", txn_batch([b"t"], 9000)).error_code == 0
    assert end_txn(broker, 9000, True, [("hooks", 0)]) == {("hooks", 0): 0}
    broker.call(lambda: broker.broker.apply_retention(now_ms=2**62))  # every closed segment is past retention.ms
    broker.call(broker.broker.delete_topic, "hooks")
    broker.stop()
    # Leading no more happens on a cluster only: tests/cluster/ checks that hook.
    alone = set(HOOKS) - {"brokkr_became_follower"}
    assert alone == set(plugin.calls), f"never called: {alone - set(plugin.calls)}"
    assert plugin.calls["brokkr_segment_rolled"] >= 2
    assert all(p.name == "client-at-127.0.0.1" for p in plugin.principals)


def test_builtin_plugins_register_under_stable_names_and_can_be_disabled():
    pm = create_plugin_manager(entry_points=False)
    assert [name for name, _ in pm.list_name_plugin()][: len(BUILTIN_PLUGINS)] == list(BUILTIN_PLUGINS)
    pm = create_plugin_manager(disabled=["brokkr.plugins.storage.memory"], entry_points=False)
    assert pm.get_plugin("brokkr.plugins.storage.memory") is None
    with pytest.raises(ValueError, match="essential"):
        create_plugin_manager(disabled=["brokkr.core.default_decoder"], entry_points=False)


def test_with_no_storage_plugin_the_broker_refuses_to_start(brokkr_broker_factory):
    # blocking the storage in use is refused before (tests/test_builtin_plugins.py)
    disabled = "brokkr.plugins.storage.memory,brokkr.plugins.storage.segment"
    with pytest.raises(ConfigError, match="no storage plugin answers brokkr.storage='nonesuch'"):
        brokkr_broker_factory({"brokkr.plugins.disabled": disabled, "brokkr.storage": "nonesuch"})


def test_a_users_firstresult_plugin_wins_over_the_builtin(brokkr_broker_factory):
    from brokkr.core.testing import RawClient

    class DenyWrites:
        @hookimpl
        def brokkr_authorize(self, actions):
            return [AuthorizationResult.DENIED if a.operation == 4 else AuthorizationResult.ALLOWED for a in actions]

    broker = brokkr_broker_factory(plugins=[DenyWrites()])
    broker.call(broker.broker.create_topic, "t")
    spec = request_spec(0)
    body = spec.cls(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            spec.struct("TopicProduceData")(
                name="t", partition_data=[spec.struct("PartitionProduceData")(index=0, records=batch())]
            )
        ],
    )
    with RawClient(broker.bootstrap_servers) as c:
        response = c.request(0, 9, body)
    assert response.responses[0].partition_responses[0].error_code == 29  # TOPIC_AUTHORIZATION_FAILED


class _Appends:
    def __init__(self):
        self.seen = 0

    @hookimpl
    def brokkr_after_log_append(self, info):
        self.seen += info.record_count


def test_hot_hooks_resolve_to_nothing_one_implementation_or_pluggy():
    pm = create_plugin_manager(entry_points=False)
    assert pm.hot.brokkr_segment_rolled is None, "nobody implements it: not called at all"
    first, second = _Appends(), _Appends()
    pm.register(first)
    direct = pm.hot.brokkr_after_log_append
    assert direct is not pm.hook.brokkr_after_log_append, "one plain implementation is called directly"

    class Info:
        record_count = 3

    assert direct(partition=None, info=Info, broker=None) == [] and first.seen == 3
    pm.register(second)
    assert pm.hot.brokkr_config_definitions is pm.hook.brokkr_config_definitions, "several: through pluggy"
    several = pm.hot.brokkr_after_log_append
    assert several is not pm.hook.brokkr_after_log_append, "an observer: each implementation called on its own"
    several(partition=None, info=Info, broker=None)
    assert (first.seen, second.seen) == (6, 3)
    pm.unregister(first)
    pm.unregister(second)
    assert pm.hot.brokkr_after_log_append is None
    assert pm.hot.brokkr_decode_request is not None, "firstresult: the built-in decoder, directly"


class _Positional:
    def __init__(self):
        self.calls = []

    @hookimpl
    def brokkr_after_log_append(self, info, partition):
        self.calls.append((info, partition))
        return "seen"

    @hookimpl(tryfirst=True)
    def brokkr_decode_request(self, body):
        return ("decoded", body)


def test_one_implementation_is_called_positionally_as_pluggy_calls_it():
    pm = create_plugin_manager(entry_points=False)
    plugin = _Positional()
    pm.register(plugin)
    for impl in pm.hook.brokkr_after_log_append.get_hookimpls():  # a wrapper taking *args, as metrics' timing is
        impl.function = lambda *args, f=impl.function: f(*args)
    pm.hot.forget()
    assert pm.hot.brokkr_after_log_append(broker=3, info=2, partition=1) == ["seen"], "a list, as pluggy returns"
    assert pm.hook.brokkr_after_log_append(partition=1, info=2, broker=3) == ["seen"]
    assert plugin.calls == [(2, 1), (2, 1)], "in the order the implementation names them"
    pm.set_blocked("brokkr.core.default_decoder")  # so that the plugin's is the one decoder
    decode = pm.hot.brokkr_decode_request
    assert decode is not pm.hook.brokkr_decode_request, "firstresult, one implementation: directly"
    assert (
        decode(header=1, body=2, broker=3)
        == ("decoded", 2)
        == pm.hook.brokkr_decode_request(header=1, body=2, broker=3)
    )


def test_a_plugin_registered_while_serving_sees_the_next_request(brokkr_broker):
    observer = _Appends()
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("late")).topics[0].error_code == 0
        assert c.request(PRODUCE, 9, produce_body("late", batch(2))).responses
        brokkr_broker.pm.register(observer)
        assert c.request(PRODUCE, 9, produce_body("late", batch(3))).responses
        assert observer.seen == 3
        brokkr_broker.pm.unregister(observer)
        assert c.request(PRODUCE, 9, produce_body("late", batch(4))).responses
        assert observer.seen == 3


class _Leads:
    def __init__(self):
        self.led: list[tuple[str, int]] = []

    @hookimpl
    def brokkr_became_leader(self, partition, broker):
        self.led.append((partition.topic.name, partition.index))


def test_alone_the_broker_is_told_it_leads_every_partition_it_opens(brokkr_broker_factory, tmp_path):
    """brokkr_became_leader fires on a lone broker as on a cluster: for each partition of a
    new topic, of a topic's growth, and of every topic at the next start."""
    plugin = _Leads()
    settings = {"log.dirs": str(tmp_path)}
    broker = brokkr_broker_factory(settings, plugins=[plugin])
    broker.call(broker.broker.create_topic, "t", 2)
    assert plugin.led == [("t", 0), ("t", 1)]
    broker.call(broker.broker.add_partitions, "t", 3)
    assert plugin.led[2:] == [("t", 2)]
    broker.stop()
    again = _Leads()
    brokkr_broker_factory(settings, plugins=[again])
    assert sorted(again.led) == [("t", 0), ("t", 1), ("t", 2)]
