"""SASL on raw sockets, for tests: handshakes, PLAIN tokens and a SCRAM client (RFC 5802)."""

from __future__ import annotations

import hashlib
import secrets

from brokkr.core.client_config import ScramClient
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.frames import request_spec

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)
HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class Principals:
    """A plugin that records the principal of every authorized request and decides nothing."""

    def __init__(self):
        self.seen: list[str] = []

    @hookimpl
    def brokkr_authorize(self, context, actions):
        self.seen.append(str(context.principal))


def sasl_config(listeners: str = "SASL_PLAINTEXT://127.0.0.1:0", **settings: str) -> dict[str, str]:
    """A broker with PLAIN (admin, alice) and both SCRAM mechanisms on its SASL listeners."""
    config = {
        "listeners": listeners,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "connection.failed.authentication.delay.ms": "0",
    }
    for uri in listeners.split(","):
        name = uri.split("://")[0].lower()
        config[f"listener.name.{name}.plain.sasl.jaas.config"] = JAAS
    config.update(settings)
    return config


def handshake(c, mechanism: str, version: int = 1):
    return c.request(SASL_HANDSHAKE, version, request_spec(SASL_HANDSHAKE).cls(mechanism=mechanism))


def authenticate(c, token: bytes, version: int = 2):
    return c.request(SASL_AUTHENTICATE, version, request_spec(SASL_AUTHENTICATE).cls(auth_bytes=token))


def plain_token(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def login(c, mechanism: str, user: str, password: str, version: int = 2):
    """Handshake and authenticate; the last SaslAuthenticate response."""
    assert handshake(c, mechanism).error_code == 0
    if mechanism == "PLAIN":
        return authenticate(c, plain_token(user, password), version)
    client = ScramClient(mechanism, user, password)
    first = authenticate(c, client.first(), version)
    if first.error_code:
        return first
    final = authenticate(c, client.final(first.auth_bytes), version)
    if final.error_code == 0:
        assert bytes(final.auth_bytes) == client.expected_server_final
    return final


def upsertion(user: str, password: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096, salt=None):
    spec = request_spec(ALTER_SCRAM)
    salt = salt if salt is not None else secrets.token_bytes(16)
    return spec.struct("ScramCredentialUpsertion")(
        name=user,
        mechanism={"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}.get(mechanism, 0),
        iterations=iterations,
        salt=salt,
        salted_password=salted_password(mechanism, password, salt, iterations) if mechanism in HASHES else b"x",
    )


def deletion(user: str, mechanism: int = 1):
    return request_spec(ALTER_SCRAM).struct("ScramCredentialDeletion")(name=user, mechanism=mechanism)


def alter_scram(c, upsertions=(), deletions=()):
    return c.request(
        ALTER_SCRAM, 0, request_spec(ALTER_SCRAM).cls(upsertions=list(upsertions), deletions=list(deletions))
    )


def describe_scram(c, users: list[str] | None = None):
    spec = request_spec(DESCRIBE_SCRAM)
    names = None if users is None else [spec.struct("UserName")(name=u) for u in users]
    return c.request(DESCRIBE_SCRAM, 0, spec.cls(users=names))
