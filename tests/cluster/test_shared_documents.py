"""ACLs, SCRAM credentials and client quotas hold for the whole cluster, as in Kafka: each
is one document the membership keeps (ZooKeeper's ``/brokkr/documents/<name>``, watched),
so what is set through one broker is enforced by every broker (core/shared_documents.py)."""

from __future__ import annotations

import time

import pytest
from brokkr.plugins.cluster.zookeeper import MAX_DOCUMENT_BYTES

from tests.cluster.test_replication import DEADLINE, leaders
from tests.test_quotas import CLIENT, set_quotas
from tests.waiting import wait_for

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)


def one_partition_per_broker(brokers, name: str) -> None:
    """Create ``name`` with partition i led by broker i + 1 alone."""
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap_servers})
    assignment = [[b.broker.node_id] for b in brokers]
    admin.create_topics([NewTopic(name, len(assignment), replica_assignment=assignment)])[name].result(DEADLINE)
    wait_for(f"leaders of {name}", lambda: leaders(brokers, name, len(brokers)))


def produce_one(address: str, topic: str, partition: int) -> KafkaError | None:
    """Produce one record to a partition; the delivery error (None: delivered)."""
    outcome = []
    producer = Producer({"bootstrap.servers": address, "retries": 0})
    producer.produce(topic, b"v", partition=partition, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(DEADLINE)
    assert outcome, "no delivery report"
    return outcome[0]


def test_an_acl_created_through_one_broker_is_enforced_by_every_broker(brokkr_cluster):
    brokers = brokkr_cluster(3, authorizer_class_name="acl", allow_everyone_if_no_acl_found="true")
    one_partition_per_broker(brokers, "guarded")
    # partition p is led by broker p + 1 alone, asked alone (its metadata, its produce)
    assert all(produce_one(b.bootstrap_servers, "guarded", p) is None for p, b in enumerate(brokers))

    def acl(operation, permission) -> AclBinding:
        return AclBinding(
            ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, "User:*", "*", operation, permission
        )

    # everything but writes: a topic with ACLs is no longer open by allow.everyone.if.no.acl.found
    acls = [acl(AclOperation.ALL, AclPermissionType.ALLOW), acl(AclOperation.WRITE, AclPermissionType.DENY)]
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap_servers})
    for created in admin.create_acls(acls).values():
        created.result(DEADLINE)

    for p, b in enumerate(brokers):
        error = wait_for(
            f"broker {b.broker.node_id} to deny writes",
            lambda p=p, b=b: produce_one(b.bootstrap_servers, "guarded", p),
            timeout=10,
        )
        assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


SASL = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",  # the first: between brokers
    "sasl_enabled_mechanisms": "SCRAM-SHA-256",
    "connection_failed_authentication_delay_ms": "0",
}


def scram_login(address: str, user: str, password: str) -> bool:
    """Whether ``user`` logs in with SCRAM-SHA-256 on the broker at ``address`` (confluent-kafka
    reads the cluster's metadata there), or is refused."""
    errors = []
    admin = AdminClient(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": password,
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except ck.KafkaException:
            admin.poll(0)
        if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
            return False
    raise AssertionError(f"{user} neither logged in nor was refused at {address}: {errors}")


def test_a_scram_user_created_through_one_broker_logs_in_on_every_broker(brokkr_cluster):
    brokers = brokkr_cluster(3, **SASL)
    sasl = {
        b.broker.node_id: next(f"{x.host}:{x.port}" for x in b.broker.listeners if x.name == "SASL_PLAINTEXT")
        for b in brokers
    }
    assert not scram_login(sasl[1], "carol", "carol-secret")  # no such user yet

    admin = AdminClient({"bootstrap.servers": brokers[1].bootstrap_servers})  # broker 2, PLAINTEXT
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    carol = UserScramCredentialUpsertion("carol", info, b"carol-secret")
    admin.alter_user_scram_credentials([carol])["carol"].result(DEADLINE)

    for node, address in sasl.items():
        wait_for(f"carol's login on broker {node}", lambda a=address: scram_login(a, "carol", "carol-secret"), 10)
    assert not scram_login(sasl[1], "carol", "wrong")


def test_a_client_quota_set_through_one_broker_throttles_on_every_broker(brokkr_cluster):
    brokers = brokkr_cluster(3)
    one_partition_per_broker(brokers, "metered")
    set_quotas(brokers[0], ({CLIENT: "hog"}, {"producer_byte_rate": 10_000}))  # through broker 1

    def throttled_by() -> set[int]:
        """The brokers that throttle 120 kB produced to each (10 kB/s over 10 s: about 2 s)."""
        throttles = []
        producer = Producer(
            {
                "bootstrap.servers": ",".join(b.bootstrap_servers for b in brokers),
                "client.id": "hog",
                "throttle_cb": lambda event: throttles.append(event),
            }
        )
        for p in range(len(brokers)):
            for _ in range(120):
                producer.produce("metered", b"x" * 1000, partition=p)
        assert producer.flush(DEADLINE) == 0
        producer.poll(0.5)
        return {event.broker_id for event in throttles if event.throttle_time > 0}

    throttling: set[int] = set()  # each broker throttles once it is told of the quota
    wait_for("every broker to throttle hog", lambda: throttling.update(throttled_by()) or throttling == {1, 2, 3}, 10)


def test_acls_beyond_what_one_znode_keeps_are_refused_and_nothing_changes(brokkr_cluster):
    """ZooKeeper drops a connection whose request is over jute.maxbuffer (1 MB): the ACLs
    that would take the document past MAX_DOCUMENT_BYTES are refused, the broker keeps the
    ones it had, and later ACLs are created as before."""
    (b,) = brokkr_cluster(1, authorizer_class_name="acl", super_users="User:ANONYMOUS")
    admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})

    def create(names: list[str]) -> list:
        bindings = [
            AclBinding(
                ResourceType.TOPIC,
                n,
                ResourcePatternType.LITERAL,
                "User:a",
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            )
            for n in names
        ]
        outcomes = []
        for future in admin.create_acls(bindings).values():
            try:
                outcomes.append(future.result(DEADLINE))
            except ck.KafkaException as exc:
                outcomes.append(exc.args[0].code())
        return outcomes

    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY, AclPermissionType.ANY
    )

    def described() -> list[str]:
        return sorted(acl.name for acl in admin.describe_acls(everything).result(DEADLINE))

    size = 30_000  # each ACL's entry in the document: a little more
    half = MAX_DOCUMENT_BYTES // size // 2 + 1  # twice this many ACLs: past the bound
    first = [f"{i}".ljust(size, "x") for i in range(half)]
    assert create(first) == [None] * half
    assert create([f"{i}".ljust(size, "y") for i in range(half)]) == [KafkaError.POLICY_VIOLATION] * half
    assert described() == sorted(first)
    assert create(["small"]) == [None]
    assert described() == sorted([*first, "small"])
