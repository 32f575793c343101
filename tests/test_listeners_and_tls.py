"""Listeners and their security protocols, per-listener settings, TLS from Kafka's ssl.*
settings, and the principals of SSL connections."""

from __future__ import annotations

import ssl

import pytest
from brokkr.core.errors import ConfigError, ErrorCode
from brokkr.core.jaas import parse_jaas_config
from brokkr.core.listeners import parse_listeners, parse_protocol_map
from brokkr.core.testing import RawClient
from brokkr.core.tls import distinguished_name
from brokkr.plugins.auth.sasl_plain import plain_users
from sasl_wire import JAAS, Principals, handshake, login, sasl_config
from tls_certs import make_tls
from wire import METADATA, metadata_body


def address(broker, name: str) -> str:
    listener = next(lst for lst in broker.listeners if lst.name == name)
    return f"{listener.host}:{listener.port}"


def tls_client(bootstrap: str, ca, cert=None, key=None) -> RawClient:
    c = RawClient(bootstrap)
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert:
        ctx.load_cert_chain(str(cert), str(key))
    c.sock = ctx.wrap_socket(c.sock, server_hostname="127.0.0.1")
    return c


def metadata_broker(c):
    return c.request(METADATA, 12, metadata_body("probe", auto_create=False)).brokers[0]


# -- listeners ---------------------------------------------------------------------------------


def test_listener_names_are_upper_case_and_mapped_to_protocols():
    listeners = parse_listeners(
        ["plaintext://:1", "internal://[::1]:2"], parse_protocol_map(["PLAINTEXT:PLAINTEXT", "internal:sasl_ssl"])
    )
    assert [(lst.name, lst.host, lst.port) for lst in listeners] == [("PLAINTEXT", "", 1), ("INTERNAL", "::1", 2)]
    assert listeners[1].security_protocol == "SASL_SSL" and listeners[1].uses_tls and listeners[1].uses_sasl


@pytest.mark.parametrize(
    "config,message",
    [
        ({"listeners": "PLAINTEXT://127.0.0.1"}, "is not of the form NAME://host:port"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"}, "Each listener must have a different name"),
        ({"listeners": "KERBEROS://127.0.0.1:0"}, "No security protocol is defined for listener KERBEROS"),
        (
            {"listeners": "A://127.0.0.1:0", "listener.security.protocol.map": "A:SASL_KERBEROS"},
            "is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL",
        ),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:0", "advertised.listeners": "SSL://example.com:9093"},
            "advertised.listeners names listener SSL",
        ),
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}, "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
        (
            sasl_config(**{"sasl.enabled.mechanisms": "GSSAPI,PLAIN"}),
            "no plugin provides SASL mechanism GSSAPI",
        ),
        (
            sasl_config(**{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": ""}),
            "sasl.enabled.mechanisms is empty",
        ),
        (
            sasl_config(**{"listener.name.sasl_plaintext.plain.sasl.jaas.config": "PlainLoginModule required"}),
            "is not terminated by ';'",
        ),
        ({"listeners": "SSL://127.0.0.1:0"}, "set ssl.keystore.location"),
    ],
)
def test_misconfigured_listeners_stop_the_broker_with_a_clear_error(brokkr_broker_factory, config, message):
    with pytest.raises(ConfigError, match=message):
        brokkr_broker_factory(config)


def test_each_listener_has_its_own_protocol_and_settings(brokkr_broker_factory):
    broker = brokkr_broker_factory(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0,sasl_plaintext://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS.replace("user_alice", "user_zoe"),
        }
    )
    assert [lst.security_protocol for lst in broker.listeners] == ["PLAINTEXT", "SASL_PLAINTEXT", "SASL_PLAINTEXT"]
    with RawClient(address(broker, "INTERNAL")) as c:
        assert handshake(c, "PLAIN").mechanisms == ["SCRAM-SHA-512", "PLAIN"]
    with RawClient(address(broker, "SASL_PLAINTEXT")) as c:
        assert handshake(c, "PLAIN").mechanisms == ["PLAIN"]
    with RawClient(address(broker, "INTERNAL")) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
    with RawClient(address(broker, "SASL_PLAINTEXT")) as c:  # that listener's users are its own
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    with RawClient(address(broker, "SASL_PLAINTEXT")) as c:
        assert login(c, "PLAIN", "zoe", "alice-secret").error_code == 0


