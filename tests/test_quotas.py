"""Client quotas (Kafka's ClientQuotaManager) and KIP-219 throttling: the rate and throttle
arithmetic, Kafka's precedence of quota entities, AlterClientQuotas and
DescribeClientQuotas, and real clients held to their quotas by muted connections."""

from __future__ import annotations

import threading
import time

import pytest
from brokkr.core.context import Principal
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec
from brokkr.core.protocol.records import build_batch
from brokkr.core.testing import RawClient
from brokkr.plugins.quota.client_quotas import ClientQuotaManager, Rate
from brokkr.plugins.storage.memory import MemoryStorage
from confluent_kafka import Producer
from wire import FETCH, METADATA, PRODUCE, fetch_body, metadata_body, produce_body

DESCRIBE_QUOTAS, ALTER_QUOTAS = 48, 49
USER, CLIENT = "user", "client-id"


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manager(quotas: dict, clock=None, storage=None) -> ClientQuotaManager:
    m = ClientQuotaManager(storage or MemoryStorage({}), 11, 1000, clock=clock or Clock())
    m.alter({tuple(sorted(entity)): values for entity, values in quotas.items()})
    return m


# -- the arithmetic -------------------------------------------------------------------------


def test_a_new_rate_is_measured_over_at_least_samples_minus_one_windows():
    rate = Rate(11, 1000, 0)
    rate.record(5000, 0)
    assert rate.measure(0) == (500.0, 10_000)  # 5000 B over the 10 s a new sensor assumes
    rate.record(5000, 2500)
    assert rate.measure(2500) == (10_000 / 10.5, 10_500)  # 2 full windows + 0.5 s, padded to 10 + 0.5
    assert rate.measure(11_000) == (500.0, 10_000)  # the first window's bytes expired after 11 s
    assert rate.measure(30_000) == (0.0, 10_000)


def test_the_throttle_time_is_the_time_the_rate_needs_to_fall_back_to_the_quota():
    clock = Clock()
    m = manager({((CLIENT, "c"),): {"producer_byte_rate": 1000}}, clock)
    assert m.record("produce", "alice", "c", 10_000) == 0  # exactly the quota over 10 s
    assert m.record("produce", "alice", "c", 1_000) == 1000  # (1100 - 1000) / 1000 * 10 s
    clock.now += 5
    # 21000 B after 5 s, measured over 10 s (the windows not yet elapsed count as elapsed)
    assert m.record("produce", "alice", "c", 10_000) == 11_000
    assert m.record("fetch", "alice", "c", 10**9) == 0  # no consumer_byte_rate anywhere
    assert m.record("produce", "alice", "other", 10**9) == 0  # not this client id


def test_request_time_is_counted_in_percent_of_a_thread_and_its_throttle_capped_at_one_window():
    clock = Clock()
    m = manager({((USER, "alice"),): {"request_percentage": 10}}, clock)
    assert m.record("request", "alice", "c", 1000) == 0  # 1 s of handler time = 100 %-s: 10 % over 10 s
    assert m.record("request", "alice", "c", 10) == 100  # 101 %-s: (10.1 - 10) / 10 * 10 s
    assert m.record("request", "alice", "c", 60_000) == 1000  # Kafka bounds request throttles to one window


@pytest.mark.parametrize(
    "entities, expected",
    [
        # Kafka's order of precedence, most specific first, and how each pools usage
        (
            [((USER, "alice"), (CLIENT, "c")), ((USER, "alice"), (CLIENT, None)), ((USER, "alice"),)],
            ((USER, "alice"), (CLIENT, "c")),
        ),
        ([((USER, "alice"), (CLIENT, None)), ((USER, "alice"),)], ((USER, "alice"), (CLIENT, None))),
        ([((USER, "alice"),), ((USER, None), (CLIENT, "c")), ((CLIENT, "c"),)], ((USER, "alice"),)),
        ([((USER, None), (CLIENT, "c")), ((USER, None), (CLIENT, None))], ((USER, None), (CLIENT, "c"))),
        ([((USER, None), (CLIENT, None)), ((USER, None),), ((CLIENT, "c"),)], ((USER, None), (CLIENT, None))),
        ([((USER, None),), ((CLIENT, "c"),)], ((USER, None),)),
        ([((CLIENT, "c"),), ((CLIENT, None),)], ((CLIENT, "c"),)),
        ([((CLIENT, None),), ((USER, "bob"),), ((USER, "alice"), (CLIENT, "d"))], ((CLIENT, None),)),
        ([((USER, "bob"),), ((CLIENT, "d"),)], None),
    ],
)
def test_the_most_specific_entity_setting_the_key_applies(entities, expected):
    quotas = {entity: {"producer_byte_rate": 100 + i} for i, entity in enumerate(entities)}
    quotas[((USER, "alice"), (CLIENT, "c"))] = quotas.get(((USER, "alice"), (CLIENT, "c")), {"request_percentage": 5})
    m = manager(quotas)
    resolved = m.quota_for("producer_byte_rate", "alice", "c")
    if expected is None:
        assert resolved is None
    else:
        assert resolved[1] == quotas[expected]["producer_byte_rate"]


