"""SASL/PLAIN (RFC 4616), Kafka's ``PlainSaslServer``: users and passwords from the
listener's JAAS options, as Kafka's ``PlainLoginModule`` takes them::

    listener.name.sasl_ssl.plain.sasl.jaas.config=\
        org.apache.kafka.common.security.plain.PlainLoginModule required \
        user_admin="admin-secret" user_alice="alice-secret";

Each ``user_<name>="<password>"`` option is a user (``username``/``password`` are the
broker's own client credentials in Kafka, unused here). The passwords sit in the
configuration in clear, as in Kafka: use SCRAM to keep only salted credentials.
PLAIN sends passwords in clear too, so it belongs on SASL_SSL listeners.
"""

from __future__ import annotations

import hmac

from brokkr.core.config import listener_value
from brokkr.core.context import ConnectionInfo
from brokkr.core.errors import ConfigError
from brokkr.core.jaas import parse_jaas_config
from brokkr.core.listeners import configured_listeners
from brokkr.core.plugins import hookimpl
from brokkr.core.sasl import SaslAuthenticationException, SaslException, enabled_mechanisms

NAME = "PLAIN"
_USER_PREFIX = "user_"


def plain_users(jaas_config: str) -> dict[str, bytes]:
    """The ``user_<name>`` options of a PlainLoginModule configuration: name -> UTF-8 password."""
    module = parse_jaas_config(jaas_config)
    return {
        key[len(_USER_PREFIX) :]: value.encode()
        for key, value in module.options.items()
        if key.startswith(_USER_PREFIX) and len(key) > len(_USER_PREFIX)
    }


class PlainMechanism:
    """Satisfies :class:`brokkr.core.sasl.SaslMechanism`; users per listener."""

    name = NAME

    def __init__(self, users: dict[str, dict[str, bytes]]):
        self.users = users

    @classmethod
    def from_config(cls, config) -> PlainMechanism:
        """Users of every SASL listener that enables PLAIN; ConfigError if one has no JAAS configuration."""
        users = {}
        for listener in configured_listeners(config):
            if not listener.uses_sasl or NAME not in enabled_mechanisms(config, listener.name):
                continue
            jaas = listener_value(config, listener.name, "sasl.jaas.config", NAME)
            if not jaas:
                raise ConfigError(
                    f"listener {listener.name} enables SASL/PLAIN but listener.name.{listener.name.lower()}"
                    '.plain.sasl.jaas.config is not set (PlainLoginModule with user_<name>="<password>" options)'
                )
            users[listener.name] = plain_users(jaas)
        return cls(users)

    def server(self, connection: ConnectionInfo) -> PlainSaslServer:
        return PlainSaslServer(self.users.get(connection.listener, {}))


class PlainSaslServer:
    """One connection's PLAIN exchange: a single token, ``authzid NUL authcid NUL passwd``."""

    def __init__(self, users: dict[str, bytes]):
        self.users = users
        self.complete = False
        self.authorization_id = ""

    def step(self, response: bytes) -> bytes:
        if self.complete:
            raise SaslException("Unexpected SASL/PLAIN message after the exchange ended")
        try:
            tokens = response.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslException("Invalid SASL/PLAIN response: not UTF-8") from None
        if len(tokens) != 3:
            raise SaslException(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authorization_id, username, password = tokens
        if not username:
            raise SaslException("Authentication failed: username not specified")
        if not password:
            raise SaslException("Authentication failed: password not specified")
        expected = self.users.get(username)
        # Compare even for an unknown user, so that timing does not tell which users exist.
        matches = hmac.compare_digest(expected or b"\0" * len(password.encode()), password.encode())
        if expected is None or not matches:
            raise SaslAuthenticationException("Authentication failed: Invalid username or password")
        if authorization_id and authorization_id != username:
            raise SaslAuthenticationException(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.authorization_id = username
        self.complete = True
        return b""


@hookimpl(trylast=True)
def brokkr_sasl_mechanisms(broker) -> list[PlainMechanism]:
    return [PlainMechanism.from_config(broker.config)]
