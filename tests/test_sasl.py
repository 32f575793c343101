"""SASL on raw sockets against a real broker: the handshake, PLAIN and SCRAM exchanges, what
is refused before authentication, bounded frames, failures, and re-authentication (KIP-368)."""

from __future__ import annotations

import socket
import time

import pytest
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import encode_request, request_spec
from brokkr.core.testing import RawClient
from sasl_wire import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    Principals,
    ScramClient,
    alter_scram,
    authenticate,
    handshake,
    login,
    plain_token,
    sasl_config,
    upsertion,
)
from wire import API_VERSIONS, METADATA, metadata_body

API_VERSIONS_REQ = request_spec(API_VERSIONS).cls
ENABLED = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"


@pytest.fixture
def principals():
    return Principals()


@pytest.fixture
def broker(brokkr_broker_factory, principals):
    return brokkr_broker_factory(sasl_config(), plugins=[principals])


def add_scram_user(broker, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> None:
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "admin", "admin-secret").error_code == 0
        assert alter_scram(c, [upsertion(user, password, mechanism)]).results[0].error_code == 0


def metadata_ok(c) -> bool:
    return c.request(METADATA, 12, metadata_body("probe", auto_create=False)).cluster_id is not None


def assert_still_serving(broker) -> None:
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        assert metadata_ok(c)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_login_gives_the_principal_to_every_request(broker, principals, version):
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(API_VERSIONS, 3, API_VERSIONS_REQ(client_software_name="t", client_software_version="1"))
        response = handshake(c, "PLAIN")
        assert (response.error_code, response.mechanisms) == (0, ENABLED)
        response = authenticate(c, plain_token("alice", "alice-secret"), version)
        assert (response.error_code, response.error_message, bytes(response.auth_bytes)) == (0, None, b"")
        c.request(METADATA, 12, metadata_body("some-topic"))
    assert principals.seen == ["User:alice"] * len(principals.seen) and principals.seen


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_verifies_the_server_signature(broker, principals, mechanism):
    add_scram_user(broker, "bob,=x", "bob-secret", mechanism)  # a name that needs escaping
    principals.seen.clear()
    with RawClient(broker.bootstrap_servers) as c:
        response = login(c, mechanism, "bob,=x", "bob-secret")  # checks the server-final message
        assert (response.error_code, response.session_lifetime_ms) == (0, 0)
        assert metadata_ok(c)
    assert set(principals.seen) == {"User:bob,=x"}


@pytest.mark.parametrize(
    "mechanism,user,password,message",
    [
        ("PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password"),
        ("PLAIN", "nobody", "alice-secret", "Authentication failed: Invalid username or password"),
        ("SCRAM-SHA-256", "carol", "wrong", GENERIC.format("SCRAM-SHA-256")),
        ("SCRAM-SHA-256", "nobody", "x", GENERIC.format("SCRAM-SHA-256")),
        ("SCRAM-SHA-512", "carol", "carol-secret", GENERIC.format("SCRAM-SHA-512")),  # no SHA-512 credential
    ],
)
def test_failed_authentication_answers_then_closes(broker, mechanism, user, password, message):
    add_scram_user(broker, "carol", "carol-secret")
    with RawClient(broker.bootstrap_servers) as c:
        response = login(c, mechanism, user, password)
        assert (response.error_code, response.error_message) == (ErrorCode.SASL_AUTHENTICATION_FAILED, message)
        assert c.is_closed_by_peer()
    assert_still_serving(broker)


def test_plain_refuses_another_authorization_id(broker):
    with RawClient(broker.bootstrap_servers) as c:
        handshake(c, "PLAIN")
        response = authenticate(c, plain_token("alice", "alice-secret", authzid="admin"))
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == (
            "Authentication failed: Client requested an authorization id that is different from username"
        )
        assert c.is_closed_by_peer()


