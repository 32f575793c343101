"""Replication on a real ZooKeeper: brokers register and elect a controller; topics get
replicas on several brokers; followers fetch from leaders; acks=all waits on them; a
leader's loss (a clean stop, or a SIGKILL) moves leadership to an in-sync replica without
losing an acknowledged record; min.insync.replicas is enforced; consumer groups work."""

from __future__ import annotations

import json
import threading
import time

import pytest
from brokkr.core.authorization import AclOperation, AuthorizationResult
from brokkr.core.client import RawClient
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.testing import CLUSTER_SETTINGS as CLUSTER

from tests.serve import Served
from tests.slow_storage import SlowStorage
from tests.waiting import wait_for
from tests.wire import (
    API_VERSIONS,
    FETCH,
    INIT_PRODUCER_ID,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    batch,
    fetch_body,
    init_producer_id_body,
    offset_for_leader_epoch_body,
    produce_body,
)

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

DEADLINE = 30.0


def bootstrap(brokers) -> str:
    return ",".join(b.bootstrap_servers for b in brokers)


def create(brokers, name: str, partitions: int, rf: int, **configs) -> dict:
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    topic = NewTopic(name, partitions, rf, config={k.replace("_", "."): str(v) for k, v in configs.items()})
    admin.create_topics([topic])[name].result(DEADLINE)
    return wait_for(f"leaders of {name}", lambda: leaders(brokers, name, partitions))


def leaders(brokers, name: str, partitions: int) -> dict | None:
    """{partition: (leader, replicas, isr)} once every partition has a leader."""
    md = AdminClient({"bootstrap.servers": bootstrap(brokers)}).list_topics(name, timeout=10)
    topic = md.topics.get(name)
    if topic is None or topic.error is not None or len(topic.partitions) != partitions:
        return None
    out = {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs)) for p in topic.partitions.values()}
    return out if all(leader >= 0 for leader, _, _ in out.values()) else None


def log_ends(brokers, name: str, index: int) -> dict[int, int]:
    out = {}
    for b in brokers:
        p = b.broker.partition(name, index)
        if p is not None:
            out[b.broker.node_id] = b.call(lambda p=p: p.log.log_end_offset)
    return out