def test_metadata_gives_each_client_the_listener_it_connected_on(brokkr_broker_factory):
    broker = brokkr_broker_factory(
        sasl_config(
            "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            **{"advertised.listeners": "SASL_PLAINTEXT://broker.example.com:0"},
        )
    )
    plain, sasl = broker.listeners
    with RawClient(address(broker, "PLAINTEXT")) as c:
        b = metadata_broker(c)
        assert (b.host, b.port) == ("127.0.0.1", plain.port)
    with RawClient(address(broker, "SASL_PLAINTEXT")) as c:
        login(c, "PLAIN", "alice", "alice-secret")
        b = metadata_broker(c)
        assert (b.host, b.port) == ("broker.example.com", sasl.port)  # port 0 advertises the bound port


# -- JAAS ----------------------------------------------------------------------------------------


def test_plain_users_come_from_kafkas_jaas_syntax():
    text = (
        "org.apache.kafka.common.security.plain.PlainLoginModule Required\n"
        '  username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="a \\"quoted\\" pass;word" user_bob=bare;'
    )
    assert plain_users(text) == {"admin": b"admin-secret", "alice": b'a "quoted" pass;word', "bob": b"bare"}
    assert parse_jaas_config(text).flag == "required"


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "contains 0 login modules"),
        ("A required; B required;", "contains 2 login modules"),
        ("A mandatory;", "control flag"),
        ('A required user_x="1"', "not terminated"),
        ("A required user_x=;", "has no value"),
        ('A required "x"="y";', "option name=value expected"),
    ],
)
def test_bad_jaas_configurations_are_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_jaas_config(text)


# -- TLS ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def ssl_config(tls, client_auth: str = "none", **more) -> dict[str, str]:
    config = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.location": str(tls.server_pem),
        "ssl.truststore.location": str(tls.ca_pem),
        "ssl.client.auth": client_auth,
    }
    config.update(more)
    return config


def test_ssl_principal_is_the_client_certificates_distinguished_name(brokkr_broker_factory, tls):
    principals = Principals()
    broker = brokkr_broker_factory(ssl_config(tls, "required"), plugins=[principals])
    with tls_client(broker.bootstrap_servers, tls.ca_pem, tls.client_cert, tls.client_key) as c:
        assert metadata_broker(c).port == broker.listeners[0].port
    assert principals.seen == [f"User:{tls.client_subject}"] == ["User:CN=alice,OU=eng,O=brokkr tests"]


