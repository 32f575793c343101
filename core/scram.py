"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka keeps them, and where brokkr keeps them.

A credential is never a password: it is a salt, an iteration count, and the two keys
derived from the salted password (``StoredKey = H(HMAC(SaltedPassword, "Client Key"))``,
``ServerKey = HMAC(SaltedPassword, "Server Key")``), enough to verify a client's proof
and to prove the server knows them, not enough to log in. Kafka's admin clients send
the salted password (AlterUserScramCredentials); ``brokkr scram add`` salts a password
itself. Passwords are used as UTF-8 bytes, without SASLprep, as Kafka and librdkafka do.

:class:`ScramCredentials` holds every user's credentials and keeps them in the shared
document ``scram-credentials`` (:mod:`brokkr.core.shared_documents`): alone the storage's
(with the segment storage, ``brokkr-scram-credentials.json`` in the first log dir), on a
cluster the cluster's, so a user created through one broker logs in on all.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import secrets
from typing import TYPE_CHECKING, Any

import attrs

from .errors import ConfigError
from .shared_documents import FollowedDocument

if TYPE_CHECKING:
    from .broker import Broker
    from .log import Storage
    from .shared_documents import SharedDocuments

STATE_NAME = "scram-credentials"
#: ScramMechanism.minIterations (RFC 7677 recommends at least 4096) and Kafka's
#: ScramControlManager.MAX_ITERATIONS.
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096
#: Larger salts are refused (Kafka sets no bound; the salt goes into every server-first message).
MAX_SALT_BYTES = 1024


class ScramMechanism(enum.Enum):
    """Kafka's ``ScramMechanism``: the type numbers of the admin APIs and the SASL names."""

    SCRAM_SHA_256 = (1, "SCRAM-SHA-256", "sha256")
    SCRAM_SHA_512 = (2, "SCRAM-SHA-512", "sha512")

    def __init__(self, type_id: int, mechanism_name: str, hash_name: str):
        self.type_id = type_id
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name

    @classmethod
    def from_type(cls, type_id: int) -> ScramMechanism | None:
        return next((m for m in cls if m.type_id == type_id), None)

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name.upper()), None)

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def salted_password(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this mechanism's HMAC, one hash length long."""
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)


@attrs.frozen(repr=False)
class ScramCredential:
    """One user's credential for one mechanism (Kafka's ``ScramCredential``)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        client_key = mechanism.hmac(salted_password, b"Client Key")
        server_key = mechanism.hmac(salted_password, b"Server Key")
        return cls(salt, mechanism.hash(client_key), server_key, iterations)

    @classmethod
    def from_password(
        cls, mechanism: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        salt = secrets.token_bytes(32) if salt is None else salt
        salted = mechanism.salted_password(password.encode(), salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)

    def __repr__(self) -> str:
        return f"ScramCredential(salt=[hidden], stored_key=[hidden], server_key=[hidden], iterations={self.iterations})"

    def to_json(self) -> dict[str, Any]:
        return {
            "salt": base64.b64encode(self.salt).decode(),
            "stored_key": base64.b64encode(self.stored_key).decode(),
            "server_key": base64.b64encode(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScramCredential:
        keys = ("salt", "stored_key", "server_key")
        salt, stored_key, server_key = (base64.b64decode(data[k], validate=True) for k in keys)
        return cls(salt, stored_key, server_key, int(data["iterations"]))


def check_iterations(iterations: int) -> str | None:
    """Kafka's message for an unacceptable iteration count, or None."""
    if iterations < MIN_ITERATIONS:
        return "Too few iterations"
    if iterations > MAX_ITERATIONS:
        return "Too many iterations"
    return None


class ScramCredentials:
    """Every user's SCRAM credentials, kept in ``documents`` (``broker.shared_documents``, or a
    storage), read again when another broker changed them. Changes are made in memory and
    persisted together by :meth:`save`."""

    def __init__(self, documents: SharedDocuments | Storage):
        self._users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        self.document = FollowedDocument(documents, STATE_NAME, self._load)
        self.document.follow()

    def _load(self, text: str | None) -> None:
        self._users = _decode(text) if text else {}

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        self.document.follow()
        return self._users.get(user, {}).get(mechanism)

    def of(self, user: str) -> dict[ScramMechanism, ScramCredential]:
        self.document.follow()
        return dict(self._users.get(user, {}))

    def users(self) -> list[str]:
        self.document.follow()
        return sorted(self._users)

    def put(self, user: str, mechanism: ScramMechanism, credential: ScramCredential) -> None:
        self._users.setdefault(user, {})[mechanism] = credential

    def remove(self, user: str, mechanism: ScramMechanism) -> bool:
        """Drop one credential; False if there was none."""
        creds = self._users.get(user, {})
        if creds.pop(mechanism, None) is None:
            return False
        if not creds:
            del self._users[user]
        return True

    def save(self):
        """Persist the changes made: None once written (a storage), else (shared documents)
        an awaitable to await."""
        doc = {
            "version": 1,
            "users": {
                user: {m.mechanism_name: c.to_json() for m, c in sorted(creds.items(), key=lambda i: i[0].type_id)}
                for user, creds in sorted(self._users.items())
            },
        }
        return self.document.write(json.dumps(doc, indent=1) + "\n")


def _decode(text: str) -> dict[str, dict[ScramMechanism, ScramCredential]]:
    try:
        doc = json.loads(text)
        if doc.get("version") != 1:
            raise ValueError(f"unknown version {doc.get('version')!r}")
        users: dict[str, dict[ScramMechanism, ScramCredential]] = {}
        for user, creds in doc["users"].items():
            for name, data in creds.items():
                mechanism = ScramMechanism.from_name(name)
                if mechanism is None:
                    raise ValueError(f"unknown mechanism {name!r}")
                users.setdefault(user, {})[mechanism] = ScramCredential.from_json(data)
        return users
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise ConfigError(f"the stored SCRAM credentials ({STATE_NAME}) cannot be read: {exc}") from None


def scram_credentials(broker: Broker) -> ScramCredentials:
    """The credentials of a started broker (its shared documents': its storage's, or its
    cluster's), kept on the broker (``broker.scram_store``)."""
    if broker.storage is None:
        raise RuntimeError("the broker is not started")
    store = broker.scram_store
    if store is None:
        store = broker.scram_store = ScramCredentials(broker.shared_documents)
    return store