def consume_all(brokers, name: str, partitions: int, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(name, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    return got


class Leadership:
    """Counts the leadership hooks a broker calls."""

    def __init__(self):
        self.became: list[tuple[str, int, str]] = []

    @hookimpl
    def brokkr_became_leader(self, partition):
        self.became.append((partition.topic.name, partition.index, "leader"))

    @hookimpl
    def brokkr_became_follower(self, partition):
        self.became.append((partition.topic.name, partition.index, "follower"))


def test_brokers_register_elect_a_controller_and_replicate(brokkr_cluster):
    brokers = brokkr_cluster(3)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap_servers})
    md = wait_for("three brokers", lambda: (m := admin.list_topics(timeout=10)) and len(m.brokers) == 3 and m)
    assert sorted(md.brokers) == [1, 2, 3] and md.controller_id in (1, 2, 3)
    placed = create(brokers, "r", 3, 3)
    assert all(replicas == [1, 2, 3] == isr for _, replicas, isr in placed.values())
    assert sorted(leader for leader, _, _ in placed.values()) == [1, 2, 3], "leaders spread over the brokers"
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(300):
        producer.produce("r", b"%05d" % i, key=b"k%d" % i)
    assert producer.flush(DEADLINE) == 0
    for index in range(3):
        ends = wait_for(
            "followers to catch up", lambda i=index: len(set((e := log_ends(brokers, "r", i)).values())) == 1 and e
        )
        assert len(ends) == 3
    assert sorted(consume_all(brokers, "r", 3, 300)) == [b"%05d" % i for i in range(300)]
    # A request for a partition this broker does not lead is refused, as Kafka refuses it.
    leader = placed[0][0]
    other = next(b for b in brokers if b.broker.node_id != leader)
    with RawClient(other.bootstrap_servers) as c:
        response = c.request(PRODUCE, 9, produce_body("r", batch(), acks=1))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_leaders_loss_moves_leadership_and_loses_no_acknowledged_record(brokkr_cluster):
    brokers = brokkr_cluster(3)
    create(brokers, "f", 2, 3, min_insync_replicas=2)
    acked: list[bytes] = []
    errors: list = []

    def report(err, msg):
        (errors if err else acked).append(err or msg.value())

    producer = Producer(
        {"bootstrap.servers": bootstrap(brokers), "enable.idempotence": True, "linger.ms": 2, "retry.backoff.ms": 50}
    )
    for i in range(500):
        producer.produce("f", b"%05d" % i, key=b"k%d" % i, on_delivery=report)
        producer.poll(0)
    victim_id = leaders(brokers, "f", 2)[0][0]
    victim = next(b for b in brokers if b.broker.node_id == victim_id)
    victim.stop()
    alive = [b for b in brokers if b is not victim]
    for i in range(500, 1000):
        producer.produce("f", b"%05d" % i, key=b"k%d" % i, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0 and errors == []
    after = wait_for("a new leader", lambda: (m := leaders(alive, "f", 2)) and m[0][0] != victim_id and m)
    assert victim_id not in after[0][2], "the stopped broker left the ISR"
    got = consume_all(alive, "f", 2, 1000)
    assert sorted(got) == sorted(acked) == [b"%05d" % i for i in range(1000)], "every record once"


def test_min_insync_replicas_refuses_acks_all_when_too_few_replicas_are_in_sync(brokkr_cluster):
    brokers = brokkr_cluster(2)
    placed = create(brokers, "m", 1, 2, min_insync_replicas=2)
    follower = next(b for b in brokers if b.broker.node_id != placed[0][0])
    leader = next(b for b in brokers if b is not follower)
    follower.stop()
    wait_for("the ISR to shrink", lambda: leader.call(lambda: len(leader.broker.partition("m", 0).isr)) == 1)
    with RawClient(leader.bootstrap_servers) as c:
        response = c.request(PRODUCE, 9, produce_body("m", batch(), acks=-1))
        one = c.request(PRODUCE, 9, produce_body("m", batch(), acks=1))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert one.responses[0].partition_responses[0].error_code == 0, "acks=1 needs the leader only"


def test_acks_all_completes_when_followers_fetch_not_after_their_fetch_wait(brokkr_cluster):
    # Followers' fetches wait up to replica.fetch.wait.max.ms; a new append wakes them at
    # once (Kafka's tryCompleteDelayedRequests), so acks=all costs a round trip, not a wait.
    brokers = brokkr_cluster(3, replica_fetch_wait_max_ms=3000)
    placed = create(brokers, "w", 1, 3)
    leader = next(b for b in brokers if b.broker.node_id == placed[0][0])
    wait_for("a full ISR", lambda: len(leader.call(lambda: leader.broker.partition("w", 0).isr)) == 3)
    with RawClient(leader.bootstrap_servers) as c:
        c.request(PRODUCE, 9, produce_body("w", batch(), acks=-1))  # the followers' fetchers are running
        took = []
        for _ in range(5):
            start = time.monotonic()
            response = c.request(PRODUCE, 9, produce_body("w", batch(), acks=-1))
            took.append(time.monotonic() - start)
            assert response.responses[0].partition_responses[0].error_code == 0
    assert max(took) < 1.0, f"acks=all took {took} s with a 3 s replica.fetch.wait.max.ms"


def test_replicas_spread_over_the_brokers_racks(brokkr_broker_factory, brokkr_zookeeper, tmp_path):
    racks = {1: "east", 2: "east", 3: "west", 4: "west"}
    brokers = [
        brokkr_broker_factory(
            {
                "node.id": n,
                "broker.rack": rack,
                "zookeeper.connect": brokkr_zookeeper,
                "log.dirs": str(tmp_path / f"b{n}"),
            }
            | CLUSTER
        )
        for n, rack in racks.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    nodes = admin.describe_cluster().result(DEADLINE).nodes
    assert {n.id: n.rack for n in nodes} == racks, "DescribeCluster names each broker's rack"
    placed = create(brokers, "racked", 8, 2)
    for _, replicas, _ in placed.values():
        assert {racks[r] for r in replicas} == {"east", "west"}, f"both racks hold a replica: {replicas}"


def ten_records_then_a_new_leader(brokkr_cluster, name: str):
    """Three brokers, ``name`` (RF 3) holding 10 records of epoch 0, and its first leader
    stopped: (the two brokers left, the new leader, the other one). Epoch 0 ends at 10."""
    brokers = brokkr_cluster(3)
    first = create(brokers, name, 1, 3)[0][0]
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(10):
        producer.produce(name, b"%d" % i)
    assert producer.flush(DEADLINE) == 0
    old = next(b for b in brokers if b.broker.node_id == first)
    old.stop()
    alive = [b for b in brokers if b is not old]
    leader_id = wait_for("a new leader", lambda: (m := leaders(alive, name, 1)) and m[0][0] != first and m)[0][0]
    leader = next(b for b in alive if b.broker.node_id == leader_id)
    return alive, leader, next(b for b in alive if b is not leader)


def test_stale_and_future_leader_epochs_and_where_epochs_end(brokkr_cluster):
    _, leader, follower = ten_records_then_a_new_leader(brokkr_cluster, "e")
    epoch = leader.call(lambda: leader.broker.partition("e", 0).leader_epoch)
    assert epoch >= 1
    with RawClient(leader.bootstrap_servers) as c:
        assert (
            c.request(PRODUCE, 9, produce_body("e", batch(), acks=-1)).responses[0].partition_responses[0].error_code
            == 0
        )

        def fetch_error(current: int) -> int:
            body = fetch_body("e")
            body.topics[0].partitions[0].current_leader_epoch = current
            return c.request(FETCH, 12, body).responses[0].partitions[0].error_code

        def end_of(epoch_asked: int, current: int = -1):
            r = c.request(OFFSET_FOR_LEADER_EPOCH, 4, offset_for_leader_epoch_body("e", epoch_asked, current))
            p = r.topics[0].partitions[0]
            return p.error_code, p.leader_epoch, p.end_offset

        assert fetch_error(epoch) == 0
        assert fetch_error(epoch - 1) == ErrorCode.FENCED_LEADER_EPOCH
        assert fetch_error(epoch + 1) == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert end_of(0) == (0, 0, 10), "epoch 0 ended where the new leader's epoch started"
        assert end_of(epoch, epoch) == (0, epoch, 11)
        assert end_of(epoch + 5) == (0, -1, -1)
        assert end_of(epoch, epoch - 1)[0] == ErrorCode.FENCED_LEADER_EPOCH
    with RawClient(follower.bootstrap_servers) as c:
        r = c.request(OFFSET_FOR_LEADER_EPOCH, 4, offset_for_leader_epoch_body("e", 0))
        assert r.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_follower_told_to_truncate_is_answered_at_once_beside_partitions_with_nothing_new(brokkr_cluster):
    """A follower fetches two partitions from one leader: on one its log parts from the
    leader's (it holds epoch 0 past where epoch 0 ended there), the other has nothing new.
    The answer says where to truncate to (KIP-320's diverging epoch), at once, as Kafka's
    fetch completes on a diverging epoch. It used to be lost when the idle partition made
    the fetch wait, and a replica restarted after a leader change never rejoined the ISR."""
    alive, leader, follower = ten_records_then_a_new_leader(brokkr_cluster, "d")
    leader_id, follower_id = leader.broker.node_id, follower.broker.node_id
    admin = AdminClient({"bootstrap.servers": bootstrap(alive)})
    idle = NewTopic("idle", 1, replica_assignment=[[leader_id, follower_id]])
    admin.create_topics([idle])["idle"].result(DEADLINE)
    wait_for("the idle topic's leader", lambda: (m := leaders(alive, "idle", 1)) and m[0][0] == leader_id)
    epochs = {name: leader.call(lambda n=name: leader.broker.partition(n, 0).leader_epoch) for name in ("d", "idle")}

    body = fetch_body("d", offset=12, max_wait_ms=10000, min_bytes=1)
    body.replica_id = follower_id
    d = body.topics[0].partitions[0]
    d.current_leader_epoch, d.last_fetched_epoch = epochs["d"], 0
    body.topics.append(fetch_body("idle", offset=0).topics[0])
    body.topics[1].partitions[0].current_leader_epoch = epochs["idle"]
    with RawClient(leader.bootstrap_servers) as c:
        start = time.monotonic()
        r = c.request(FETCH, 12, body)
        waited = time.monotonic() - start
    answers = {t.topic: p for t in r.responses for p in t.partitions}
    assert set(answers) == {"d", "idle"}, "both partitions are answered"
    assert answers["d"].error_code == 0
    assert (answers["d"].diverging_epoch.epoch, answers["d"].diverging_epoch.end_offset) == (0, 10)
    assert answers["idle"].error_code == 0 and not answers["idle"].records
    assert waited < 5, f"answered after {waited:.1f} s: the fetch waited for bytes instead"


class FollowersRefused:
    """An authorizer that, once ``refusing`` is set, denies followers' fetches (ClusterAction)."""

    def __init__(self):
        self.refusing = threading.Event()

    @hookimpl
    def brokkr_authorize(self, actions):
        refuse = self.refusing.is_set()
        return [
            AuthorizationResult.DENIED if refuse and a.operation is AclOperation.CLUSTER_ACTION else None
            for a in actions
        ]


def test_an_isr_that_shrinks_while_acks_all_waits_answers_not_enough_replicas_after_append(brokkr_cluster):
    refusal = FollowersRefused()
    brokers = brokkr_cluster(2, plugins=(refusal,))
    placed = create(brokers, "s", 1, 2, min_insync_replicas=2)
    leader = next(b for b in brokers if b.broker.node_id == placed[0][0])
    wait_for("a full ISR", lambda: len(leader.call(lambda: leader.broker.partition("s", 0).isr)) == 2)
    refusal.refusing.set()  # the follower can no longer fetch: it leaves the ISR after replica.lag.time.max.ms
    with RawClient(leader.bootstrap_servers) as c:
        r = c.request(PRODUCE, 9, produce_body("s", batch(), acks=-1, timeout_ms=20000))
        after = c.request(PRODUCE, 9, produce_body("s", batch(), acks=-1))
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert after.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS


def test_a_sigkilled_leader_is_replaced_after_its_session_expires(brokkr_cluster, brokkr_zookeeper, tmp_path):
    brokers = brokkr_cluster(2)
    served = Served(
        *(
            f"--override={k}={v}"
            for k, v in {
                "node.id": 3,
                "zookeeper.connect": brokkr_zookeeper,
                "log.dirs": str(tmp_path / "b3"),
                "listeners": "PLAINTEXT://127.0.0.1:0",
                **CLUSTER,
            }.items()
        ),
        cwd=tmp_path,
    )
    try:
        wait_for(
            "three brokers",
            lambda: len(AdminClient({"bootstrap.servers": bootstrap(brokers)}).list_topics(timeout=10).brokers) == 3,
        )
        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
        topic = NewTopic("k", num_partitions=1, replica_assignment=[[3, 1, 2]])  # broker 3 leads it
        admin.create_topics([topic])["k"].result(DEADLINE)
        wait_for("broker 3 to lead", lambda: (m := leaders(brokers, "k", 1)) and m[0][0] == 3)
        producer = Producer({"bootstrap.servers": bootstrap(brokers) + "," + served.address, "acks": "all"})
        for i in range(100):
            producer.produce("k", b"%05d" % i)
        assert producer.flush(DEADLINE) == 0
    finally:
        served.kill()  # SIGKILL: no deregistration; ZooKeeper ends its session after the timeout
    killed = time.monotonic()
    moved = wait_for("a new leader", lambda: (m := leaders(brokers, "k", 1)) and m[0][0] in (1, 2) and m)
    assert time.monotonic() - killed < 20 and 3 not in moved[0][2]
    assert sorted(consume_all(brokers, "k", 1, 100)) == [b"%05d" % i for i in range(100)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_groups_and_leadership_hooks_on_a_cluster(brokkr_broker_factory, brokkr_zookeeper, tmp_path, protocol):
    hooks = [Leadership() for _ in range(3)]
    brokers = [
        brokkr_broker_factory(
            {"node.id": n, "zookeeper.connect": brokkr_zookeeper, "log.dirs": str(tmp_path / f"b{n}"), **CLUSTER},
            plugins=[hooks[n - 1]],
        )
        for n in (1, 2, 3)
    ]
    create(brokers, "g", 3, 2)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(60):
        producer.produce("g", b"%05d" % i, key=b"k%d" % i)
    assert producer.flush(DEADLINE) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap(brokers),
            "group.id": "cg",
            "auto.offset.reset": "earliest",
            "group.protocol": protocol,
        }
    )
    consumer.subscribe(["g"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 60 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                got.append(msg.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("g", p) for p in range(3)], timeout=DEADLINE)
    finally:
        consumer.close()
    assert sorted(got) == [b"%05d" % i for i in range(60)]
    assert sum(tp.offset for tp in committed) == 60
    led = {(t, p) for h in hooks for t, p, what in h.became if what == "leader"}
    assert {("g", p) for p in range(3)} <= led and ("__consumer_offsets", 0) in led
    assert json.dumps(sorted(led))  # every leadership change named a partition


def test_a_stopping_broker_hands_over_its_leaderships_first(brokkr_cluster):
    brokers = brokkr_cluster(3)
    placed = create(brokers, "c", 3, 3)
    victim_id = placed[0][0]
    victim = next(b for b in brokers if b.broker.node_id == victim_id)
    other = next(b for b in brokers if b is not victim)
    victim.stop()  # controlled shutdown: returns once the controller has moved its leaderships
    membership = other.broker.replicas.membership
    states = other.call(lambda: [membership.partition_state("c", i) for i in range(3)])
    assert all(s.leader not in (victim_id, -1) for s in states), states
    assert victim_id not in other.call(lambda: set(membership.brokers()))


def test_partitions_and_settings_changed_on_one_broker_reach_every_broker(brokkr_cluster):
    from confluent_kafka.admin import ConfigResource, NewPartitions

    brokers = brokkr_cluster(3)
    create(brokers, "grow", 2, 2)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap_servers})
    admin.create_partitions([NewPartitions("grow", 4)])["grow"].result(DEADLINE)
    grown = wait_for("four partitions with leaders", lambda: leaders(brokers, "grow", 4))
    assert all(len(replicas) == 2 for _, replicas, _ in grown.values())
    resource = ConfigResource("topic", "grow", set_config={"retention.ms": "123456"})
    admin.alter_configs([resource])[resource].result(DEADLINE)
    wait_for(
        "every broker to apply the setting",
        lambda: all(b.call(lambda b=b: b.broker.topics["grow"].config["retention.ms"]) == 123456 for b in brokers),
    )


