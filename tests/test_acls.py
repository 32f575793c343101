"""The ACL authorizer (Kafka's StandardAuthorizer semantics) and CreateAcls, DescribeAcls and
DeleteAcls, from the decision table up to real admin clients over SASL/PLAIN."""

from __future__ import annotations

import pytest
from brokkr.core.authorization import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Action,
    AuthorizationResult,
    PatternType,
    ResourceType,
)
from brokkr.core.context import ConnectionInfo, Principal, RequestContext
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec
from brokkr.core.testing import RawClient
from brokkr.plugins.auth.acl import AclAuthorizer
from brokkr.plugins.storage.memory import MemoryStorage
from confluent_kafka import KafkaError, Producer
from confluent_kafka import admin as ck
from kafka import KafkaProducer
from kafka import admin as kp
from kafka.errors import TopicAuthorizationFailedError
from wire import METADATA, PRODUCE, batch, metadata_body, produce_body

ANY, TOPIC, GROUP, CLUSTER, TXN = (
    ResourceType.ANY,
    ResourceType.TOPIC,
    ResourceType.GROUP,
    ResourceType.CLUSTER,
    ResourceType.TRANSACTIONAL_ID,
)
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = 30, 29, 31
KP_TOPIC, KP_PREFIXED = kp.ResourceType.TOPIC, kp.ACLResourcePatternType.PREFIXED


def acl(name, op, perm=ALLOW, principal="User:alice", host="*", kind=TOPIC, pattern=LITERAL) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, perm)


def context(principal="User:alice", host="10.0.0.1") -> RequestContext:
    kind, _, name = principal.partition(":")
    conn = ConnectionInfo("c-0", "SASL_PLAINTEXT", "SASL_PLAINTEXT", host, 50000)
    return RequestContext(conn, Principal(kind, name), 0, 9, "client", 1)


def allowed(acls, op, name, kind=TOPIC, principal="User:alice", host="10.0.0.1", **settings) -> bool:
    authorizer = AclAuthorizer(MemoryStorage({}), settings.get("super_users", frozenset()), settings.get("open", False))
    authorizer.create_acls(acls)
    [result] = authorizer.authorize(context(principal, host), [Action(op, kind, name)])
    return result is AuthorizationResult.ALLOWED


# -- the decision table (StandardAuthorizerData) --------------------------------------------


