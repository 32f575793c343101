"""Authentication of one SASL connection: Kafka's ``SaslServerAuthenticator``, with
``KafkaChannel``'s rules for re-authentication (KIP-368).

Before authentication, frames are bounded by ``sasl.server.max.receive.size`` and only
these requests are served, in this order::

    ApiVersions            optional, once, before the handshake
    SaslHandshake v0-1     the mechanism; one not enabled is answered
                           UNSUPPORTED_SASL_MECHANISM with the enabled list, then closed
    SaslAuthenticate v0-2  the mechanism's tokens, until it completes (after a v0 handshake
                           the tokens come raw, size-prefixed, without Kafka headers)

Any other request before the handshake closes the connection without an answer; during
the exchange it is answered ILLEGAL_SASL_STATE and the connection closed. A failed
exchange is answered SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms``, then closed.

With ``connections.max.reauth.ms`` set, SaslAuthenticate (v1+) tells the client its
session lifetime. A SaslHandshake on the authenticated connection starts a
re-authentication (same mechanism, same principal; at most one a second); any other
request after the session expired closes the connection.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs

from .apis.sasl_authenticate import KEY as SASL_AUTHENTICATE
from .apis.sasl_authenticate import authenticate_response
from .apis.sasl_handshake import KEY as SASL_HANDSHAKE
from .apis.sasl_handshake import handshake_response
from .config import listener_value
from .context import ANONYMOUS, ConnectionInfo, Principal
from .dispatch import handle_frame
from .errors import CloseConnection, ConfigError, CorruptRequest, ErrorCode
from .protocol.frames import API_VERSIONS_KEY, encode_response, parse_request_header_untrusted, request_spec
from .sasl import SaslAuthenticationException, SaslException, SaslMechanism, SaslServer, enabled_mechanisms

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("brokkr.authenticator")

#: KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS: at most one re-authentication a second.
MIN_REAUTH_INTERVAL_S = 1.0
_HANDSHAKE_KEY = SASL_HANDSHAKE.to_bytes(2, "big")


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS_REQUEST = 1
    HANDSHAKE_REQUEST = 2
    AUTHENTICATE = 3  # SaslAuthenticate requests (after a v1 handshake)
    AUTHENTICATE_RAW = 4  # raw tokens (after a v0 handshake)
    REAUTH_BAD_MECHANISM = 5
    COMPLETE = 6


@attrs.frozen
class SaslListener:
    """One SASL listener's settings, resolved when the broker starts."""

    name: str
    enabled: tuple[str, ...]
    mechanisms: Mapping[str, SaslMechanism]
    max_receive_size: int
    reauth_ms: Mapping[str, int]
    failed_authentication_delay_s: float

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], listener: str, available: Mapping[str, SaslMechanism]
    ) -> SaslListener:
        enabled = enabled_mechanisms(config, listener)
        if not enabled:
            raise ConfigError(f"listener {listener}: sasl.enabled.mechanisms is empty")
        missing = [name for name in enabled if name not in available]
        if missing:
            raise ConfigError(
                f"listener {listener}: no plugin provides SASL mechanism {', '.join(missing)} "
                f"(available: {', '.join(sorted(available)) or 'none'})"
            )
        return cls(
            name=listener,
            enabled=tuple(enabled),
            mechanisms={name: available[name] for name in enabled},
            max_receive_size=listener_value(config, listener, "sasl.server.max.receive.size"),
            reauth_ms={name: listener_value(config, listener, "connections.max.reauth.ms", name) for name in enabled},
            failed_authentication_delay_s=config["connection.failed.authentication.delay.ms"] / 1000,
        )


class Outcome(NamedTuple):
    """What to write (a whole frame, or None), and whether the connection stays open."""

    response: bytes | None
    keep_open: bool


_CLOSE = Outcome(None, False)