@pytest.mark.parametrize(
    "entity, pool",
    [
        (((USER, "alice"), (CLIENT, "c")), ("alice", "c")),
        (((USER, "alice"), (CLIENT, None)), ("alice", "c")),  # each client id of alice its own
        (((USER, "alice"),), ("alice", "")),  # all of alice's client ids together
        (((USER, None), (CLIENT, None)), ("alice", "c")),
        (((USER, None),), ("alice", "")),  # each user its own, whatever the client id
        (((CLIENT, "c"),), ("", "c")),  # every user of client id c together
        (((CLIENT, None),), ("", "c")),
    ],
)
def test_usage_is_pooled_as_kafka_pools_it(entity, pool):
    assert manager({entity: {"producer_byte_rate": 1}}).quota_for("producer_byte_rate", "alice", "c")[0] == pool


def test_a_user_quota_is_shared_by_its_client_ids_and_a_change_applies_to_the_next_request():
    clock = Clock()
    m = manager({((USER, "alice"),): {"producer_byte_rate": 1000}}, clock)
    assert m.record("produce", "alice", "c1", 6000) == 0
    assert m.record("produce", "alice", "c2", 6000) == 2000  # 12000 B over 10 s against 1000 B/s
    assert m.record("produce", "bob", "c1", 6000) == 0  # not alice: no quota
    m.alter({((USER, "alice"),): {"producer_byte_rate": None}})
    assert m.record("produce", "alice", "c1", 10**9) == 0


def test_quota_settings_persist_through_the_storage():
    storage = MemoryStorage({})
    m = manager(
        {((USER, "alice"), (CLIENT, None)): {"producer_byte_rate": 1000, "request_percentage": 12.5}}, storage=storage
    )
    m.alter({((CLIENT, "c"),): {"consumer_byte_rate": 5}})
    again = ClientQuotaManager(storage, 11, 1000)
    assert (
        again.quotas()
        == m.quotas()
        == {
            ((CLIENT, None), (USER, "alice")): {"producer_byte_rate": 1000, "request_percentage": 12.5},
            ((CLIENT, "c"),): {"consumer_byte_rate": 5},
        }
    )


# -- AlterClientQuotas and DescribeClientQuotas ------------------------------------------------