def test_partition_states_written_together_each_on_their_own_terms(brokkr_cluster):
    """The controller's writes of many partition states at once (sent to ZooKeeper
    together, zookeeper.max.in.flight.requests at a time): each is set at its version, and
    one that names a version ZooKeeper no longer holds is None while the others land."""
    import attrs

    brokers = brokkr_cluster(2, zookeeper_max_in_flight_requests=2)
    create(brokers, "states", 5, 2)
    b1 = brokers[0]
    m = b1.broker.replicas.membership
    before = [m.partition_state("states", i) for i in range(5)]
    writes = [("states", i, attrs.evolve(s, leader_epoch=s.leader_epoch + 1)) for i, s in enumerate(before)]
    writes[2] = ("states", 2, attrs.evolve(writes[2][2], version=before[2].version + 7))  # another writer's
    written = b1.call(m.write_partition_states, writes)
    assert written[2] is None
    for i in (0, 1, 3, 4):
        assert (written[i].leader_epoch, written[i].version) == (before[i].leader_epoch + 1, before[i].version + 1)
    wait_for(
        "every broker to read the new states",
        lambda: all(
            b.broker.replicas.membership.partition_state("states", i).leader_epoch == before[i].leader_epoch + 1
            for b in brokers
            for i in (0, 1, 3, 4)
        ),
    )


