"""Client settings for brokkr's tools, and the security they ask for: a Kafka client
properties file (``--command-config``; the console tools' ``--producer.config`` and
``--consumer.config``) read once into a :class:`ClientConfig` that every connection of a
tool shares. :class:`~brokkr.core.client.RawClient` takes it: TLS on ``SSL`` and
``SASL_SSL``, then SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512: the client side of
SaslHandshake and SaslAuthenticate) before its first request.

The settings, with Kafka's Java client names (librdkafka's, also read, in brackets)::

    security.protocol        PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL
    sasl.mechanism           PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default,
                             GSSAPI, is not available)
    sasl.jaas.config         PlainLoginModule or ScramLoginModule, e.g.
                             org.apache.kafka.common.security.plain.PlainLoginModule
                             required username="alice" password="alice-secret";
                             (sasl.username, sasl.password)
    ssl.truststore.location, .type (PEM, PKCS12), .password, .certificates  (ssl.ca.location)
    ssl.keystore.location, .type, .password, ssl.key.password,
    ssl.keystore.certificate.chain, ssl.keystore.key: a client certificate
                             (ssl.certificate.location with ssl.key.location)
    ssl.endpoint.identification.algorithm   https (default: the broker's host name is
                             checked) or empty (librdkafka: none)
    ssl.enabled.protocols, ssl.cipher.suites (OpenSSL's names)
    enable.ssl.certificate.verification     (librdkafka) false: no certificate check

Without a truststore the system's CAs are trusted, as Java's default truststore is. The
other settings of a file (``acks``, ``group.id``, ...) are the tools' own to read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .config import read_properties
from .errors import ConfigError, ErrorCode
from .jaas import parse_jaas_config
from .protocol.frames import request_spec
from .scram import ScramMechanism
from .tls import client_context

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's settings of a client certificate's PEM text, and librdkafka's of the files holding it.
_LIBRDKAFKA_FILES = {
    "ssl.keystore.certificate.chain": "ssl.certificate.location",
    "ssl.keystore.key": "ssl.key.location",
}


class AuthenticationFailed(ConnectionError):
    """The broker refused the SASL exchange (or its answer did not prove the server)."""

    exit_status = 1


@attrs.frozen
class SaslCredentials:
    mechanism: str
    username: str
    password: str = attrs.field(repr=False)


class ClientConfig:
    """A client's settings (``settings``: name to string), checked and read once: the
    security protocol, the TLS context (``tls``, None without TLS) and the SASL
    credentials (``sasl``, None without SASL). ConfigError names what is wrong."""

    def __init__(self, settings: Mapping[str, str] | None = None, where: str = "the client settings"):
        self.settings = dict(settings or {})
        self.where = where
        self.security_protocol = self.get("security.protocol", "PLAINTEXT").strip().upper()
        if self.security_protocol not in PROTOCOLS:
            raise ConfigError(
                f"{where}: security.protocol={self.get('security.protocol')} is not one of {', '.join(PROTOCOLS)}"
            )
        self.tls = self._tls_context() if self.security_protocol in ("SSL", "SASL_SSL") else None
        self.sasl = self._credentials() if self.security_protocol.startswith("SASL_") else None

    @classmethod
    def load(cls, path: str | None, overrides: Mapping[str, str] | None = None) -> ClientConfig:
        """The settings of a properties file (none without ``path``), then ``overrides``."""
        settings = read_properties(path) if path else {}
        settings.update(overrides or {})
        return cls(settings, path or "the client settings")

    def get(self, name: str, default: Any = None) -> Any:
        return self.settings.get(name, default)

    def get_int(self, name: str, default: int) -> int:
        value = self.settings.get(name)
        if value is None:
            return default
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(f"{self.where}: {name}={value} is not a number") from None

    def get_bool(self, name: str, default: bool) -> bool:
        value = self.settings.get(name)
        if value is None:
            return default
        if value.strip().lower() not in ("true", "false"):
            raise ConfigError(f"{self.where}: {name}={value}: expected true or false")
        return value.strip().lower() == "true"

    def _tls_context(self) -> ssl.SSLContext:
        def setting(name: str) -> str | None:
            if name in self.settings:
                return self.settings[name]
            if name == "ssl.truststore.location":
                return self.get("ssl.ca.location")
            alias = _LIBRDKAFKA_FILES.get(name)  # librdkafka names files where Kafka takes PEM text
            if alias is not None and self.get(alias) is not None:
                try:
                    with open(self.get(alias), encoding="ascii") as f:
                        return f.read()
                except (OSError, ValueError) as exc:
                    raise ConfigError(f"{self.where}: {alias}: {exc}") from None
            return None

        if (self.get("ssl.endpoint.identification.algorithm") or "").strip().lower() == "none":  # librdkafka's off
            self.settings["ssl.endpoint.identification.algorithm"] = ""
        ctx = client_context(setting, self.where)
        if not self.get_bool("enable.ssl.certificate.verification", True):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _credentials(self) -> SaslCredentials:
        mechanism = self.get("sasl.mechanism", "GSSAPI").strip().upper()
        if mechanism not in MECHANISMS:
            raise ConfigError(
                f"{self.where}: sasl.mechanism={mechanism} is not available: brokkr's tools speak "
                f"{', '.join(MECHANISMS)} (Kafka's default is GSSAPI: set sasl.mechanism)"
            )
        jaas = self.get("sasl.jaas.config")
        if jaas:
            options = parse_jaas_config(jaas).options
            username, password = options.get("username"), options.get("password")
        else:
            username, password = self.get("sasl.username"), self.get("sasl.password")
        if username is None or password is None:
            raise ConfigError(
                f"{self.where}: SASL needs a user name and password: sasl.jaas.config="
                f"{'...plain.PlainLoginModule' if mechanism == 'PLAIN' else '...scram.ScramLoginModule'} "
                'required username="..." password="...";'
            )
        return SaslCredentials(mechanism, username, password)


def login(client: Any, credentials: SaslCredentials) -> int:
    """Authenticate ``client`` (a RawClient that sent nothing yet, or one re-authenticating
    between requests): SaslHandshake v1, then SaslAuthenticate v2 tokens. Returns the
    session lifetime the broker gave (ms; 0 for none); raises AuthenticationFailed."""
    spec = request_spec(SASL_HANDSHAKE)
    handshake = client.request(SASL_HANDSHAKE, 1, spec.cls(mechanism=credentials.mechanism))
    if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
        raise AuthenticationFailed(
            f"{client.address}: Client SASL mechanism '{credentials.mechanism}' not enabled in the server, "
            f"enabled mechanisms are [{', '.join(handshake.mechanisms)}]"
        )
    _check(client, handshake.error_code, None)
    if credentials.mechanism == "PLAIN":
        token = f"\0{credentials.username}\0{credentials.password}".encode()
        return _authenticate(client, token).session_lifetime_ms
    scram = ScramClient(credentials.mechanism, credentials.username, credentials.password)
    server_first = _authenticate(client, scram.first()).auth_bytes
    try:
        final = scram.final(server_first)
    except ValueError as exc:
        raise AuthenticationFailed(f"{client.address}: {exc}") from None
    answer = _authenticate(client, final)
    if bytes(answer.auth_bytes) != scram.expected_server_final:
        raise AuthenticationFailed(f"{client.address}: Invalid server signature in server final message")
    return answer.session_lifetime_ms


def _authenticate(client: Any, token: bytes) -> Any:
    spec = request_spec(SASL_AUTHENTICATE)
    answer = client.request(SASL_AUTHENTICATE, 2, spec.cls(auth_bytes=token))
    _check(client, answer.error_code, answer.error_message)
    return answer


def _check(client: Any, code: int, message: str | None) -> None:
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise AuthenticationFailed(f"{client.address}: {message or name}")


class ScramClient:
    """The client side of SCRAM (RFC 5802, without channel binding), as Kafka's
    ScramSaslClient: ``first()``, then ``final(server_first)``; the server's last message
    must then equal ``expected_server_final``. Its own arithmetic (hashlib and hmac), so
    that tests of the broker's SCRAM do not check it against itself."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        known = ScramMechanism.from_name(mechanism)
        if known is None:
            raise ValueError(f"not a SCRAM mechanism: {mechanism}")
        self.hash = known.hash_name
        self.user, self.password = user, password
        self.nonce = nonce or secrets.token_hex(12)
        self.bare = f"n={user.replace('=', '=3D').replace(',', '=2C')},r={self.nonce}"
        self.expected_server_final = b""

    def first(self) -> bytes:
        return f"n,,{self.bare}".encode()

    def final(self, server_first: bytes | memoryview) -> bytes:
        """The client-final message; ValueError when the server-first message is not one."""
        text = bytes(server_first).decode("utf-8", "replace")
        attrs_ = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if not {"r", "s", "i"} <= attrs_.keys() or not attrs_["i"].isdigit():
            raise ValueError(f"Invalid SCRAM server first message: {text[:200]!r}")
        if not attrs_["r"].startswith(self.nonce):
            raise ValueError("Invalid server nonce: does not start with client nonce")
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), base64.b64decode(attrs_["s"]), int(attrs_["i"]))
        without_proof = f"c=biws,r={attrs_['r']}"
        auth_message = f"{self.bare},{text},{without_proof}".encode()
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        signature = hmac.digest(hashlib.new(self.hash, client_key).digest(), auth_message, self.hash)
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self.expected_server_final = b"v=" + base64.b64encode(hmac.digest(server_key, auth_message, self.hash))
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def add_argument(parser: Any, *aliases: str) -> None:
    """``--command-config FILE`` (and ``aliases``, such as ``--producer.config``) on a tool's parser."""
    parser.add_argument(
        "--command-config",
        *aliases,
        dest="command_config",
        metavar="FILE",
        help="a client properties file: security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*",
    )


def of_args(args: Any, overrides: Mapping[str, str] | None = None) -> ClientConfig:
    """The ClientConfig of a tool's ``--command-config`` (then ``overrides``)."""
    return ClientConfig.load(getattr(args, "command_config", None), overrides)


def key_values(pairs: Iterable[str] | None) -> dict[str, str]:
    """Kafka's ``--property k=v`` pairs (also ``--producer-property``, ``--consumer-property``):
    split at the first ``=``, the value kept as given (a key alone: an empty value)."""
    out = {}
    for pair in pairs or ():
        key, _, value = pair.partition("=")
        out[key] = value
    return out