def alter(client, entries, validate_only=False, version=1):
    """entries: [({type: name}, {key: value or None to remove})]."""
    spec = request_spec(ALTER_QUOTAS)
    body = spec.cls(
        entries=[
            spec.struct("EntryData")(
                entity=[spec.struct("EntityData")(entity_type=t, entity_name=n) for t, n in entity.items()],
                ops=[
                    spec.struct("OpData")(key=k, value=0.0 if v is None else float(v), remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in entries
        ],
        validate_only=validate_only,
    )
    return client.request(ALTER_QUOTAS, version, body)


def describe(client, components, strict=False, version=1):
    """components: [(type, match type, match)]; answers {entity: {key: value}} or (code, message)."""
    spec = request_spec(DESCRIBE_QUOTAS)
    body = spec.cls(
        components=[spec.struct("ComponentData")(entity_type=t, match_type=m, match=v) for t, m, v in components],
        strict=strict,
    )
    response = client.request(DESCRIBE_QUOTAS, version, body)
    if response.error_code:
        return response.error_code, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


EXACT, DEFAULT, SPECIFIED = 0, 1, 2


def test_alter_and_describe_client_quotas_with_kafkas_filters(brokkr_broker_factory, tmp_path):
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path)})
    with RawClient(broker.bootstrap_servers) as c:
        response = alter(
            c,
            [
                ({USER: "alice"}, {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}),
                ({USER: "alice", CLIENT: None}, {"request_percentage": 12.5}),
                ({CLIENT: "batch"}, {"producer_byte_rate": 4096}),
                ({USER: None}, {"producer_byte_rate": 100}),
            ],
        )
        assert [e.error_code for e in response.entries] == [0, 0, 0, 0]
        assert [[(d.entity_type, d.entity_name) for d in e.entity] for e in response.entries][1] == [
            (USER, "alice"),
            (CLIENT, None),
        ]
        alice = ((USER, "alice"),)
        alice_clients = ((CLIENT, None), (USER, "alice"))
        assert describe(c, [(USER, EXACT, "alice")]) == {
            alice: {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0},
            alice_clients: {"request_percentage": 12.5},
        }
        assert set(describe(c, [(USER, EXACT, "alice")], strict=True)) == {alice}
        assert set(describe(c, [(USER, DEFAULT, None)])) == {((USER, None),)}
        assert set(describe(c, [(USER, SPECIFIED, None)], strict=True)) == {alice, ((USER, None),)}
        assert set(describe(c, [(CLIENT, SPECIFIED, None)])) == {alice_clients, ((CLIENT, "batch"),)}
        assert len(describe(c, [])) == 4 and describe(c, [], strict=True) == {}

        # validate_only changes nothing; a removal drops the key, and the entity with its last key
        assert (
            alter(c, [({CLIENT: "batch"}, {"producer_byte_rate": None})], validate_only=True).entries[0].error_code == 0
        )
        assert ((CLIENT, "batch"),) in describe(c, [])
        assert (
            alter(c, [({CLIENT: "batch"}, {"producer_byte_rate": None}), ({USER: "nobody"}, {"x": None})])
            .entries[0]
            .error_code
            == 0
        )
        assert ((CLIENT, "batch"),) not in describe(c, [])

    broker.stop()
    broker = brokkr_broker_factory({"log.dirs": str(tmp_path)})
    with RawClient(broker.bootstrap_servers) as c:
        assert set(describe(c, [])) == {alice, alice_clients, ((USER, None),)}