WIDE = 300  # partitions: 0.6 s of opening at SlowStorage's pace


def test_a_cluster_broker_opens_its_new_replicas_a_turn_at_a_time(brokkr_cluster):
    """Replicas a topic's creation gives a broker are opened between other requests, as a
    single broker opens a new topic's logs: a slow disk does not stall its connections."""
    from brokkr.core.protocol.frames import request_spec

    brokers = brokkr_cluster(2)
    slow = SlowStorage(brokers[1])
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    created = admin.create_topics([NewTopic("wide", WIDE, 2)])["wide"]
    wait_for("broker 2 to open its first replicas", lambda: slow.opened > 0)
    versions = request_spec(API_VERSIONS).cls(client_software_name="test", client_software_version="1")
    with RawClient(brokers[1].bootstrap_servers) as other:
        assert other.request(API_VERSIONS, 3, versions).error_code == ErrorCode.NONE
    assert slow.opened < WIDE, "broker 2 answered only once every replica was open"
    created.result(DEADLINE)
    placed = wait_for("leaders of wide", lambda: leaders(brokers, "wide", WIDE))
    assert all(replicas == [1, 2] for _, replicas, _ in placed.values())
    wait_for("broker 2 to open every replica", lambda: slow.opened == WIDE)


def test_a_session_lost_while_replicas_open_ends_that_apply_without_leading(brokkr_cluster):
    """An apply paused between turns whose ZooKeeper session is lost meanwhile goes no
    further: its partition states are stale, and a broker out of the cluster must lead
    nothing. Once registered again (the membership re-reads everything and reports a
    change), the next apply opens the rest and takes up its leaderships."""
    from kazoo.protocol.states import KazooState

    brokers = brokkr_cluster(2)
    b2 = brokers[1]
    slow = SlowStorage(b2)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("wide", WIDE, 2)])["wide"].result(DEADLINE)
    wait_for("broker 2 to be opening its replicas", lambda: slow.opened > 10)
    replicas = b2.broker.replicas
    membership = replicas.membership

    def led() -> list[str]:
        return [p.name for t in b2.broker.topics.values() for p in t.local_partitions() if p.is_leader]

    membership._state_changed(KazooState.LOST)  # from this thread, as kazoo's reports it
    wait_for("the loss to reach the broker", lambda: replicas._sessions_lost == 1)
    opened = slow.opened
    assert 0 < opened < WIDE
    time.sleep(0.3)  # 150 more replicas' worth of opening, had the apply gone on
    assert slow.opened == opened
    assert b2.call(led) == []

    def registered_again() -> None:  # ZooKeeperMembership._rejoin once registered (here the session lives on)
        membership._expired = False
        membership._schedule_refresh()

    b2.call(registered_again)
    wait_for("every replica open", lambda: slow.opened == WIDE)

    def leads_its_share() -> bool:
        placed = leaders(brokers, "wide", WIDE) or {}
        share = sorted(f"wide-{i}" for i, (leader, _, _) in placed.items() if leader == 2)
        return bool(share) and sorted(b2.call(led)) == share

    wait_for("broker 2 to lead what the cluster says it leads", leads_its_share)