@pytest.mark.parametrize(
    "acls, op, name, principal, host, expected",
    [
        ([acl("t", Op.READ)], Op.READ, "t", "User:alice", "10.0.0.1", True),
        ([acl("t", Op.READ)], Op.WRITE, "t", "User:alice", "10.0.0.1", False),
        ([acl("t", Op.READ)], Op.READ, "t", "User:bob", "10.0.0.1", False),
        ([acl("t", Op.READ)], Op.READ, "u", "User:alice", "10.0.0.1", False),
        # deny wins, whatever the order and however general the allow
        (
            [acl("t", Op.READ, principal="User:*"), acl("t", Op.READ, DENY)],
            Op.READ,
            "t",
            "User:alice",
            "1.1.1.1",
            False,
        ),
        ([acl("t", Op.READ, principal="User:*"), acl("t", Op.READ, DENY)], Op.READ, "t", "User:bob", "1.1.1.1", True),
        ([acl("t", Op.ALL), acl("t", Op.WRITE, DENY)], Op.WRITE, "t", "User:alice", "1.1.1.1", False),
        ([acl("t", Op.ALL), acl("t", Op.WRITE, DENY)], Op.READ, "t", "User:alice", "1.1.1.1", True),
        ([acl("t", Op.READ), acl("t", Op.ALL, DENY)], Op.READ, "t", "User:alice", "1.1.1.1", False),
        # prefixed patterns match names that start with them, and nothing shorter
        ([acl("orders.", Op.WRITE, pattern=PREFIXED)], Op.WRITE, "orders.eu", "User:alice", "1.1.1.1", True),
        ([acl("orders.", Op.WRITE, pattern=PREFIXED)], Op.WRITE, "orders.", "User:alice", "1.1.1.1", True),
        ([acl("orders.", Op.WRITE, pattern=PREFIXED)], Op.WRITE, "orders", "User:alice", "1.1.1.1", False),
        ([acl("orders.", Op.WRITE, pattern=PREFIXED)], Op.WRITE, "xorders.eu", "User:alice", "1.1.1.1", False),
        (
            [acl("o", Op.WRITE, pattern=PREFIXED), acl("orders.eu", Op.WRITE, DENY)],
            Op.WRITE,
            "orders.eu",
            "User:alice",
            "1.1.1.1",
            False,
        ),
        (
            [acl("o", Op.WRITE, pattern=PREFIXED), acl("ord", Op.WRITE, DENY, pattern=PREFIXED)],
            Op.WRITE,
            "orders",
            "User:alice",
            "1.1.1.1",
            False,
        ),
        # a LITERAL "*" is every resource of its type; a PREFIXED "*" is only names starting with '*'
        ([acl("*", Op.READ)], Op.READ, "anything", "User:alice", "1.1.1.1", True),
        ([acl("*", Op.READ, pattern=PREFIXED)], Op.READ, "anything", "User:alice", "1.1.1.1", False),
        ([acl("*", Op.READ, DENY), acl("t", Op.READ)], Op.READ, "t", "User:alice", "1.1.1.1", False),
        # User:* is every principal
        ([acl("t", Op.READ, principal="User:*")], Op.READ, "t", "User:carol", "1.1.1.1", True),
        # hosts: '*' or the exact client address
        ([acl("t", Op.READ, host="10.0.0.1")], Op.READ, "t", "User:alice", "10.0.0.1", True),
        ([acl("t", Op.READ, host="10.0.0.1")], Op.READ, "t", "User:alice", "10.0.0.2", False),
        ([acl("t", Op.READ), acl("t", Op.READ, DENY, host="10.0.0.2")], Op.READ, "t", "User:alice", "10.0.0.1", True),
        ([acl("t", Op.READ), acl("t", Op.READ, DENY, host="10.0.0.2")], Op.READ, "t", "User:alice", "10.0.0.2", False),
        # implied operations: only an ALLOW implies, and only DESCRIBE and DESCRIBE_CONFIGS
        *[
            ([acl("t", op)], Op.DESCRIBE, "t", "User:alice", "1.1.1.1", True)
            for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        ],
        ([acl("t", Op.CREATE)], Op.DESCRIBE, "t", "User:alice", "1.1.1.1", False),
        ([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, "t", "User:alice", "1.1.1.1", True),
        ([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE, "t", "User:alice", "1.1.1.1", False),
        ([acl("t", Op.DESCRIBE)], Op.READ, "t", "User:alice", "1.1.1.1", False),
        ([acl("t", Op.WRITE), acl("t", Op.READ, DENY)], Op.DESCRIBE, "t", "User:alice", "1.1.1.1", True),
        ([acl("t", Op.WRITE), acl("t", Op.DESCRIBE, DENY)], Op.DESCRIBE, "t", "User:alice", "1.1.1.1", False),
        # resource types are separate namespaces
        ([acl("t", Op.READ, kind=GROUP)], Op.READ, "t", "User:alice", "1.1.1.1", False),
    ],
)
def test_decisions_follow_kafkas_standard_authorizer(acls, op, name, principal, host, expected):
    assert allowed(acls, op, name, principal=principal, host=host) is expected


def test_super_users_may_do_anything_even_against_a_deny():
    acls = [acl("t", Op.ALL, DENY, principal="User:*")]
    assert allowed(acls, Op.WRITE, "t", principal="User:root", super_users=frozenset({"User:root"}))
    assert not allowed(acls, Op.WRITE, "t", principal="User:alice", super_users=frozenset({"User:root"}))


def test_allow_everyone_if_no_acl_found_only_where_no_acl_names_the_resource():
    assert not allowed([], Op.READ, "t")
    assert allowed([], Op.READ, "t", open=True)
    # an ACL for someone else on the resource (here by prefix) closes it to everyone else
    assert not allowed([acl("t", Op.READ, principal="User:bob", pattern=PREFIXED)], Op.READ, "topic", open=True)
    assert allowed([acl("x", Op.READ, principal="User:bob")], Op.READ, "t", open=True)
    assert not allowed([acl("*", Op.READ, principal="User:bob")], Op.READ, "t", open=True)


def test_acls_persist_through_the_storage_and_are_deleted_by_filter():
    storage = MemoryStorage({})
    first = AclAuthorizer(storage, frozenset(), False)
    first.create_acls([acl("orders.", Op.WRITE, pattern=PREFIXED), acl("t", Op.READ, principal="User:bob")])
    first.create_acls([acl("t", Op.READ, principal="User:bob")])  # already there: nothing changes
    again = AclAuthorizer(storage, frozenset(), False)
    everything = AclBindingFilter(ANY, None, PatternType.ANY, None, None, Op.ANY, AclPermissionType.ANY)
    assert again.acls(everything) == first.acls(everything) and len(again.acls(everything)) == 2
    bobs = AclBindingFilter(ANY, None, PatternType.ANY, "User:bob", None, Op.ANY, AclPermissionType.ANY)
    assert again.delete_acls([bobs, bobs]) == [[acl("t", Op.READ, principal="User:bob")]] * 2
    assert [a.principal for a in AclAuthorizer(storage, frozenset(), False).acls(everything)] == ["User:alice"]


@pytest.mark.parametrize(
    "resource_filter, expected",
    [
        ((TOPIC, "orders.eu", PatternType.MATCH), {"orders.", "*", "orders.eu"}),
        ((TOPIC, "orders.eu", PatternType.ANY), {"orders.eu"}),
        ((TOPIC, "orders.", PatternType.ANY), {"orders."}),
        ((TOPIC, "orders.", PatternType.LITERAL), set()),
        ((TOPIC, None, PREFIXED), {"orders."}),
        ((ANY, None, PatternType.ANY), {"orders.", "*", "orders.eu", "other", "g"}),
        ((GROUP, None, PatternType.MATCH), {"g"}),
    ],
)
def test_filters_match_as_kafkas_acl_binding_filter(resource_filter, expected):
    acls = [
        acl("orders.", Op.WRITE, pattern=PREFIXED),
        acl("*", Op.READ),
        acl("orders.eu", Op.READ),
        acl("other", Op.READ),
        acl("g", Op.READ, kind=GROUP),
    ]
    kind, name, pattern = resource_filter
    f = AclBindingFilter(kind, name, pattern, None, None, Op.ANY, AclPermissionType.ANY)
    assert {a.resource_name for a in acls if f.matches(a)} == expected


# -- real admin clients over SASL/PLAIN --------------------------------------------------------

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    + ";"
)


def secure_config(log_dirs=None, **extra) -> dict:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "acl",
        "super.users": "User:admin",
        # example plugins installed beside brokkr answer brokkr_authorize before the built-in ACLs
        "brokkr.plugins.disabled": "example-policy",
    }
    if log_dirs is not None:
        config["log.dirs"] = str(log_dirs)
    config.update(extra)
    return config