def test_ssl_without_a_client_certificate(brokkr_broker_factory, tls):
    principals = Principals()
    broker = brokkr_broker_factory(ssl_config(tls, "requested"), plugins=[principals])
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:  # requested, not sent
        metadata_broker(c)
    assert principals.seen == ["User:ANONYMOUS"]
    required = brokkr_broker_factory(ssl_config(tls, "required"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with tls_client(required.bootstrap_servers, tls.ca_pem) as c:  # TLS 1.3 fails on first use
            metadata_broker(c)


def test_a_plaintext_client_on_a_tls_listener_is_dropped(brokkr_broker_factory, tls):
    broker = brokkr_broker_factory(ssl_config(tls))
    with RawClient(broker.bootstrap_servers) as c:
        c.send(METADATA, 12, metadata_body())
        assert c.is_closed_by_peer()
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:
        metadata_broker(c)


def test_inline_pem_settings(brokkr_broker_factory, tls):
    text = tls.server_pem.read_text()
    split = text.index("-----BEGIN CERTIFICATE-----")
    key, chain = text[:split], text[split:]
    broker = brokkr_broker_factory(
        {
            "listeners": "SSL://127.0.0.1:0",
            "listener.name.ssl.ssl.keystore.key": key,
            "listener.name.ssl.ssl.keystore.certificate.chain": chain,
            "ssl.truststore.certificates": tls.ca_pem.read_text(),
            "ssl.client.auth": "required",
        }
    )
    with tls_client(broker.bootstrap_servers, tls.ca_pem, tls.client_cert, tls.client_key) as c:
        metadata_broker(c)


def test_pkcs12_keystore_and_truststore(brokkr_broker_factory, tls, tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    text = tls.server_pem.read_bytes()
    key = serialization.load_pem_private_key(text, None)
    certs = x509.load_pem_x509_certificates(text)
    encryption = serialization.BestAvailableEncryption(b"store-pass")
    (tmp_path / "server.p12").write_bytes(
        pkcs12.serialize_key_and_certificates(b"s", key, certs[0], certs[1:], encryption)
    )
    ca = x509.load_pem_x509_certificate(tls.ca_pem.read_bytes())
    (tmp_path / "trust.p12").write_bytes(pkcs12.serialize_key_and_certificates(None, None, None, [ca], encryption))
    broker = brokkr_broker_factory(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(tmp_path / "server.p12"),
            "ssl.keystore.password": "store-pass",
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": str(tmp_path / "trust.p12"),
            "ssl.truststore.password": "store-pass",
            "ssl.client.auth": "required",
        }
    )
    with tls_client(broker.bootstrap_servers, tls.ca_pem, tls.client_cert, tls.client_key) as c:
        metadata_broker(c)


def test_an_encrypted_key_needs_ssl_key_password(brokkr_broker_factory, tls, tmp_path):
    from cryptography.hazmat.primitives import serialization

    text = tls.server_pem.read_bytes()
    key = serialization.load_pem_private_key(text, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"kp")
    )
    chain = text[text.index(b"-----BEGIN CERTIFICATE-----") :]
    (tmp_path / "enc.pem").write_bytes(encrypted + chain)
    config = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(tmp_path / "enc.pem")}
    with pytest.raises(ConfigError, match="the private key is encrypted; set ssl.key.password"):
        brokkr_broker_factory(config)  # and OpenSSL never prompts on the terminal
    with pytest.raises(ConfigError, match="cannot load the TLS keystore"):
        brokkr_broker_factory({**config, "ssl.key.password": "wrong"})
    broker = brokkr_broker_factory({**config, "ssl.key.password": "kp"})
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:
        metadata_broker(c)


@pytest.mark.parametrize(
    "more,message",
    [
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type=JKS is not supported"),
        ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS is not supported"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "cannot load the TLS keystore"),
        ({"ssl.truststore.location": "/nonexistent.pem"}, "cannot load the TLS truststore"),
        ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"}, "OpenSSL has no cipher"),
        ({"ssl.keystore.key": "x"}, "not both"),
        ({"ssl.client.auth": "always"}, "must be one of none, requested, required"),
        ({"ssl.enabled.protocols": "SSLv3"}, "must be one of TLSv1, TLSv1.1, TLSv1.2, TLSv1.3"),
    ],
)
def test_bad_tls_settings_are_config_errors(brokkr_broker_factory, tls, more, message):
    with pytest.raises(ConfigError, match=message):
        brokkr_broker_factory(ssl_config(tls, **more))


def test_tls_versions_and_cipher_suites(brokkr_broker_factory, tls):
    broker = brokkr_broker_factory(
        ssl_config(
            tls,
            **{
                "ssl.enabled.protocols": "TLSv1.2",
                "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256,TLS_AES_128_GCM_SHA256",
            },
        )
    )
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:
        metadata_broker(c)
        assert c.sock.version() == "TLSv1.2" and c.sock.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"


def test_sasl_ssl_listener(brokkr_broker_factory, tls):
    broker = brokkr_broker_factory(
        sasl_config("SASL_SSL://127.0.0.1:0", **{"ssl.keystore.location": str(tls.server_pem)})
    )
    with tls_client(broker.bootstrap_servers, tls.ca_pem) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        metadata_broker(c)


def test_distinguished_names_are_written_as_java_writes_them():
    cert = {
        "subject": (
            (("countryName", "NO"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "eng"), ("organizationalUnitName", "ops")),
            (("commonName", " #alice+bob "),),
            (("emailAddress", "a@example.com"),),
        )
    }
    assert distinguished_name(cert) == (
        "emailAddress=a@example.com,CN=\\ #alice\\+bob\\ ,OU=eng+OU=ops,O=Acme\\, Inc.,C=NO"
    )