def test_kafka_python_and_aiokafka_against_a_cluster(brokkr_cluster):
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from kafka import KafkaProducer

    brokers = brokkr_cluster(3)
    create(brokers, "py", 3, 3)
    producer = KafkaProducer(bootstrap_servers=brokers[1].bootstrap_servers, acks="all")
    for i in range(90):
        producer.send("py", key=b"k%d" % i, value=b"%05d" % i)
    producer.flush(DEADLINE)
    producer.close()

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer(
            "py", bootstrap_servers=brokers[2].bootstrap_servers, group_id="aio", auto_offset_reset="earliest"
        )
        await asyncio.wait_for(consumer.start(), DEADLINE)
        got: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE
            while len(got) < 90 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    got.extend(r.value for r in records)
        finally:
            await asyncio.wait_for(consumer.stop(), 10)
        return got

    assert sorted(asyncio.run(consume())) == [b"%05d" % i for i in range(90)]


def test_high_watermarks_are_checkpointed_in_kafkas_format_and_restored(
    brokkr_broker_factory, brokkr_zookeeper, tmp_path
):
    def start(n: int):
        config = {"node.id": n, "zookeeper.connect": brokkr_zookeeper, "log.dirs": str(tmp_path / f"b{n}"), **CLUSTER}
        return brokkr_broker_factory(config)

    brokers = [start(1), start(2)]
    create(brokers, "hw", 1, 2)
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(10):
        producer.produce("hw", b"%d" % i)
    assert producer.flush(DEADLINE) == 0
    wait_for(
        "both high watermarks at 10",
        lambda: all(b.call(lambda b=b: b.broker.partition("hw", 0).high_watermark) == 10 for b in brokers),
    )
    for b in brokers:
        b.stop()
    for n in (1, 2):
        lines = (tmp_path / f"b{n}" / "replication-offset-checkpoint").read_text().splitlines()
        assert lines[0] == "0" and "hw 0 10" in lines[2:] and int(lines[1]) == len(lines) - 2
    again = start(1)  # alone: a follower of nobody, it still knows what was committed
    partition = wait_for("the replica reopened", lambda: again.broker.partition("hw", 0))
    assert again.call(lambda: partition.high_watermark) == 10