def ck_conf(broker, user, **extra) -> dict:
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        "log_level": 3,
        **extra,
    }


def produce_one(broker, user, topic) -> KafkaError | None:
    producer = Producer(ck_conf(broker, user, **{"message.timeout.ms": 5000, "allow.auto.create.topics": False}))
    errors = []
    producer.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(10) == 0
    return errors[0]


def ck_binding(kind, name, pattern, principal, op, perm):
    return ck.AclBinding(kind, name, pattern, principal, "*", op, perm)


EVERYTHING = ck.AclBindingFilter(
    ck.ResourceType.ANY, None, ck.ResourcePatternType.ANY, None, None, ck.AclOperation.ANY, ck.AclPermissionType.ANY
)


def test_confluent_admin_client_manages_acls_that_hold_across_a_restart(brokkr_broker_factory, tmp_path):
    broker = brokkr_broker_factory(secure_config(tmp_path))
    admin = ck.AdminClient(ck_conf(broker, "admin"))
    for name in ("orders.eu", "orders.secret", "payments", "public.news"):
        admin.create_topics([ck.NewTopic(name, 1, 1)])[name].result(10)
    topic, prefixed, literal = ck.ResourceType.TOPIC, ck.ResourcePatternType.PREFIXED, ck.ResourcePatternType.LITERAL
    allow, deny, write = ck.AclPermissionType.ALLOW, ck.AclPermissionType.DENY, ck.AclOperation.WRITE
    bindings = [
        ck_binding(topic, "orders.", prefixed, "User:alice", write, allow),  # a prefix
        ck_binding(topic, "orders.secret", literal, "User:alice", write, deny),  # deny wins
        ck_binding(topic, "public.news", literal, "User:*", write, allow),  # every principal
        ck_binding(topic, "*", literal, "User:bob", write, allow),  # every topic
    ]
    for future in admin.create_acls(bindings).values():
        assert future.result(10) is None

    def check_writes():
        assert produce_one(broker, "alice", "orders.eu") is None
        assert produce_one(broker, "alice", "public.news") is None
        for denied in ("orders.secret", "payments"):
            assert produce_one(broker, "alice", denied).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_one(broker, "bob", "payments") is None

    check_writes()
    assert set(admin.describe_acls(EVERYTHING).result(10)) == set(bindings)
    matching = ck.AclBindingFilter(
        topic, "orders.eu", ck.ResourcePatternType.MATCH, None, None, ck.AclOperation.ANY, ck.AclPermissionType.ANY
    )
    assert set(admin.describe_acls(matching).result(10)) == {bindings[0], bindings[3]}

    broker.stop()
    broker = brokkr_broker_factory(secure_config(tmp_path))
    admin = ck.AdminClient(ck_conf(broker, "admin"))
    assert set(admin.describe_acls(EVERYTHING).result(10)) == set(bindings)
    check_writes()

    alices = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        "User:alice",
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    [deleted] = admin.delete_acls([alices]).values()
    assert set(deleted.result(10)) == set(bindings[:2])
    assert produce_one(broker, "alice", "orders.eu").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert set(admin.describe_acls(EVERYTHING).result(10)) == set(bindings[2:])