@pytest.mark.parametrize(
    "entity, ops, message",
    [
        ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
        ({"topic": "t"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type: topic"),
        ({USER: ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
        ({USER: "a", "ip": "1.2.3.4"}, {"request_percentage": 1}, "Invalid quota entity combination"),
        ({"ip": "1.2.3.4"}, {"connection_creation_rate": 1}, "brokkr does not enforce connection_creation_rate"),
        ({USER: "a"}, {"producer_byte_rates": 1}, "Invalid configuration key producer_byte_rates"),
        ({USER: "a"}, {"controller_mutation_rate": 1}, "brokkr does not enforce controller_mutation_rate"),
        ({USER: "a"}, {"producer_byte_rate": 0}, "Quota producer_byte_rate must be greater than 0"),
        ({USER: "a"}, {"producer_byte_rate": 10.5}, "producer_byte_rate cannot be a fractional value."),
        ({USER: "a"}, {"consumer_byte_rate": 1e19}, "Proposed value for consumer_byte_rate is too large for a LONG."),
    ],
)
def test_alter_client_quotas_refuses_what_kafka_refuses(brokkr_broker, entity, ops, message):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = alter(c, [(entity, ops), ({USER: "fine"}, {"request_percentage": 0.5})])
        assert response.entries[0].error_code == ErrorCode.INVALID_REQUEST
        assert response.entries[0].error_message.startswith(message)
        assert response.entries[1].error_code == 0
        assert set(describe(c, [])) == {((USER, "fine"),)}


def test_duplicate_entities_and_keys_are_refused(brokkr_broker):
    spec = request_spec(ALTER_QUOTAS)
    op = spec.struct("OpData")(key="producer_byte_rate", value=10.0, remove=False)
    entity = [spec.struct("EntityData")(entity_type=USER, entity_name="a")]
    body = spec.cls(
        entries=[
            spec.struct("EntryData")(entity=entity, ops=[op, op]),
            spec.struct("EntryData")(entity=entity, ops=[op]),
            spec.struct("EntryData")(entity=entity, ops=[op]),
        ]
    )
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        entries = c.request(ALTER_QUOTAS, 1, body).entries
    assert [e.error_code for e in entries] == [ErrorCode.INVALID_REQUEST, 0, ErrorCode.INVALID_REQUEST]
    assert entries[0].error_message.startswith("Duplicate quota key producer_byte_rate")
    assert entries[2].error_message == "Ignoring duplicate entity users/a"


@pytest.mark.parametrize(
    "components, code, message",
    [
        ([("", EXACT, "a")], ErrorCode.INVALID_REQUEST, "Invalid empty entity type."),
        ([(USER, EXACT, "a"), (USER, DEFAULT, None)], ErrorCode.INVALID_REQUEST, "Entity type user cannot appear"),
        ([("group", EXACT, "a")], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
        ([(USER, EXACT, None)], ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match"),
        ([(USER, DEFAULT, "a")], ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also"),
        ([(USER, SPECIFIED, "a")], ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also"),
        ([(USER, 7, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 7"),
        ([("ip", SPECIFIED, None), (USER, SPECIFIED, None)], ErrorCode.INVALID_REQUEST, "Invalid entity filter"),
    ],
)
def test_describe_client_quotas_refuses_bad_filters(brokkr_broker, components, code, message):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        got_code, got_message = describe(c, components)
    assert got_code == code and got_message.startswith(message)


class AsUser:
    def __init__(self, user):
        self.user = user

    @hookimpl
    def brokkr_authenticate(self, connection):
        return Principal("User", self.user)


def test_quota_requests_need_alter_configs_or_describe_configs_on_the_cluster(brokkr_broker_factory):
    broker = brokkr_broker_factory(
        {"authorizer.class.name": "acl", "brokkr.plugins.disabled": "example-policy"}, plugins=[AsUser("alice")]
    )
    with RawClient(broker.bootstrap_servers) as c:
        assert describe(c, [])[0] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        response = alter(c, [({USER: "alice"}, {"producer_byte_rate": 10**9})])
        assert response.entries[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


# -- throttling real connections (KIP-219) -------------------------------------------------------


def set_quotas(broker, *entries):
    with RawClient(broker.bootstrap_servers) as c:
        assert all(e.error_code == 0 for e in alter(c, list(entries)).entries)


def big_produce(topic: str, size: int):
    return produce_body(topic, build_batch([(None, b"x" * size)], timestamp=int(time.time() * 1000)))


def test_a_throttled_connection_is_muted_without_holding_up_the_others(brokkr_broker, topic):
    set_quotas(brokkr_broker, ({CLIENT: "hog"}, {"producer_byte_rate": 10_000}))
    with (
        RawClient(brokkr_broker.bootstrap_servers, client_id="hog") as hog,
        RawClient(brokkr_broker.bootstrap_servers, client_id="other") as other,
    ):
        # 120 kB against 10 kB/s, measured over 10 s: 2 s to wait before the rate is back at the quota
        response = hog.request(PRODUCE, 9, big_produce(topic, 120_000))
        assert response.responses[0].partition_responses[0].error_code == 0
        assert 1900 <= response.throttle_time_ms <= 2100
        muted_at = time.monotonic()
        hog.send(METADATA, 12, metadata_body(topic))
        response = other.request(PRODUCE, 9, big_produce(topic, 1000))  # served while hog is muted
        assert response.throttle_time_ms == 0 and time.monotonic() - muted_at < 0.5
        hog.receive(METADATA, 12)
        assert time.monotonic() - muted_at >= 1.9  # hog's next request was read after its throttle time


def test_an_acks_0_producer_over_its_quota_is_muted_too(brokkr_broker, topic):
    set_quotas(brokkr_broker, ({CLIENT: "fire-and-forget"}, {"producer_byte_rate": 10_000}))
    with RawClient(brokkr_broker.bootstrap_servers, client_id="fire-and-forget") as c:
        body = big_produce(topic, 120_000)
        body.acks = 0
        c.send(PRODUCE, 9, body)
        start = time.monotonic()
        c.request(METADATA, 12, metadata_body(topic))
        assert time.monotonic() - start >= 1.9


def test_fetch_and_request_time_quotas_throttle_their_clients(brokkr_broker, topic):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        c.request(PRODUCE, 9, big_produce(topic, 50_000))
    set_quotas(
        brokkr_broker,
        ({CLIENT: "reader"}, {"consumer_byte_rate": 1000}),
        ({CLIENT: "busy"}, {"request_percentage": 0.001}),
    )
    with RawClient(brokkr_broker.bootstrap_servers, client_id="reader") as c:
        response = c.request(FETCH, 12, fetch_body(topic))
        records = response.responses[0].partitions[0].records
        assert len(records) > 50_000  # the data is returned, then the connection waits
        assert response.throttle_time_ms == round((len(records) / 10 - 1000) / 1000 * 10_000)
    with RawClient(brokkr_broker.bootstrap_servers, client_id="busy") as c:
        throttles = [c.request(METADATA, 12, metadata_body(topic)).throttle_time_ms for _ in range(3)]
    assert 0 < throttles[-1] <= 1000  # request-time throttles never exceed one window


def test_a_producer_pushing_ten_times_its_quota_is_held_to_it(brokkr_broker, topic):
    """librdkafka offers 10x a 200 kB/s producer_byte_rate for 10 s; what the broker
    acknowledges in those 10 s is within 20% of 10 s of quota, and the client is told to
    back off (throttle_time_ms, through librdkafka's throttle_cb)."""
    quota, value_size, seconds = 200_000, 1000, 10
    set_quotas(brokkr_broker, ({CLIENT: "pushy"}, {"producer_byte_rate": quota}))
    throttles = []
    acknowledged = []
    lock = threading.Lock()
    producer = Producer(
        {
            "bootstrap.servers": brokkr_broker.bootstrap_servers,
            "client.id": "pushy",
            "linger.ms": 5,
            "batch.size": 8192,
            "max.in.flight.requests.per.connection": 5,
            "enable.idempotence": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    start = time.monotonic()

    def delivered(err, msg):
        if err is None:
            with lock:
                acknowledged.append(time.monotonic() - start)

    sent = 0
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * 10 * quota / value_size)  # offer ten times the quota
        while sent < due:
            producer.produce(topic, b"v" * value_size, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0.005)
    producer.purge()
    producer.flush(5)
    in_time = sum(1 for t in acknowledged if t < seconds) * value_size
    assert sent * value_size >= 9 * quota * seconds
    assert 0.8 * quota * seconds <= in_time <= 1.2 * quota * seconds, in_time / (quota * seconds)
    assert throttles and max(throttles) > 0


class RecordsRequestTime:
    """A quota plugin that throttles nothing and keeps the request time it is told of."""

    def __init__(self):
        self.request_ms: list[tuple[int, float]] = []

    @hookimpl
    def brokkr_quota_throttle_ms(self, context, usage):
        if "request" in usage:
            self.request_ms.append((context.api_key, usage["request"]))
        return 0


def test_request_time_counts_a_handlers_steps_and_never_its_waits(brokkr_broker_factory):
    """A request answered in its handler's first step (``BusyTime.first_step``, no
    coroutine between) and one that waits (a fetch long-poll, ``BusyTime`` counting its
    other steps) are both counted, and the wait is not."""
    recorder = RecordsRequestTime()
    broker = brokkr_broker_factory(plugins=[recorder])
    broker.call(broker.broker.create_topic, "timed")
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(PRODUCE, 9, produce_body("timed", build_batch([(b"k", b"v")]))).responses
        started = time.monotonic()
        fetched = c.request(FETCH, 12, fetch_body("timed", offset=1, max_wait_ms=400, min_bytes=1))
        waited = time.monotonic() - started
    assert fetched.responses[0].partitions[0].error_code == ErrorCode.NONE
    assert waited >= 0.35, "the fetch waited in the purgatory for new data"
    (produced,) = [ms for key, ms in recorder.request_ms if key == PRODUCE]
    (polled,) = [ms for key, ms in recorder.request_ms if key == FETCH]
    assert 0 < produced < 300 and 0 < polled < 300, "their steps counted, the 400 ms wait not"


def test_busy_time_answers_a_first_step_and_counts_a_waiting_coroutine_alike():
    import asyncio

    from brokkr.core.quotas import BusyTime

    async def at_once():
        return "done"

    async def waits():
        await asyncio.sleep(0.2)
        return "waited"

    async def fails_after_waiting():
        await asyncio.sleep(0)
        raise ValueError("late")

    async def main():
        busy = BusyTime(0.5)
        assert busy.first_step(at_once()) == (True, "done")
        assert 0.5 < busy.seconds < 0.6
        finished, rest = busy.first_step(waits())
        assert not finished
        assert await rest == "waited"
        assert await BusyTime().run(waits()) == "waited"
        assert busy.seconds < 0.6, "the sleep not counted"
        with pytest.raises(ValueError, match="late"):
            await BusyTime().run(fails_after_waiting())

    asyncio.run(main())