@pytest.mark.parametrize("auto", [False, True])
def test_leadership_returns_to_the_preferred_replica(brokkr_cluster, brokkr_broker_factory, brokkr_zookeeper, auto):
    from confluent_kafka import ElectionType

    settings = {"auto_leader_rebalance_enable": auto, "leader_imbalance_check_interval_seconds": 1}
    brokers = brokkr_cluster(3, **settings)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("e", 1, replica_assignment=[[1, 2, 3]])])["e"].result(DEADLINE)
    wait_for("broker 1 to lead", lambda: (m := leaders(brokers, "e", 1)) and m[0][0] == 1)
    config = {k: brokers[0].broker.config[k] for k in ("node.id", "zookeeper.connect", "log.dirs")}
    brokers[0].stop()
    alive = brokers[1:]
    assert leaders(alive, "e", 1)[0][0] in (2, 3)
    back = brokkr_broker_factory(
        {
            **config,
            "log.dirs": ",".join(config["log.dirs"]),
            **CLUSTER,
            **{k.replace("_", "."): v for k, v in settings.items()},
        }
    )
    brokers = [back, *alive]
    wait_for("broker 1 back in sync", lambda: (m := leaders(brokers, "e", 1)) and m[0][2] == [1, 2, 3])
    if not auto:
        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
        result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("e", 0)]).result(DEADLINE)
        assert [err for err in result.values()] == [None]
    wait_for("broker 1 to lead again", lambda: (m := leaders(brokers, "e", 1)) and m[0][0] == 1)