def test_kafka_python_admin_client_creates_describes_and_deletes_acls(brokkr_broker_factory):
    broker = brokkr_broker_factory(secure_config())

    def sasl(user):
        return {
            "bootstrap_servers": broker.bootstrap_servers,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": USERS[user],
        }

    admin = kp.KafkaAdminClient(**sasl("admin"))
    try:
        admin.create_topics([kp.NewTopic("logs.app", 1, 1), kp.NewTopic("other", 1, 1)])
        allow, any_perm = kp.ACLPermissionType.ALLOW, kp.ACLPermissionType.ANY
        write_logs = kp.ACL(
            "User:bob", "*", kp.ACLOperation.WRITE, allow, kp.ResourcePattern(KP_TOPIC, "logs.", KP_PREFIXED)
        )
        read_group = kp.ACL(
            "User:bob", "*", kp.ACLOperation.READ, allow, kp.ResourcePattern(kp.ResourceType.GROUP, "g")
        )
        result = admin.create_acls([write_logs, read_group])
        assert result["failed"] == [] and len(result["succeeded"]) == 2

        producer = KafkaProducer(**sasl("bob"), max_block_ms=5000)
        try:
            producer.send("logs.app", b"v").get(timeout=10)
            with pytest.raises(TopicAuthorizationFailedError):
                producer.send("other", b"v").get(timeout=10)
        finally:
            producer.close(timeout=5)

        pattern_any = kp.ACLResourcePatternType.ANY
        bobs_topics = kp.ACLFilter(
            "User:bob", None, kp.ACLOperation.ANY, any_perm, kp.ResourcePatternFilter(KP_TOPIC, None, pattern_any)
        )
        assert admin.describe_acls(bobs_topics)[0] == [write_logs]
        [(_, deleted, error)] = admin.delete_acls([bobs_topics])
        assert deleted == [write_logs] and error.errno == 0
        everything = kp.ACLFilter(
            None, None, kp.ACLOperation.ANY, any_perm, kp.ResourcePatternFilter(kp.ResourceType.ANY, None, pattern_any)
        )
        assert admin.describe_acls(everything)[0] == [read_group]
    finally:
        admin.close()


