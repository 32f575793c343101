"""Real clients on SASL listeners: confluent-kafka (librdkafka) and kafka-python authenticate
with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL, then produce
and consume; a wrong password fails cleanly while others are served; SCRAM users added
with confluent's AdminClient and with ``brokkr scram`` survive a restart; both clients
re-authenticate before their sessions expire (KIP-368)."""

from __future__ import annotations

import logging
import time

import pytest
from brokkr.core.broker import BrokerThread
from brokkr.core.cli import main
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from sasl_wire import sasl_config
from tls_certs import make_tls

from .conftest import (
    DEFAULT_TIMEOUT,
    DeliveryReports,
    ck_conf,
    ck_consume,
    ck_flush,
    ck_producer,
    kp_consumer,
    kp_producer,
)

PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
USERS = {
    "PLAIN": ("alice", "alice-secret"),
    "SCRAM-SHA-256": ("sha256-user", "sha256-secret"),
    "SCRAM-SHA-512": ("sha512-user", "sha512-secret"),
}
BAD_PASSWORD = "Authentication failed: Invalid username or password"


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def addresses(broker) -> dict[str, str]:
    return {lst.name: f"{lst.host}:{lst.port}" for lst in broker.listeners}


def ck_security(protocol: str, mechanism: str, user: str, password: str, tls) -> dict[str, str]:
    conf = {
        "security.protocol": protocol,
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(tls.ca_pem)
    return conf


def kp_security(protocol: str, mechanism: str, user: str, password: str, tls) -> dict[str, object]:
    conf = dict(security_protocol=protocol, sasl_mechanism=mechanism, sasl_plain_username=user)
    conf["sasl_plain_password"] = password
    if protocol == "SASL_SSL":
        conf["ssl_cafile"] = str(tls.ca_pem)
    return conf


def add_scram_users(bootstrap: str, users: dict[str, tuple[str, str]], admin_conf: dict[str, str]) -> None:
    """Upsert SCRAM users through confluent's AdminClient (one request per user: Kafka
    refuses two credentials of one user in one request)."""
    admin = AdminClient(ck_conf(bootstrap, **admin_conf))
    for mechanism, (user, password) in users.items():
        info = ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), 4096)
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())])
        futures[user].result(timeout=DEFAULT_TIMEOUT)


@pytest.fixture(scope="module")
def secured(tmp_path_factory, tls):
    config = sasl_config(
        "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        **{"ssl.keystore.location": str(tls.server_pem), "log.dirs": str(tmp_path_factory.mktemp("secured"))},
    )
    broker = BrokerThread(config).start()
    admin = ck_security("SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret", tls)
    add_scram_users(addresses(broker)["SASL_PLAINTEXT"], {m: u for m, u in USERS.items() if m != "PLAIN"}, admin)
    yield broker
    broker.stop()


def new_topic(broker, name: str) -> str:
    broker.call(broker.broker.create_topic, name)
    return name


def kp_consume_values(bootstrap: str, topic: str, count: int, **security) -> list[bytes]:
    from kafka import TopicPartition

    consumer = kp_consumer(bootstrap, **security)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        while len(out) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()


VALUES = [b"value-0", b"value-1", b"value-2"]


def ck_round_trip(bootstrap: str, topic: str, security: dict) -> list[bytes | None]:
    producer = ck_producer(bootstrap, **security)
    for value in VALUES:
        producer.produce(topic, value=value)
    ck_flush(producer)
    return [r.value for r in ck_consume(bootstrap, topic, len(VALUES), **security)]


def kp_round_trip(bootstrap: str, topic: str, security: dict) -> list[bytes | None]:
    producer = kp_producer(bootstrap, **security)
    for value in VALUES:
        producer.send(topic, value=value).get(timeout=DEFAULT_TIMEOUT)
    producer.close()
    return kp_consume_values(bootstrap, topic, len(VALUES), **security)


CLIENTS = {"confluent-kafka": (ck_security, ck_round_trip), "kafka-python": (kp_security, kp_round_trip)}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", list(USERS))
@pytest.mark.parametrize("client", list(CLIENTS))
def test_clients_authenticate_produce_and_consume(secured, tls, client, protocol, mechanism):
    security, round_trip = CLIENTS[client]
    topic = new_topic(secured, f"{client}-{protocol}-{mechanism}".lower())
    bootstrap = addresses(secured)[protocol]
    assert round_trip(bootstrap, topic, security(protocol, mechanism, *USERS[mechanism], tls)) == VALUES


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("mechanism", list(USERS))
def test_confluent_kafka_with_a_wrong_password_fails_while_others_are_served(secured, tls, protocol, mechanism):
    bootstrap = addresses(secured)[protocol]
    user, _ = USERS[mechanism]
    errors = []
    bad = ck_producer(bootstrap, error_cb=errors.append, **ck_security(protocol, mechanism, user, "wrong", tls))
    topic = new_topic(secured, f"bad-{protocol}-{mechanism}".lower())
    bad.produce(topic, value=b"never")
    deadline = time.monotonic() + DEFAULT_TIMEOUT
    while not errors and time.monotonic() < deadline:
        bad.poll(0.2)
    assert errors and errors[0].code() == -169  # librdkafka's _AUTHENTICATION
    expected = BAD_PASSWORD if mechanism == "PLAIN" else f"invalid credentials with SASL mechanism {mechanism}"
    assert expected in errors[0].str()
    good = ck_producer(bootstrap, **ck_security(protocol, mechanism, *USERS[mechanism], tls))
    good.produce(topic, value=b"ok")
    ck_flush(good)
    assert bad.flush(0) == 1  # still undelivered


