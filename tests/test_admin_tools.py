"""Kafka's admin tools as brokkr commands, run as a user runs them against a running broker:
``brokkr acls`` (kafka-acls.sh), ``brokkr configs --entity-type users|clients`` (SCRAM
credentials and client quotas, kafka-configs.sh) and ``brokkr scram`` (the first users,
before a broker's first start). The cluster tools are in tests/cluster/test_admin_tools.py."""

from __future__ import annotations

import io

import pytest
from brokkr.core.cli import main
from brokkr.core.client import RawClient
from brokkr.core.errors import ErrorCode
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from sasl_wire import login, sasl_config
from test_acls import USERS, produce_one, secure_config


def brokkr(capsys, *args: str) -> tuple[int, str, str]:
    """``brokkr ARGS``: its exit status, standard output and standard error."""
    status = main(["--log-level", "WARNING", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def as_user(broker, tmp_path, user: str, password: str) -> tuple[str, ...]:
    """``--bootstrap-server`` and ``--command-config`` (a client properties file) for ``user``,
    over SASL_PLAINTEXT with PLAIN."""
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{password}";\n'
    )
    return "--bootstrap-server", broker.bootstrap_servers, "--command-config", str(path)


def resource(kind: str, name: str, pattern: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"


def block(title: str, *entries: tuple[str, str, str]) -> str:
    """kafka-acls.sh's listing of one resource's ACLs: (principal, operation, permission) each."""
    lines = "\n".join(f"\t(principal={p}, host=*, operation={op}, permissionType={perm})" for p, op, perm in entries)
    return f"{title}: \n {lines} \n\n"


# -- brokkr acls ---------------------------------------------------------------------------


def test_acls_added_by_the_tool_hold_for_a_real_client_then_are_listed_and_removed(
    brokkr_broker_factory, tmp_path, capsys
):
    broker = brokkr_broker_factory(secure_config())
    broker.call(broker.broker.create_topic, "orders")
    admin = as_user(broker, tmp_path, "admin", USERS["admin"])
    assert produce_one(broker, "alice", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    status, out, err = brokkr(
        capsys, "acls", *admin, "--add", "--allow-principal", "User:alice", "--producer", "--topic", "orders"
    )
    assert (status, err) == (0, "")
    alice = [("User:alice", op, "ALLOW") for op in ("WRITE", "DESCRIBE", "CREATE")]
    assert out == block(f"Adding ACLs for resource `{resource('TOPIC', 'orders')}`", *alice)
    assert produce_one(broker, "alice", "orders") is None, "alice may write at once"

    status, out, _ = brokkr(capsys, "acls", *admin, "--list", "--topic", "orders")
    write, describe, create = alice
    listed = block(f"Current ACLs for resource `{resource('TOPIC', 'orders')}`", write, create, describe)
    assert (status, out) == (0, listed)  # in the order of Kafka's operation codes: WRITE 4, CREATE 5, DESCRIBE 8

    status, out, _ = brokkr(capsys, "acls", *admin, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders")  # fmt: skip
    assert (status, out) == (0, "")
    assert produce_one(broker, "alice", "orders").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    _, out, _ = brokkr(capsys, "acls", *admin, "--list")
    assert out == block(f"Current ACLs for resource `{resource('TOPIC', 'orders')}`", create, describe)
    assert brokkr(capsys, "acls", *admin, "--remove", "--force", "--topic", "orders")[0] == 0  # every ACL of the topic
    assert brokkr(capsys, "acls", *admin, "--list") == (0, "", "")

    as_alice = as_user(broker, tmp_path, "alice", USERS["alice"])
    status, _, err = brokkr(
        capsys, "acls", *as_alice, "--add", "--allow-principal", "User:alice", "--operation", "All", "--cluster"
    )
    assert status == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err, "only who may alter the cluster adds ACLs"


def test_acl_roles_patterns_and_usage_follow_kafka_acls(brokkr_broker_factory, tmp_path, capsys, monkeypatch):
    broker = brokkr_broker_factory(secure_config())
    admin = as_user(broker, tmp_path, "admin", USERS["admin"])
    status, _, err = brokkr(capsys, "acls", *admin, "--add", "--allow-principal", "User:bob", "--producer", "--consumer", "--idempotent", "--topic", "logs.", "--group", "readers", "--transactional-id", "tx", "--resource-pattern-type", "PREFIXED")  # fmt: skip
    assert (status, err) == (0, "")
    status, _, _ = brokkr(capsys, "acls", *admin, "--add", "--deny-principal", "User:*", "--deny-host", "10.9.9.9", "--operation", "Read", "--topic", "logs.secret")  # fmt: skip
    assert status == 0
    status, out, _ = brokkr(capsys, "acls", *admin, "--list", "--principal", "User:bob")
    bob = "User:bob"
    assert (status, out) == (0, "ACLs for principal `User:bob`\n" + "".join([
        block(f"Current ACLs for resource `{resource('TOPIC', 'logs.', 'PREFIXED')}`",
              (bob, "READ", "ALLOW"), (bob, "WRITE", "ALLOW"), (bob, "CREATE", "ALLOW"), (bob, "DESCRIBE", "ALLOW")),
        block(f"Current ACLs for resource `{resource('GROUP', 'readers', 'PREFIXED')}`", (bob, "READ", "ALLOW")),
        block(f"Current ACLs for resource `{resource('CLUSTER', 'kafka-cluster')}`", (bob, "IDEMPOTENT_WRITE", "ALLOW")),
        block(f"Current ACLs for resource `{resource('TRANSACTIONAL_ID', 'tx', 'PREFIXED')}`",
              (bob, "WRITE", "ALLOW"), (bob, "DESCRIBE", "ALLOW")),
    ]))  # fmt: skip
    _, out, _ = brokkr(capsys, "acls", *admin, "--list", "--topic", "logs.secret", "--resource-pattern-type", "match")
    assert (
        "name=logs., patternType=PREFIXED" in out
        and "(principal=User:*, host=10.9.9.9, operation=READ, permissionType=DENY)" in out
    )

    readers = ("--group", "readers", "--resource-pattern-type", "prefixed")
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    status, out, _ = brokkr(capsys, "acls", *admin, "--remove", *readers)
    assert (status, out) == (
        0, f"Are you sure you want to delete all ACLs for resource filter `{resource('GROUP', 'readers', 'PREFIXED')}`? (y/n)\n"
    )  # fmt: skip
    assert "resourceType=GROUP" in brokkr(capsys, "acls", *admin, "--list", *readers)[1], "kept: the answer was n"
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    assert brokkr(capsys, "acls", *admin, "--remove", *readers)[0] == 0
    assert brokkr(capsys, "acls", *admin, "--list", *readers) == (0, "", "")

    for args, message in [
        (("--add", "--topic", "t", "--allow-principal", "User:a", "--resource-pattern-type", "match"),
         "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."),
        (("--add", "--topic", "t"), "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."),
        (("--add", "--allow-principal", "User:a"), "You must provide at least one resource"),
        (("--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"),
         "ResourceType GROUP only supports operations Read, Delete, Describe, DescribeConfigs, AlterConfigs, All"),
        (("--add", "--topic", "t", "--allow-principal", "alice"), "expected a string in format principalType:principalName"),
        (("--list", "--producer", "--topic", "t"), "Option --list can't be used with option --producer"),
        (("--add", "--consumer", "--topic", "t", "--allow-principal", "User:a"), "With --consumer you must specify a --topic and a --group"),
    ]:  # fmt: skip
        status, out, err = brokkr(capsys, "acls", *admin, *args)
        assert status == 1 and message in err and out == "", args


# -- brokkr configs --entity-type users|clients --------------------------------------------


def test_a_scram_user_added_through_a_running_broker_logs_in_at_once(brokkr_broker_factory, tmp_path, capsys):
    broker = brokkr_broker_factory(sasl_config())
    admin = as_user(broker, tmp_path, "admin", "admin-secret")
    users = ("--entity-type", "users", "--entity-name", "carol")
    status, out, err = brokkr(capsys, "configs", *admin, "--alter", *users, "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret],SCRAM-SHA-512=[password=carol-512]")  # fmt: skip
    assert (status, out, err) == (0, "Completed updating config for user carol.\n", "")
    for mechanism, password in (("SCRAM-SHA-256", "carol-secret"), ("SCRAM-SHA-512", "carol-512")):
        carol = AdminClient({
            "bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": "carol", "sasl.password": password,
        })  # fmt: skip
        assert carol.list_topics(timeout=10).brokers, f"carol logs in with {mechanism}"

    status, out, _ = brokkr(capsys, "configs", *admin, "--describe", *users)
    assert (status, out) == (
        0, "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )  # fmt: skip
    assert brokkr(capsys, "configs", *admin, "--alter", *users, "--delete-config", "SCRAM-SHA-512")[0] == 0
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-512", "carol", "carol-512").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-256", "carol", "carol-secret").error_code == ErrorCode.NONE

    status, _, err = brokkr(
        capsys, "configs", *admin, "--alter", *users, "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]"
    )
    assert status == 1 and "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256" in err
    status, _, err = brokkr(
        capsys,
        "configs",
        *admin,
        *"--alter --entity-type users --entity-default --add-config SCRAM-SHA-256=[password=x]".split(),
    )
    assert status == 1 and "--entity-default or --user-defaults is not allowed with User SCRAM Credentials" in err


def test_client_quotas_set_described_and_deleted(brokkr_broker, capsys):
    server = ("--bootstrap-server", brokkr_broker.bootstrap_servers)
    alice_app = ("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app")
    rates = "producer_byte_rate=1024,consumer_byte_rate=2048"
    status, out, err = brokkr(capsys, "configs", *server, "--alter", *alice_app, "--add-config", rates)
    assert (status, out, err) == (0, "Completed updating config for user alice.\n", "")
    status, out, _ = brokkr(
        capsys,
        "configs",
        *server,
        *"--alter --entity-type clients --entity-default --add-config request_percentage=50".split(),
    )
    assert (status, out) == (0, "Completed updating default config for clients in the cluster.\n")

    assert brokkr(capsys, "configs", *server, "--describe", *alice_app)[:2] == (
        0, "Quota configs for user-principal 'alice', client-id 'app' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"
    )  # fmt: skip
    assert brokkr(capsys, "configs", *server, "--describe", "--entity-type", "clients")[:2] == (
        0, "Quota configs for the default client-id are request_percentage=50.0\n"
    )  # fmt: skip
    store = brokkr_broker.hook.brokkr_client_quota_store(broker=brokkr_broker.broker)
    alice_at_app = (("client-id", "app"), ("user", "alice"))
    assert brokkr_broker.call(store.quotas)[alice_at_app] == {"producer_byte_rate": 1024, "consumer_byte_rate": 2048}

    assert brokkr(capsys, "configs", *server, "--alter", *alice_app, "--delete-config", "producer_byte_rate")[0] == 0
    assert brokkr_broker.call(store.quotas)[alice_at_app] == {"consumer_byte_rate": 2048}
    status, _, err = brokkr(capsys, "configs", *server, "--alter", *alice_app, "--delete-config", "producer_byte_rate")
    assert (status, err) == (1, "Invalid config(s): producer_byte_rate\n")
    status, _, err = brokkr(
        capsys,
        "configs",
        *server,
        *"--alter --entity-type clients --entity-name app --add-config SCRAM-SHA-256=[password=x]".split(),
    )
    assert status == 1 and "Only quota configs can be added for 'clients' using --bootstrap-server" in err
    status, _, err = brokkr(
        capsys,
        "configs",
        *server,
        *"--alter --entity-type users --entity-name bob --add-config producer_byte_rate=-5".split(),
    )
    assert status == 1 and "INVALID_REQUEST" in err, "the broker's own checks answer"


# -- brokkr scram: the first users, offline ----------------------------------------------------


def test_offline_scram_users_in_the_readme_order_only_before_the_first_start(brokkr_broker_factory, tmp_path, capsys):
    data = tmp_path / "data"
    properties = tmp_path / "server.properties"
    properties.write_text(f"log.dirs={data}\n")
    add = ("scram", "add", "admin", "--mechanism", "SCRAM-SHA-512", "--password", "admin-secret", str(properties))
    assert brokkr(capsys, *add) == (0, "Added SCRAM-SHA-512 credentials for user 'admin' (4096 iterations)\n", "")
    assert brokkr(capsys, "scram", "add", "dana", "--password", "dana-secret", str(properties))[0] == 0, (
        "a second user, still before the start"
    )

    broker = brokkr_broker_factory(sasl_config(**{"log.dirs": str(data)}))
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-512", "admin", "admin-secret").error_code == ErrorCode.NONE
    broker.stop()

    for action in (add, ("scram", "remove", "dana", str(properties))):
        status, out, err = brokkr(capsys, *action)
        assert (status, out) == (2, "") and "holds a started broker's data" in err and "brokkr configs" in err, action
    assert brokkr(capsys, "scram", "list", str(properties))[1].splitlines() == [
        "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=4096",
        "SCRAM credential configs for user-principal 'dana' are SCRAM-SHA-256=iterations=4096",
    ]


@pytest.mark.parametrize("left", ["meta.properties", ".kafka_cleanshutdown", "orders-0"])
def test_offline_scram_refuses_any_sign_of_a_started_broker(tmp_path, capsys, left):
    data = tmp_path / "data"
    data.mkdir()
    if left == "orders-0":
        (data / left).mkdir()  # a partition's directory
    else:
        (data / left).write_text("")
    status, _, err = brokkr(capsys, "scram", "add", "eve", "--password", "p", "--override", f"log.dirs={data}")
    assert status == 2 and f"({left})" in err
    assert not (data / "brokkr-scram-credentials.json").exists()