# -- raw requests: what each API answers --------------------------------------------------------


class AsUser:
    """Gives every new PLAINTEXT connection the principal ``User:<user>`` set last, so a test
    opens a RawClient as someone."""

    def __init__(self, user="admin"):
        self.user = user

    @hookimpl
    def brokkr_authenticate(self, connection):
        return Principal("User", self.user)

    def client(self, broker, user, client_id="raw") -> RawClient:
        self.user = user
        return RawClient(broker.bootstrap_servers, client_id=client_id)


@pytest.fixture
def acl_broker(brokkr_broker_factory):
    """A PLAINTEXT broker with ACLs on, whose connections are whoever ``broker.as_user`` says."""
    as_user = AsUser()
    broker = brokkr_broker_factory(
        {"authorizer.class.name": "acl", "super.users": "User:admin", "brokkr.plugins.disabled": "example-policy"},
        plugins=[as_user],
    )
    broker.as_user = as_user
    return broker


def create_acls(client, *acls, version=3):
    spec = request_spec(CREATE_ACLS)
    creations = [
        spec.struct("AclCreation")(
            resource_type=a.resource_type,
            resource_name=a.resource_name,
            resource_pattern_type=a.pattern_type,
            principal=a.principal,
            host=a.host,
            operation=a.operation,
            permission_type=a.permission_type,
        )
        for a in acls
    ]
    return client.request(CREATE_ACLS, version, spec.cls(creations=creations))


def grant(broker, *acls):
    with broker.as_user.client(broker, "admin") as c:
        assert [r.error_code for r in create_acls(c, *acls).results] == [0] * len(acls)