def test_kafka_python_with_a_wrong_password_fails(secured, tls, caplog):
    from kafka.errors import KafkaError

    bootstrap = addresses(secured)["SASL_PLAINTEXT"]
    security = kp_security("SASL_PLAINTEXT", "PLAIN", "alice", "wrong", tls)
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaError):
        kp_producer(bootstrap, bootstrap_timeout_ms=3000, **security)
    assert any(BAD_PASSWORD in r.getMessage() for r in caplog.records if r.name.startswith("kafka"))


def test_a_client_that_does_not_authenticate_is_refused(secured):
    """A PLAINTEXT client on a SASL listener: its ApiVersions is answered, its Metadata closes
    the connection; nothing is ever written."""
    errors, reports = [], DeliveryReports()
    producer = ck_producer(
        addresses(secured)["SASL_PLAINTEXT"],
        error_cb=errors.append,
        on_delivery=reports,
        **{"message.timeout.ms": 3000},
    )
    topic = new_topic(secured, "unauthenticated")
    producer.produce(topic, value=b"x")
    ck_flush(producer)
    assert [e.code() for e in reports.errors] == [-192]  # librdkafka's _MSG_TIMED_OUT
    assert errors
    assert secured.broker.topics[topic].partitions[0].log.log_end_offset == 0


def test_admin_client_describes_scram_users(secured, tls):
    admin = AdminClient(
        ck_conf(
            addresses(secured)["SASL_SSL"], **ck_security("SASL_SSL", "SCRAM-SHA-512", *USERS["SCRAM-SHA-512"], tls)
        )
    )
    described = admin.describe_user_scram_credentials().result(timeout=DEFAULT_TIMEOUT)
    infos = {user: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for user, d in described.items()}
    assert infos == {
        "sha256-user": [(ScramMechanism.SCRAM_SHA_256, 4096)],
        "sha512-user": [(ScramMechanism.SCRAM_SHA_512, 4096)],
    }


def test_scram_users_from_the_admin_client_and_the_cli_survive_a_restart(brokkr_broker_factory, tmp_path, tls):
    data = str(tmp_path / "data")
    config = sasl_config(**{"log.dirs": data})
    assert main(["scram", "add", "from-cli", "--password", "cli-made", "--override", f"log.dirs={data}"]) == 0
    broker = brokkr_broker_factory(config)  # its first start: the CLI's users only before it
    plain_admin = ck_security("SASL_PLAINTEXT", "PLAIN", "admin", "admin-secret", tls)
    add_scram_users(broker.bootstrap_servers, {"SCRAM-SHA-256": ("from-admin", "admin-made")}, plain_admin)
    broker.stop()

    broker = brokkr_broker_factory(config)
    topic = new_topic(broker, "after-restart")
    for user, password in (("from-admin", "admin-made"), ("from-cli", "cli-made")):
        producer = ck_producer(
            broker.bootstrap_servers, **ck_security("SASL_PLAINTEXT", "SCRAM-SHA-256", user, password, tls)
        )
        producer.produce(topic, value=user.encode())
        ck_flush(producer)
    records = ck_consume(
        broker.bootstrap_servers, topic, 2, **ck_security("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", tls)
    )
    assert [r.value for r in records] == [b"from-admin", b"from-cli"]


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_clients_re_authenticate_before_their_sessions_expire(brokkr_broker_factory, tls, caplog, client):
    broker = brokkr_broker_factory(sasl_config(**{"connections.max.reauth.ms": "1500"}))
    topic = new_topic(broker, "reauth")
    caplog.set_level(logging.DEBUG, logger="brokkr")
    if client == "confluent-kafka":
        producer = ck_producer(
            broker.bootstrap_servers, **ck_security("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", tls)
        )
        for i in range(16):
            producer.produce(topic, value=b"%d" % i)
            producer.poll(0)
            time.sleep(0.25)
        ck_flush(producer)
    else:
        producer = kp_producer(
            broker.bootstrap_servers, **kp_security("SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret", tls)
        )
        for i in range(16):
            producer.send(topic, value=b"%d" % i).get(timeout=DEFAULT_TIMEOUT)
            time.sleep(0.25)
        producer.close()
    assert broker.broker.topics[topic].partitions[0].log.log_end_offset == 16
    messages = [r.getMessage() for r in caplog.records]
    assert any("re-authentication begins" in m for m in messages)
    assert not any("session expired" in m for m in messages)