def reassign(c: RawClient, version: int, moves: dict[int, list[int] | None], allow_rf_change: bool = True) -> list:
    from brokkr.core.protocol.frames import request_spec

    spec = request_spec(45)
    topic = spec.struct("ReassignableTopic")(
        name="mv",
        partitions=[spec.struct("ReassignablePartition")(partition_index=p, replicas=r) for p, r in moves.items()],
    )
    body = spec.cls(timeout_ms=10000, allow_replication_factor_change=allow_rf_change, topics=[topic])
    response = c.request(45, version, body)
    return [p.error_code for p in response.responses[0].partitions]


def test_a_partition_moves_to_new_replicas_and_keeps_its_records(brokkr_cluster):
    from brokkr.core.protocol.frames import request_spec

    brokers = brokkr_cluster(4)
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    admin.create_topics([NewTopic("mv", 2, replica_assignment=[[1, 2], [2, 1]])])["mv"].result(DEADLINE)
    wait_for("leaders", lambda: leaders(brokers, "mv", 2))
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all"})
    for i in range(50):
        producer.produce("mv", b"%05d" % i, partition=0)
    assert producer.flush(DEADLINE) == 0
    with RawClient(brokers[0].bootstrap_servers) as c:
        assert reassign(c, 0, {0: [3, 4]}) == [ErrorCode.NONE]
        assert reassign(c, 0, {1: None}) == [ErrorCode.NO_REASSIGNMENT_IN_PROGRESS]
        assert reassign(c, 0, {1: [1, 9]}) == [ErrorCode.INVALID_REPLICA_ASSIGNMENT]
        assert reassign(c, 1, {1: [1, 2, 3]}, allow_rf_change=False) == [ErrorCode.INVALID_REPLICATION_FACTOR]
        moved = wait_for(
            "the move to complete", lambda: (m := leaders(brokers, "mv", 2)) and m[0][1] == [3, 4] == m[0][2] and m
        )
        ongoing = c.request(46, 0, request_spec(46).cls(timeout_ms=1000, topics=None))
    assert moved[0][0] in (3, 4) and moved[0][2] == [3, 4]
    assert ongoing.topics == []
    assert all(b.broker.partition("mv", 0) is None for b in brokers[:2]), "the old replicas are gone"
    assert sorted(consume_all(brokers, "mv", 1, 50)) == [b"%05d" % i for i in range(50)]


