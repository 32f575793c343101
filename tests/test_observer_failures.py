"""An observer's failure changes nothing: with a plugin whose every observer hook raises,
every record a real producer sends is acknowledged once and readable at once, the
broker logs one line per hook and plugin (with the traceback) however often it fails,
counts each failure in ``brokkr_observer_failures_total``, and still stops cleanly."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from brokkr.core import hookspecs
from brokkr.core.plugins import create_plugin_manager, hookimpl
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from txn_wire import UNVERIFIED, end_txn, txn_batch, txn_produce

prometheus_client = pytest.importorskip("prometheus_client")
from test_metrics import scrape  # noqa: E402

N = 60


class Failing:
    """Raises from every observer hook it may see on a lone broker; counts the calls."""

    def __init__(self):
        self.calls: Counter[str] = Counter()

    def _fail(self, hook):
        self.calls[hook] += 1
        raise RuntimeError(f"{hook} is broken")

    @hookimpl
    def brokkr_after_log_append(self):
        self._fail("brokkr_after_log_append")

    @hookimpl
    def brokkr_high_watermark_advanced(self):
        self._fail("brokkr_high_watermark_advanced")

    @hookimpl
    def brokkr_segment_rolled(self):
        self._fail("brokkr_segment_rolled")

    @hookimpl
    def brokkr_request_completed(self):
        self._fail("brokkr_request_completed")

    @hookimpl
    def brokkr_txn_marker_written(self):
        self._fail("brokkr_txn_marker_written")

    @hookimpl
    def brokkr_connection_closed(self):
        self._fail("brokkr_connection_closed")

    @hookimpl
    def brokkr_became_leader(self):
        self._fail("brokkr_became_leader")

    @hookimpl
    def brokkr_topic_deleted(self):
        self._fail("brokkr_topic_deleted")

    @hookimpl
    def brokkr_broker_stopping(self):
        self._fail("brokkr_broker_stopping")


def test_failing_observers_change_no_answer_and_nothing_readable(brokkr_broker_factory, caplog):
    caplog.set_level(logging.ERROR, logger="brokkr")
    failing = Failing()
    config = {"brokkr.metrics.port": "0", "log.segment.bytes": "1000", **UNVERIFIED}
    broker = brokkr_broker_factory(config, plugins=[failing])
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0})  # acks=all by default
    acknowledged = []

    def delivered(err, msg):
        assert err is None, err
        acknowledged.append(msg.offset())

    for i in range(N):  # in batches of 10, each rolling a segment
        producer.produce("obs", value=b"v%03d" % i + b"x" * 100, on_delivery=delivered)
        if i % 10 == 9:
            assert producer.flush(10) == 0
    assert sorted(acknowledged) == list(range(N)), "each record acknowledged once, no duplicate"
    assert broker.partition("obs", 0).high_watermark == N, "visible at once, not after the next append"

    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition("obs", 0, 0)])
    values = []
    for _ in range(20):
        values += [m.value()[:4] for m in consumer.consume(N, 0.5) if not m.error()]
        if len(values) >= N:
            break
    consumer.close()
    assert values == [b"v%03d" % i for i in range(N)]

    # A transaction's marker stands although its observer raises.
    assert txn_produce(broker, "obs", txn_batch([b"t"], 9000)).error_code == 0
    assert end_txn(broker, 9000, True, [("obs", 0)]) == {("obs", 0): 0}
    assert broker.partition("obs", 0).last_stable_offset == N + 2
    broker.call(broker.broker.create_topic, "gone")
    broker.call(broker.broker.delete_topic, "gone")
    assert "gone" not in broker.topics, "the deletion stands although its observer raises"

    m = scrape(broker)
    plugin = broker.pm.get_name(failing)
    observers = set(failing.calls) - {"brokkr_broker_stopping"}
    assert observers == hookspecs.OBSERVERS - {"brokkr_broker_stopping", "brokkr_became_follower"}  # on a cluster
    assert failing.calls["brokkr_after_log_append"] > 1 and failing.calls["brokkr_segment_rolled"] > 1
    for hook in observers:
        counted = m[("brokkr_observer_failures_total", (("hook", hook), ("plugin", plugin)))]
        if hook in (
            "brokkr_request_completed",
            "brokkr_connection_closed",
        ):  # clients still come and go, racing the scrape
            assert counted > 0
        else:
            assert counted == broker.observer_failures.counts[(hook, plugin)] == failing.calls[hook]
    in_count = m[("kafka_server_brokertopicmetrics_messagesinpersec_total", (("topic", "obs"),))]
    assert in_count == N + 2, "the metrics' observer still counts every record (and the marker)"

    broker.stop()
    assert failing.calls["brokkr_broker_stopping"] == 1 and broker.clean_shutdown
    lines = [r for r in caplog.records if r.name == "brokkr" and "observer" in r.getMessage()]
    assert sorted(r.getMessage().split(" failed in ")[1].split(";")[0] for r in lines) == sorted(
        observers | {"brokkr_broker_stopping"}
    ), "one line per hook and plugin"
    assert all(r.exc_info and "is broken" in str(r.exc_info[1]) for r in lines), "with its traceback"


def test_a_failure_is_logged_again_a_minute_later_with_the_count(caplog):
    caplog.set_level(logging.ERROR, logger="brokkr")
    pm = create_plugin_manager(entry_points=False)
    pm.register(Failing(), name="failing")
    now = [1000.0]
    pm.hot.failures.clock = lambda: now[0]
    for _ in range(5):
        assert pm.hot.brokkr_after_log_append(partition=None, info=None, broker=None) == []
    now[0] += 61
    pm.hot.brokkr_after_log_append(partition=None, info=None, broker=None)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "failed in brokkr_after_log_append 5 more time(s) in the last 61 s" in messages[1]
    assert pm.hot.failures.counts[("brokkr_after_log_append", "failing")] == 6


class Wrapping:
    def __init__(self):
        self.saw: list[BaseException] = []

    @hookimpl(wrapper=True)
    def brokkr_after_log_append(self):
        try:
            return (yield)
        except RuntimeError as exc:
            self.saw.append(exc)
            raise


def test_behind_a_wrapper_a_failure_is_put_down_to_the_plugin_that_raised():
    pm = create_plugin_manager(entry_points=False)
    pm.register(Failing(), name="failing")
    wrapping = Wrapping()
    pm.register(wrapping, name="wrapping")
    assert pm.hot.brokkr_after_log_append(partition=None, info=None, broker=None) == []
    assert len(wrapping.saw) == 1, "pluggy called the wrapper around the failing implementation"
    assert pm.hot.failures.counts == {("brokkr_after_log_append", "failing"): 1}


class FailingLeadership:
    def __init__(self):
        self.calls: Counter[str] = Counter()

    @hookimpl
    def brokkr_became_leader(self):
        self.calls["brokkr_became_leader"] += 1
        raise RuntimeError("brokkr_became_leader is broken")


def test_a_failing_leadership_observer_leaves_the_partition_led(brokkr_cluster, caplog):
    caplog.set_level(logging.ERROR, logger="brokkr")
    failing = FailingLeadership()
    [broker] = brokkr_cluster(1, plugins=(failing,))
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("led", 1, 1)])["led"].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(10):
        producer.produce("led", b"%d" % i)
    assert producer.flush(10) == 0
    assert broker.partition("led", 0).high_watermark == 10
    plugin = broker.pm.get_name(failing)
    counted = broker.observer_failures.counts[("brokkr_became_leader", plugin)]
    assert counted == failing.calls["brokkr_became_leader"] > 0
    assert not [r for r in caplog.records if r.name == "brokkr.replication"], "the cluster state applied at once"