class SaslServerAuthenticator:
    """The SASL state of one connection. The server hands it every frame while
    :attr:`authenticating`, and every frame for which :meth:`intercepts` is true after."""

    def __init__(
        self,
        broker: Broker,
        connection: ConnectionInfo,
        listener: SaslListener,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.broker = broker
        self.connection = connection
        self.listener = listener
        self.clock = clock
        self.principal: Principal | None = None
        self.mechanism: str | None = None
        self._state = _State.HANDSHAKE_OR_VERSIONS_REQUEST
        self._server: SaslServer | None = None
        self._expires_at: float | None = None
        self._reauth_started_at: float | None = None
        self._previous: tuple[str, Principal] | None = None  # mechanism and principal, while re-authenticating
        self._bad_mechanism = ""

    @property
    def authenticating(self) -> bool:
        return self._state is not _State.COMPLETE

    @property
    def max_receive_size(self) -> int:
        return self.listener.max_receive_size

    def intercepts(self, frame: bytes) -> bool:
        """Whether this frame is the authenticator's: every frame until authenticated,
        then a SaslHandshake that may start a re-authentication (which this begins)."""
        if self.authenticating:
            return True
        if frame[:2] != _HANDSHAKE_KEY or self._expires_at is None:
            return False
        now = self.clock()
        if self._reauth_started_at is not None and now - self._reauth_started_at < MIN_REAUTH_INTERVAL_S:
            return False  # the handshake then reaches the API handler: ILLEGAL_SASL_STATE
        assert self.mechanism is not None and self.principal is not None
        self._reauth_started_at = now
        self._previous = (self.mechanism, self.principal)
        self._state = _State.HANDSHAKE_REQUEST
        log.debug("%s: re-authentication begins", self.connection.connection_id)
        return True

    def session_expired(self) -> bool:
        return self._expires_at is not None and self.clock() > self._expires_at

    @property
    def _phase(self) -> str:
        return "re-authentication" if self._previous else "authentication"

    async def authenticate(self, frame: bytes) -> Outcome:
        """Handle one frame of the exchange."""
        if self._state is _State.AUTHENTICATE_RAW:
            return await self._raw_token(frame)
        try:
            header, body = parse_request_header_untrusted(frame)
        except CorruptRequest as exc:
            log.info(
                "%s: invalid request during SASL %s (%s); potential reasons: the client is configured with the "
                "wrong security protocol, does not support KIP-43, or is not a Kafka client",
                self.connection.connection_id,
                self._phase,
                exc,
            )
            return _CLOSE
        if self._state in (_State.HANDSHAKE_OR_VERSIONS_REQUEST, _State.HANDSHAKE_REQUEST):
            if header.api_key == API_VERSIONS_KEY and self._state is _State.HANDSHAKE_OR_VERSIONS_REQUEST:
                try:
                    response = await handle_frame(self.broker, self.connection, ANONYMOUS, frame)
                except (CorruptRequest, CloseConnection) as exc:
                    log.info("%s: %s", self.connection.connection_id, exc)
                    return _CLOSE
                api = self.broker.apis[API_VERSIONS_KEY]
                if api.min_version <= header.api_version <= api.max_version:
                    self._state = _State.HANDSHAKE_REQUEST  # an unsupported version may be retried
                return Outcome(response, True)
            if header.api_key == SASL_HANDSHAKE:
                return await self._handshake(header, body)
            log.info(
                "%s: unexpected Kafka request of type %s during SASL handshake; closing",
                self.connection.connection_id,
                header.api_name,
            )
            return _CLOSE
        if header.api_key != SASL_AUTHENTICATE:
            message = f"Unexpected Kafka request of type {header.api_name} during SASL {self._phase}."
            log.info("%s: %s", self.connection.connection_id, message)
            await asyncio.sleep(self.listener.failed_authentication_delay_s)
            return Outcome(self._illegal_state_response(header, body), False)
        if not 0 <= header.api_version <= self.broker.apis[SASL_AUTHENTICATE].max_version:
            log.info("%s: SaslAuthenticate v%d is not supported", self.connection.connection_id, header.api_version)
            return _CLOSE
        try:
            request = request_spec(SASL_AUTHENTICATE).decode(header.api_version, body)
        except CorruptRequest as exc:
            log.info("%s: %s", self.connection.connection_id, exc)
            return _CLOSE
        try:
            token, lifetime_ms = self._evaluate(bytes(request.auth_bytes))
        except SaslException as exc:
            message = self._failure_message(exc)
            await asyncio.sleep(self.listener.failed_authentication_delay_s)
            body_out = authenticate_response(ErrorCode.SASL_AUTHENTICATION_FAILED, message)
            return Outcome(
                encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id, body_out), False
            )
        body_out = authenticate_response(ErrorCode.NONE, None, token, lifetime_ms)
        return Outcome(encode_response(SASL_AUTHENTICATE, header.api_version, header.correlation_id, body_out), True)

    async def _handshake(self, header, body) -> Outcome:
        version = header.api_version
        if not 0 <= version <= self.broker.apis[SASL_HANDSHAKE].max_version:
            log.info("%s: SaslHandshake v%d is not supported", self.connection.connection_id, version)
            return _CLOSE
        try:
            mechanism = request_spec(SASL_HANDSHAKE).decode(version, body).mechanism
        except CorruptRequest as exc:
            log.info("%s: %s", self.connection.connection_id, exc)
            return _CLOSE
        enabled = list(self.listener.enabled)
        if mechanism not in self.listener.mechanisms:
            log.info(
                "%s: SASL mechanism '%s' requested by client is not supported", self.connection.connection_id, mechanism
            )
            await asyncio.sleep(self.listener.failed_authentication_delay_s)
            body_out = handshake_response(ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled)
            return Outcome(encode_response(SASL_HANDSHAKE, version, header.correlation_id, body_out), False)
        if self._previous is not None and mechanism != self._previous[0]:
            self._state = _State.REAUTH_BAD_MECHANISM
            self._bad_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for re-authentication of "
                f"mechanism '{self._previous[0]}'"
            )
        else:
            self.mechanism = mechanism
            self._server = self.listener.mechanisms[mechanism].server(self.connection)
            self._state = _State.AUTHENTICATE if version >= 1 else _State.AUTHENTICATE_RAW
        body_out = handshake_response(ErrorCode.NONE, enabled)
        return Outcome(encode_response(SASL_HANDSHAKE, version, header.correlation_id, body_out), True)

    def _evaluate(self, token: bytes) -> tuple[bytes, int]:
        """One step of the mechanism; on completion, the principal and the session lifetime."""
        if self._state is _State.REAUTH_BAD_MECHANISM:
            raise SaslAuthenticationException(self._bad_mechanism)
        assert self._server is not None and self.mechanism is not None
        challenge = self._server.step(token)
        if not self._server.complete:
            return challenge, 0
        principal = Principal("User", self._server.authorization_id)
        if self._previous is not None and principal != self._previous[1]:
            old = self._previous[1]
            raise SaslAuthenticationException(
                f"Cannot change principals during re-authentication from {old.type}.{old.name}: "
                f"{principal.type}.{principal.name}"
            )
        lifetime_ms = max(self.listener.reauth_ms.get(self.mechanism, 0), 0)
        self._expires_at = self.clock() + lifetime_ms / 1000 if lifetime_ms else None
        self.principal, self._previous, self._server = principal, None, None
        self._state = _State.COMPLETE
        log.debug("%s: authenticated %s with %s", self.connection.connection_id, principal, self.mechanism)
        return challenge, lifetime_ms

    async def _raw_token(self, token: bytes) -> Outcome:
        """After a v0 handshake: a raw token in, a raw size-prefixed token out; a failure can
        only close the connection, as there is no response to carry an error."""
        try:
            challenge, _ = self._evaluate(token)
        except SaslException as exc:
            self._failure_message(exc)
            await asyncio.sleep(self.listener.failed_authentication_delay_s)
            return _CLOSE
        return Outcome(len(challenge).to_bytes(4, "big") + challenge, True)

    def _failure_message(self, exc: SaslException) -> str:
        """What the client reads: the message of a SaslAuthenticationException, else
        Kafka's generic one (the detail, which may say whether a user exists, is logged)."""
        log.info(
            "%s: failed authentication with /%s (%s with %s: %s)",
            self.connection.connection_id,
            self.connection.client_host,
            self._phase,
            self.mechanism,
            exc,
        )
        if isinstance(exc, SaslAuthenticationException):
            return str(exc)
        return (
            f"Authentication failed during {self._phase} due to invalid credentials with SASL mechanism "
            f"{self.mechanism}"
        )

    def _illegal_state_response(self, header, body) -> bytes | None:
        """The request's own response with ILLEGAL_SASL_STATE, when brokkr serves its version."""
        api = self.broker.apis.get(header.api_key)
        if api is None or not api.min_version <= header.api_version <= api.max_version:
            return None
        try:
            request = request_spec(header.api_key).decode(header.api_version, body)
            response = api.error_response(request, ErrorCode.ILLEGAL_SASL_STATE)
            return encode_response(header.api_key, header.api_version, header.correlation_id, response)
        except Exception:  # a body that does not decode, or an error response that cannot say it
            return None