def test_a_mechanism_not_enabled_is_answered_with_the_enabled_list(brokkr_broker_factory):
    broker = brokkr_broker_factory(sasl_config(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN"}))
    with RawClient(broker.bootstrap_servers) as c:
        response = handshake(c, "SCRAM-SHA-256")
        assert (response.error_code, response.mechanisms) == (
            ErrorCode.UNSUPPORTED_SASL_MECHANISM,
            ["SCRAM-SHA-512", "PLAIN"],
        )
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:
        assert handshake(c, "GSSAPI").error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert c.is_closed_by_peer()


@pytest.mark.parametrize(
    "mechanism,token",
    [
        ("PLAIN", b"no separators"),
        ("PLAIN", b"\0\0"),
        ("PLAIN", b"\0alice\0alice-secret\0extra"),
        ("PLAIN", b"\xff\xfe\0alice\0alice-secret"),
        ("SCRAM-SHA-256", b"garbage"),
        ("SCRAM-SHA-256", b"p=tls-unique,,n=carol,r=abc"),
        ("SCRAM-SHA-256", b"n,,m=ext,n=carol,r=abc"),
        ("SCRAM-SHA-256", b"n,,n=carol,r=a,b"),
        ("SCRAM-SHA-256", b"n,,n=ca=rol,r=abc"),
        ("SCRAM-SHA-256", b"n,,n=carol,r=abc,tokenauth=true"),
        ("SCRAM-SHA-512", bytes(range(256)) * 4),
    ],
)
def test_garbage_tokens_fail_authentication_cleanly(broker, mechanism, token):
    add_scram_user(broker, "carol", "carol-secret")
    with RawClient(broker.bootstrap_servers) as c:
        assert handshake(c, mechanism).error_code == 0
        response = authenticate(c, token)
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == GENERIC.format(mechanism)
        assert c.is_closed_by_peer()
    assert_still_serving(broker)


@pytest.mark.parametrize(
    "final",
    [
        b"garbage",
        b"c=biws,r=WRONG,p=AAAA",
        b"c=eSws,r={nonce},p={proof}",  # channel binding says y, the first message said n
        b"c=biws,r={nonce},p=not base64!",
        b"c=biws,r={nonce},p=AAAA",  # a proof of the wrong length
    ],
)
def test_bad_scram_final_messages_fail(broker, final):
    add_scram_user(broker, "carol", "carol-secret")
    with RawClient(broker.bootstrap_servers) as c:
        client = ScramClient("SCRAM-SHA-256", "carol", "carol-secret")
        handshake(c, "SCRAM-SHA-256")
        server_first = authenticate(c, client.first()).auth_bytes
        good = client.final(server_first).decode()
        nonce = good.split(",")[1][2:]
        proof = good.split(",p=")[1]
        response = authenticate(c, final.replace(b"{nonce}", nonce.encode()).replace(b"{proof}", proof.encode()))
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert c.is_closed_by_peer()


def test_requests_before_the_handshake_close_the_connection_unanswered(broker):
    with RawClient(broker.bootstrap_servers) as c:
        c.send(METADATA, 12, metadata_body())
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:  # after ApiVersions too
        assert c.request(API_VERSIONS, 0, API_VERSIONS_REQ()).error_code == 0
        c.send(METADATA, 12, metadata_body())
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:  # ApiVersions is allowed once, before the handshake
        c.request(API_VERSIONS, 0, API_VERSIONS_REQ())
        c.send(API_VERSIONS, 0, API_VERSIONS_REQ())
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:  # an ApiVersions body that does not parse
        frame = encode_request(API_VERSIONS, 3, 1, "x", API_VERSIONS_REQ(client_software_name="t"))
        c.sock.sendall((len(frame) - 4 + 50).to_bytes(4, "big") + frame[4:-3] + b"\x7f" * 53)
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:  # not a Kafka client at all
        c.sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.is_closed_by_peer()
    assert_still_serving(broker)


def test_an_unsupported_api_versions_version_may_be_retried(broker):
    with RawClient(broker.bootstrap_servers) as c:
        frame = bytearray(encode_request(API_VERSIONS, 3, 1, "x", API_VERSIONS_REQ()))
        frame[6:8] = (99).to_bytes(2, "big")
        c.sock.sendall(frame)
        assert c.receive(API_VERSIONS, 0)[1].error_code == ErrorCode.UNSUPPORTED_VERSION
        assert c.request(API_VERSIONS, 3, API_VERSIONS_REQ(client_software_name="t", client_software_version="1"))
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0


def test_other_requests_during_the_exchange_answer_illegal_sasl_state(broker):
    with RawClient(broker.bootstrap_servers) as c:
        handshake(c, "SCRAM-SHA-256")
        response = c.request(METADATA, 12, metadata_body("t"))  # Metadata's own error response
        assert [t.error_code for t in response.topics] == [ErrorCode.ILLEGAL_SASL_STATE]
        assert c.is_closed_by_peer()


def test_sasl_requests_after_authentication_answer_illegal_sasl_state_and_keep_the_connection(broker):
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        response = authenticate(c, plain_token("alice", "alice-secret"))
        assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert response.error_message == "SaslAuthenticate request received after successful authentication"
        # Without connections.max.reauth.ms there is no re-authentication: a handshake is refused.
        assert handshake(c, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert metadata_ok(c)


def test_sasl_requests_on_a_plaintext_listener_answer_illegal_sasl_state(brokkr_broker):
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert handshake(c, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert authenticate(c, plain_token("a", "b"), 0).error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert metadata_ok(c)


def test_frames_before_authentication_are_bounded_by_sasl_server_max_receive_size(brokkr_broker_factory):
    broker = brokkr_broker_factory(sasl_config(**{"sasl.server.max.receive.size": "1024"}))
    with RawClient(broker.bootstrap_servers) as c:
        handshake(c, "PLAIN")
        c.sock.sendall((1025).to_bytes(4, "big"))  # no body follows: the broker must not wait for it
        assert c.is_closed_by_peer()
    with RawClient(broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        topics = [f"topic-{i:04d}-{'x' * 40}" for i in range(40)]  # a frame over 1024 bytes, after authentication
        response = c.request(METADATA, 12, metadata_body(*topics, auto_create=False))
        assert len(response.topics) == 40


def test_handshake_v0_exchanges_raw_tokens(broker, principals):
    add_scram_user(broker, "carol", "carol-secret")
    principals.seen.clear()
    with RawClient(broker.bootstrap_servers) as c:
        assert handshake(c, "PLAIN", version=0).error_code == 0
        token = plain_token("alice", "alice-secret")
        c.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert c.receive_frame() == b""
        assert metadata_ok(c)
    with RawClient(broker.bootstrap_servers) as c:
        assert handshake(c, "SCRAM-SHA-256", version=0).error_code == 0
        client = ScramClient("SCRAM-SHA-256", "carol", "carol-secret")
        c.sock.sendall(len(client.first()).to_bytes(4, "big") + client.first())
        final = client.final(c.receive_frame())
        c.sock.sendall(len(final).to_bytes(4, "big") + final)
        assert c.receive_frame() == client.expected_server_final
        assert metadata_ok(c)
    assert set(principals.seen) == {"User:alice", "User:carol"}
    with RawClient(broker.bootstrap_servers) as c:  # raw tokens have no room for an error: the broker closes
        handshake(c, "PLAIN", version=0)
        token = plain_token("alice", "wrong")
        c.sock.sendall(len(token).to_bytes(4, "big") + token)
        assert c.is_closed_by_peer()


def test_failed_authentication_is_answered_after_the_delay(brokkr_broker_factory):
    broker = brokkr_broker_factory(sasl_config(**{"connection.failed.authentication.delay.ms": "400"}))
    with RawClient(broker.bootstrap_servers) as c:
        handshake(c, "PLAIN")
        start = time.monotonic()
        assert authenticate(c, plain_token("alice", "wrong")).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert time.monotonic() - start >= 0.35
    with RawClient(broker.bootstrap_servers) as c:
        start = time.monotonic()
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0
        assert time.monotonic() - start < 0.35


# -- re-authentication (KIP-368) ------------------------------------------------------------


@pytest.fixture
def reauth_broker(brokkr_broker_factory, principals):
    return brokkr_broker_factory(sasl_config(**{"connections.max.reauth.ms": "1500"}), plugins=[principals])


def test_session_lifetime_is_sent_from_v1_and_an_expired_session_is_closed(reauth_broker):
    with RawClient(reauth_broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "alice", "alice-secret", version=0).error_code == 0  # v0 has no lifetime field
        with RawClient(reauth_broker.bootstrap_servers) as c1:
            response = login(c1, "PLAIN", "alice", "alice-secret", version=1)
            assert response.session_lifetime_ms == 1500
            assert metadata_ok(c1)
            time.sleep(1.7)
            c1.send(METADATA, 12, metadata_body())
            assert c1.is_closed_by_peer()
        c.send(METADATA, 12, metadata_body())  # a v0 client cannot re-authenticate: closed as well
        assert c.is_closed_by_peer()


def test_re_authentication_extends_the_session(reauth_broker, principals):
    with RawClient(reauth_broker.bootstrap_servers) as c:
        assert login(c, "PLAIN", "alice", "alice-secret").session_lifetime_ms == 1500
        time.sleep(1.0)
        response = login(c, "PLAIN", "alice", "alice-secret")
        assert (response.error_code, response.session_lifetime_ms) == (0, 1500)
        time.sleep(1.0)  # past the first session's end, within the second's
        assert metadata_ok(c)
    assert set(principals.seen) == {"User:alice"}


def test_re_authentication_with_scram(reauth_broker):
    add_scram_user(reauth_broker, "carol", "carol-secret", "SCRAM-SHA-512")
    with RawClient(reauth_broker.bootstrap_servers) as c:
        assert login(c, "SCRAM-SHA-512", "carol", "carol-secret").error_code == 0
        assert login(c, "SCRAM-SHA-512", "carol", "carol-secret").error_code == 0
        assert metadata_ok(c)


def test_re_authentication_at_most_once_a_second(reauth_broker):
    with RawClient(reauth_broker.bootstrap_servers) as c:
        login(c, "PLAIN", "alice", "alice-secret")
        assert login(c, "PLAIN", "alice", "alice-secret").error_code == 0  # the first one is immediate
        assert handshake(c, "PLAIN").error_code == ErrorCode.ILLEGAL_SASL_STATE  # too soon: not a re-authentication
        assert metadata_ok(c)


def test_re_authentication_must_keep_the_principal(reauth_broker):
    with RawClient(reauth_broker.bootstrap_servers) as c:
        login(c, "PLAIN", "alice", "alice-secret")
        response = login(c, "PLAIN", "admin", "admin-secret")
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == "Cannot change principals during re-authentication from User.alice: User.admin"
        assert c.is_closed_by_peer()


def test_re_authentication_must_keep_the_mechanism(reauth_broker):
    add_scram_user(reauth_broker, "alice", "alice-secret")
    with RawClient(reauth_broker.bootstrap_servers) as c:
        login(c, "PLAIN", "alice", "alice-secret")
        assert handshake(c, "SCRAM-SHA-256").error_code == 0
        response = authenticate(c, ScramClient("SCRAM-SHA-256", "alice", "alice-secret").first())
        assert response.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert response.error_message == (
            "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for re-authentication of "
            "mechanism 'PLAIN'"
        )
        assert c.is_closed_by_peer()


def test_a_client_that_vanishes_mid_exchange_costs_nothing(broker):
    for _ in range(5):
        host, port = broker.bootstrap_servers.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        frame = encode_request(SASL_HANDSHAKE, 1, 1, "x", request_spec(SASL_HANDSHAKE).cls(mechanism="PLAIN"))
        s.sendall(frame + (100).to_bytes(4, "big") + b"partial")
        s.close()
    assert_still_serving(broker)


def test_sasl_authenticate_versions_beyond_the_served_ones_close(broker):
    with RawClient(broker.bootstrap_servers) as c:
        handshake(c, "PLAIN")
        frame = bytearray(encode_request(SASL_AUTHENTICATE, 2, 1, "x", request_spec(SASL_AUTHENTICATE).cls()))
        frame[6:8] = (3).to_bytes(2, "big")
        c.sock.sendall(frame)
        assert c.is_closed_by_peer()
