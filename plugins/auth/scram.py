"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), Kafka's ``ScramSaslServer``.

Credentials come from :mod:`brokkr.core.scram` (added with ``brokkr scram add`` or an
admin client's AlterUserScramCredentials). The exchange::

    client-first   n,,n=<user>,r=<client nonce>[,<extension>...]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

No channel binding (``n`` or ``y``; ``p=`` is refused), no ``m=`` extension, no
delegation tokens (``tokenauth``). As in Kafka, an unknown user fails at the first
message; the client is told only that its credentials are invalid.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets

from brokkr.core.context import ConnectionInfo
from brokkr.core.plugins import hookimpl
from brokkr.core.sasl import SaslAuthenticationException, SaslException
from brokkr.core.scram import MIN_ITERATIONS, ScramCredential, ScramCredentials, ScramMechanism, scram_credentials

_ESCAPE = re.compile("=(2C|3D)")


class ScramSaslMechanism:
    """Satisfies :class:`brokkr.core.sasl.SaslMechanism`."""

    def __init__(self, mechanism: ScramMechanism, credentials: ScramCredentials):
        self.name = mechanism.mechanism_name
        self.mechanism = mechanism
        self.credentials = credentials

    def server(self, connection: ConnectionInfo) -> ScramSaslServer:
        return ScramSaslServer(self.mechanism, self.credentials)


class ScramSaslServer:
    """One connection's SCRAM exchange; satisfies :class:`brokkr.core.sasl.SaslServer`."""

    def __init__(self, mechanism: ScramMechanism, credentials: ScramCredentials, server_nonce: str | None = None):
        self.mechanism = mechanism
        self.credentials = credentials
        self.server_nonce = server_nonce or secrets.token_urlsafe(24)
        self.complete = False
        self.authorization_id = ""
        self._step = self._client_first
        self._gs2_header = self._client_first_bare = self._server_first = self._nonce = ""
        self._credential: ScramCredential | None = None

    def step(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslException("Invalid SCRAM message: not UTF-8") from None
        step, self._step = self._step, self._done  # a failed step fails the exchange for good
        return step(text)

    def _done(self, text: str) -> bytes:
        raise SaslException("Unexpected SCRAM message after the exchange ended")

    def _client_first(self, text: str) -> bytes:
        flag, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or flag not in ("n", "y"):
            raise SaslException("Invalid SCRAM client first message (only gs2 flags n and y are supported)")
        attrs = _attributes(bare)
        if not attrs or attrs[0][0] == "m":
            raise SaslException("Invalid SCRAM client first message: mandatory extensions are not supported")
        if [k for k, _ in attrs[:2]] != ["n", "r"] or not _printable(attrs[1][1]):
            raise SaslException("Invalid SCRAM client first message")
        if any(k == "tokenauth" and v.lower() == "true" for k, v in attrs[2:]):
            raise SaslException("Delegation token authentication is not supported")
        user = _sasl_name(attrs[0][1])
        if authzid:
            if not authzid.startswith("a="):
                raise SaslException("Invalid SCRAM client first message: bad authzid")
            if _sasl_name(authzid[2:]) != user:
                raise SaslAuthenticationException(
                    "Authentication failed: Client requested an authorization id that is different from username"
                )
        credential = self.credentials.get(user, self.mechanism)
        if credential is None:
            raise SaslException(f"Authentication failed: Invalid user credentials (no {self.mechanism.mechanism_name})")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslException(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS}")
        self.authorization_id, self._credential = user, credential
        self._gs2_header, self._client_first_bare = f"{flag},{authzid},", bare
        self._nonce = attrs[1][1] + self.server_nonce
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._step = self._client_final
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        attrs = _attributes(without_proof) if sep else []
        if len(attrs) < 2 or [k for k, _ in attrs[:2]] != ["c", "r"]:
            raise SaslException("Invalid SCRAM client final message")
        try:
            binding = base64.b64decode(attrs[0][1], validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise SaslException("Invalid SCRAM client final message: bad base64") from None
        if binding != self._gs2_header.encode():
            raise SaslException("Invalid SCRAM client final message: channel binding does not match")
        if attrs[1][1] != self._nonce:
            raise SaslException("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslException("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise SaslException("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._credential = None
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


def _attributes(text: str) -> list[tuple[str, str]]:
    """``"n=alice,r=abc"`` -> ``[("n", "alice"), ("r", "abc")]``; SaslException if malformed."""
    out = []
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslException("Invalid SCRAM message: attributes are key=value")
        out.append((key, value))
    return out


def _printable(nonce: str) -> bool:
    return bool(nonce) and all("\x21" <= ch <= "\x7e" and ch != "," for ch in nonce)


def _sasl_name(name: str) -> str:
    """RFC 5802 saslname: ',' and '=' arrive as =2C and =3D; any other '=' is invalid."""
    if not name or "\0" in name or "=" in _ESCAPE.sub("", name):
        raise SaslException("Invalid SCRAM user name")
    return _ESCAPE.sub(lambda m: "," if m.group(1) == "2C" else "=", name)


@hookimpl(trylast=True)
def brokkr_sasl_mechanisms(broker) -> list[ScramSaslMechanism]:
    credentials = scram_credentials(broker)
    return [ScramSaslMechanism(mechanism, credentials) for mechanism in ScramMechanism]