def test_producer_ids_are_unique_across_the_cluster(brokkr_cluster, brokkr_zookeeper):
    """Each broker reserves blocks of 1000 ids in /latest_producer_id_block (Kafka's znode
    and format), so idempotent and transactional producers never share an id, whichever
    broker they asked; a restarted broker takes a new block."""
    from kazoo.client import KazooClient

    brokers = brokkr_cluster(3)

    def new_ids(broker, n=3):
        with RawClient(broker.bootstrap_servers) as c:
            answers = [c.request(INIT_PRODUCER_ID, 4, init_producer_id_body()) for _ in range(n)]
        assert all(a.error_code == ErrorCode.NONE and a.producer_epoch == 0 for a in answers)
        return [a.producer_id for a in answers]

    ids = [pid for b in brokers for pid in new_ids(b)]
    assert len(set(ids)) == len(ids) == 9
    assert sorted({pid // 1000 for pid in ids}) == [0, 1, 2], "one block per broker"
    hosts, chroot = brokkr_zookeeper.split("/", 1)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=10)
    try:
        block = json.loads(zk.get(f"/{chroot}/latest_producer_id_block")[0])
    finally:
        zk.stop()
        zk.close()
    assert block["version"] == 1 and block["block_start"] == "2000" and block["block_end"] == "2999"
    assert block["broker"] in {1, 2, 3}
