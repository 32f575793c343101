"""The SASL mechanism contract: what a ``brokkr_sasl_mechanisms`` plugin provides.

A :class:`SaslMechanism` is one mechanism (``PLAIN``, ``SCRAM-SHA-256``, ...) for the
whole broker; for each connection that picks it in SaslHandshake it makes one
:class:`SaslServer`, which evaluates the client's tokens one SaslAuthenticate at a time
(Java's ``javax.security.sasl.SaslServer``, as Kafka's mechanisms implement it). The
built-in mechanisms are plugins: ``brokkr.plugins.auth.sasl_plain`` and
``brokkr.plugins.auth.scram``.

A failed exchange raises :class:`SaslAuthenticationException`, whose message is sent to
the client, or :class:`SaslException`, whose message is only logged: the client then
reads Kafka's generic "Authentication failed during authentication due to invalid
credentials with SASL mechanism <name>". Either way the broker answers
SASL_AUTHENTICATION_FAILED and closes the connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .config import listener_value

if TYPE_CHECKING:
    from .context import ConnectionInfo


class SaslException(Exception):
    """The exchange failed; the message is logged, the client gets Kafka's generic one."""


class SaslAuthenticationException(SaslException):
    """The exchange failed with a message for the client (Kafka's SaslAuthenticationException).
    It must reveal nothing an unauthenticated client should not learn."""


@runtime_checkable
class SaslServer(Protocol):
    """The server side of one connection's exchange."""

    @property
    def complete(self) -> bool:
        """Whether the exchange has succeeded (after the last :meth:`step`)."""

    @property
    def authorization_id(self) -> str:
        """The authenticated user, once complete: the principal is ``User:<authorization_id>``."""

    def step(self, response: bytes) -> bytes:
        """Evaluate the client's next token and return the challenge to send back
        (``b""`` for none). ``response`` is untrusted and at most
        ``sasl.server.max.receive.size`` bytes. Raise :class:`SaslException` or
        :class:`SaslAuthenticationException` to fail the authentication."""


@runtime_checkable
class SaslMechanism(Protocol):
    """One SASL mechanism, offered where ``sasl.enabled.mechanisms`` names it."""

    #: The mechanism's IANA name, as clients ask for it in SaslHandshake.
    name: str

    def server(self, connection: ConnectionInfo) -> SaslServer:
        """A new exchange for ``connection`` (its ``listener`` selects per-listener settings)."""


def collect_mechanisms(hook: Any, broker: Any) -> dict[str, SaslMechanism]:
    """One mechanism per name from ``brokkr_sasl_mechanisms``: the plugin registered last
    wins, so a third-party plugin can replace a built-in mechanism."""
    mechanisms: dict[str, SaslMechanism] = {}
    for result in hook.brokkr_sasl_mechanisms(broker=broker):
        for mechanism in result or ():
            mechanisms.setdefault(mechanism.name, mechanism)
    return mechanisms


def enabled_mechanisms(config: Mapping[str, Any], listener: str) -> list[str]:
    """``sasl.enabled.mechanisms`` of one listener, upper-cased, without repeats."""
    names = listener_value(config, listener, "sasl.enabled.mechanisms") or []
    return list(dict.fromkeys(name.upper() for name in names))