def test_a_produce_request_writes_its_authorized_partitions_and_refuses_the_others(acl_broker):
    for name in ("mine", "theirs"):
        acl_broker.call(acl_broker.broker.create_topic, name, 2)
    grant(acl_broker, acl("mine", Op.WRITE))
    body = produce_body("mine", batch(3))
    spec = request_spec(PRODUCE)
    body.topic_data[0].partition_data.append(spec.struct("PartitionProduceData")(index=1, records=batch(2)))
    body.topic_data.append(produce_body("theirs", batch(1)).topic_data[0])
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        response = c.request(PRODUCE, 9, body)
    codes = {(t.name, p.index): p.error_code for t in response.responses for p in t.partition_responses}
    assert codes == {("mine", 0): 0, ("mine", 1): 0, ("theirs", 0): ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    ends = {(n, p.index): p.log.log_end_offset for n, t in acl_broker.broker.topics.items() for p in t.partitions}
    assert ends == {("mine", 0): 3, ("mine", 1): 2, ("theirs", 0): 0, ("theirs", 1): 0}


def test_transactional_batches_need_write_on_their_transactional_id(acl_broker):
    acl_broker.call(acl_broker.broker.create_topic, "t")
    grant(acl_broker, acl("t", Op.WRITE))
    from brokkr.core.protocol.records import build_batch

    txn_batch = build_batch([(b"k", b"v")], producer_id=1, producer_epoch=0, base_sequence=0, attributes=0x10)
    body = produce_body("t", txn_batch)
    body.transactional_id = "txn-1"
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        response = c.request(PRODUCE, 9, body)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert acl_broker.broker.topics["t"].partitions[0].log.log_end_offset == 0


def test_metadata_hides_what_the_principal_may_not_describe(acl_broker):
    for name in ("visible", "hidden"):
        acl_broker.call(acl_broker.broker.create_topic, name)
    grant(acl_broker, acl("visible", Op.READ))  # READ implies DESCRIBE
    spec = request_spec(METADATA)
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        everything = c.request(METADATA, 12, spec.cls(topics=None))
        named = c.request(METADATA, 12, metadata_body("visible", "hidden", "absent", auto_create=False))
        hidden_id = acl_broker.broker.topics["hidden"].topic_id
        by_id = c.request(
            METADATA, 12, spec.cls(topics=[spec.struct("MetadataRequestTopic")(name=None, topic_id=hidden_id)])
        )
    assert [t.name for t in everything.topics] == ["visible"]
    assert [(t.name, t.error_code) for t in named.topics] == [
        ("visible", 0),
        ("hidden", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        ("absent", ErrorCode.TOPIC_AUTHORIZATION_FAILED),  # no DESCRIBE: existence is not revealed
    ]
    assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [
        (None, hidden_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    ]


def test_metadata_creates_topics_only_with_create_on_the_cluster_or_the_topic(acl_broker):
    grant(acl_broker, acl("auto.", Op.DESCRIBE, pattern=PREFIXED), acl("auto.ok", Op.CREATE))
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        response = c.request(METADATA, 12, metadata_body("auto.ok", "auto.no"))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("auto.ok", 0),
        ("auto.no", ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]
    grant(acl_broker, acl(CLUSTER_NAME, Op.CREATE, kind=CLUSTER))
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        response = c.request(METADATA, 12, metadata_body("auto.no"))
    assert response.topics[0].error_code == 0 and "auto.no" in acl_broker.broker.topics


def test_acl_requests_need_alter_or_describe_on_the_cluster(acl_broker):
    spec = request_spec(DESCRIBE_ACLS)
    describe = spec.cls(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    delete_spec = request_spec(DELETE_ACLS)
    delete = delete_spec.cls(filters=[delete_spec.struct("DeleteAclsFilter")(**vars_of(describe))])
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        assert create_acls(c, acl("t", Op.READ)).results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert c.request(DESCRIBE_ACLS, 3, describe).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        response = c.request(DELETE_ACLS, 3, delete)
        assert response.filter_results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    grant(acl_broker, acl(CLUSTER_NAME, Op.ALTER, kind=CLUSTER), acl(CLUSTER_NAME, Op.DESCRIBE, DENY, kind=CLUSTER))
    with acl_broker.as_user.client(acl_broker, "alice") as c:
        assert create_acls(c, acl("t", Op.READ)).results[0].error_code == 0
        assert c.request(DESCRIBE_ACLS, 3, describe).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert len(c.request(DELETE_ACLS, 3, delete).filter_results[0].matching_acls) == 3


def vars_of(describe) -> dict:
    return {
        "resource_name_filter": None,
        "principal_filter": None,
        "host_filter": None,
        "resource_type_filter": describe.resource_type_filter,
        "pattern_type_filter": describe.pattern_type_filter,
        "operation": describe.operation,
        "permission_type": describe.permission_type,
    }


@pytest.mark.parametrize(
    "bad, message",
    [
        (acl("t", Op.READ, kind=ANY), "Invalid resourceType ANY"),
        (acl("t", Op.READ, pattern=PatternType.MATCH), "Invalid patternType MATCH"),
        (acl("t", Op.ANY), "Invalid operation ANY"),
        (acl("t", Op.READ, AclPermissionType.ANY), "Invalid permissionType ANY"),
        (acl("", Op.READ), "Resource name should not be empty"),
        (acl("my-cluster", Op.ALTER, kind=CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (acl("t", Op.READ, principal="alice"), "Could not parse principal from `alice`"),
    ],
)
def test_create_acls_refuses_invalid_acls_one_by_one(acl_broker, bad, message):
    with acl_broker.as_user.client(acl_broker, "admin") as c:
        results = create_acls(c, bad, acl("t", Op.READ)).results
    assert results[0].error_code == ErrorCode.INVALID_REQUEST and results[0].error_message.startswith(message)
    assert results[1].error_code == 0


def test_without_an_acl_authorizer_the_acl_apis_answer_security_disabled(brokkr_broker):
    spec = request_spec(DESCRIBE_ACLS)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(
            DESCRIBE_ACLS, 1, spec.cls(resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1)
        )
        assert (response.error_code, response.error_message) == (
            ErrorCode.SECURITY_DISABLED,
            "No Authorizer is configured.",
        )
        assert create_acls(c, acl("t", Op.READ), version=1).results[0].error_code == ErrorCode.SECURITY_DISABLED


def test_an_unknown_authorizer_class_is_refused_at_startup(brokkr_broker_factory):
    from brokkr.core.errors import ConfigError

    with pytest.raises(ConfigError, match="authorizer.class.name"):
        brokkr_broker_factory({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
