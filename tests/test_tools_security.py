"""brokkr's tools against secured listeners, as a user runs them: a Kafka client properties
file (``--command-config``, and the console tools' ``--producer.config`` and
``--consumer.config``) with SASL (SCRAM, PLAIN) over TLS; the errors of a wrong password,
an untrusted certificate, a missing file, a dead port; and re-authentication before the
broker's session ends (KIP-368)."""

from __future__ import annotations

import time

import pytest
from brokkr.core.testing import RawClient, free_port
from sasl_wire import Principals, alter_scram, login, sasl_config, upsertion
from tls_certs import make_tls
from wire import METADATA, metadata_body

from tests.test_listeners_and_tls import tls_client
from tests.test_tools import brokkr

SCRAM_FILE = """\
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="carol" password="{password}";
ssl.truststore.type=PEM
ssl.truststore.location={ca}
"""
#: librdkafka's names, as a kcat or confluent-kafka user writes them.
PLAIN_FILE = """\
security.protocol=sasl_ssl
sasl.mechanism=PLAIN
sasl.username=alice
sasl.password={password}
ssl.ca.location={ca}
"""


@pytest.fixture
def tls(tmp_path):
    return make_tls(tmp_path)


@pytest.fixture
def principals():
    return Principals()


@pytest.fixture
def secured(brokkr_broker_factory, tls, principals):
    """A broker whose only listener is SASL_SSL, with the SCRAM user carol added by an admin."""
    broker = brokkr_broker_factory(
        sasl_config("SASL_SSL://127.0.0.1:0", **{"ssl.keystore.location": str(tls.server_pem)}), plugins=[principals]
    )
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:
        assert login(c, "PLAIN", "admin", "admin-secret").error_code == 0
        assert alter_scram(c, [upsertion("carol", "carol-secret", "SCRAM-SHA-512")]).results[0].error_code == 0
    principals.seen.clear()
    return broker


def properties(tmp_path, template: str, ca, password: str) -> str:
    path = tmp_path / "client.properties"
    path.write_text(template.format(ca=ca, password=password))
    return str(path)


@pytest.mark.parametrize(
    "template,password,user",
    [(SCRAM_FILE, "carol-secret", "User:carol"), (PLAIN_FILE, "alice-secret", "User:alice")],
    ids=["scram-java-names", "plain-librdkafka-names"],
)
def test_every_tool_reaches_a_sasl_ssl_listener(secured, principals, tls, tmp_path, template, password, user):
    config = properties(tmp_path, template, tls.ca_pem, password)
    server = ("--bootstrap-server", secured.bootstrap_servers)
    secure = ("--command-config", config)
    done = brokkr("topics", *server, *secure, "--create", "--topic", "orders", "--partitions", "2")
    assert (done.returncode, done.stdout) == (0, "Created topic orders.\n"), done.stderr
    assert brokkr("topics", *server, *secure, "--list").stdout == "orders\n"
    described = brokkr("configs", *server, *secure, "--entity-type", "topics", "--entity-name", "orders", "--describe")
    assert (described.returncode, described.stdout) == (0, "Dynamic configs for topic orders are:\n"), described.stderr

    produced = brokkr(
        "console-producer", *server, "--topic", "orders", "--producer.config", config, input="one\ntwo\nthree\n"
    )
    assert produced.returncode == 0, produced.stderr
    consumed = brokkr(
        "console-consumer", *server, "--topic", "orders", "--consumer.config", config,
        "--group", "readers", "--from-beginning", "--max-messages", "3",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert sorted(consumed.stdout.splitlines()) == ["one", "three", "two"]
    groups = brokkr("consumer-groups", *server, *secure, "--describe", "--group", "readers")
    assert groups.returncode == 0, groups.stderr
    rows = [line.split() for line in groups.stdout.splitlines() if line.startswith("readers ")]
    assert sum(int(row[3]) for row in rows) == 3  # the committed offsets (CURRENT-OFFSET) of both partitions

    assert brokkr("topics", *server, *secure, "--delete", "--topic", "orders").returncode == 0
    assert set(principals.seen) == {user}  # every request of every tool, authenticated as the file's user


def test_without_the_settings_the_error_names_the_listener(secured):
    done = brokkr("topics", "--bootstrap-server", secured.bootstrap_servers, "--list")
    assert done.returncode == 2 and f"closed by the broker at {secured.bootstrap_servers}" in done.stderr


def test_a_wrong_password_is_the_brokers_answer(secured, tls, tmp_path):
    config = properties(tmp_path, SCRAM_FILE, tls.ca_pem, "wrong")
    done = brokkr("topics", "--bootstrap-server", secured.bootstrap_servers, "--command-config", config, "--list")
    assert done.returncode == 1
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
        in done.stderr
    )


def test_an_untrusted_certificate_is_refused(secured, tmp_path):
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    config = properties(tmp_path, SCRAM_FILE, make_tls(other_dir).ca_pem, "carol-secret")
    done = brokkr("topics", "--bootstrap-server", secured.bootstrap_servers, "--command-config", config, "--list")
    assert done.returncode == 2
    assert f"TLS handshake with {secured.bootstrap_servers} failed" in done.stderr
    assert "CERTIFICATE_VERIFY_FAILED" in done.stderr


@pytest.mark.parametrize(
    "settings,message",
    [
        ("security.protocol=SASL_SSH\n", "security.protocol=SASL_SSH is not one of PLAINTEXT, SSL, SASL_PLAINTEXT"),
        ("security.protocol=SASL_PLAINTEXT\n", "sasl.mechanism=GSSAPI is not available"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "SASL needs a user name and password"),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config=PlainLoginModule required\n",
            "is not terminated by ';'",
        ),
        ("security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n", "cannot load the TLS truststore"),
    ],
)
def test_settings_that_cannot_work_are_named(tmp_path, settings, message):
    path = tmp_path / "client.properties"
    path.write_text(settings)
    done = brokkr("topics", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path), "--list")
    assert done.returncode == 2 and message in done.stderr, done.stderr


@pytest.mark.parametrize(
    "tool",
    [
        ("topics", "--list"),
        ("configs", "--entity-type", "brokers", "--entity-default", "--describe"),
        ("console-consumer", "--topic", "t"),
        ("console-producer", "--topic", "t"),
    ],
)
def test_a_dead_port_is_named(tool):
    address = f"127.0.0.1:{free_port()}"
    done = brokkr(tool[0], "--bootstrap-server", address, *tool[1:], input="x\n")
    assert done.returncode != 0 and address in done.stderr, done.stderr
    assert "Connection refused" in done.stderr


def test_the_client_re_authenticates_before_the_session_ends(brokkr_broker_factory, principals):
    from brokkr.core.client_config import ClientConfig

    broker = brokkr_broker_factory(sasl_config(**{"connections.max.reauth.ms": "1500"}), plugins=[principals])
    config = ClientConfig(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
            'password="alice-secret";',
        }
    )
    began = time.monotonic()
    with RawClient(broker.bootstrap_servers, config=config) as c:
        for at in (0.0, 1.35, 2.1):  # the first session ends at 1.5 s, a second one at 2.85 s at the earliest
            time.sleep(max(0.0, began + at - time.monotonic()))
            assert c.request(METADATA, 12, metadata_body("probe", auto_create=False)).cluster_id
    assert set(principals.seen) == {"User:alice"}
