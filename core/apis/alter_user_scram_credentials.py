"""AlterUserScramCredentials (key 51), version 0: add, replace and delete users' SCRAM
credentials. Needs ALTER on the cluster.

Clients send the salted password (``Hi(password, salt, iterations)``); the broker keeps
only the salt, the iteration count, StoredKey and ServerKey (:mod:`brokkr.core.scram`).
Checks and messages are Kafka's ``ScramControlManager``: one result per user; a user
named twice in one request (two mechanisms included) fails with DUPLICATE_RESOURCE;
iterations within [4096, 16384]; deleting a credential that does not exist fails with
RESOURCE_NOT_FOUND. The accepted changes are persisted together.
"""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..scram import MAX_SALT_BYTES, ScramCredential, ScramMechanism, check_iterations, scram_credentials
from ..shared_documents import settled
from . import Api

KEY = 51
_R = response_spec(KEY)
AlterUserScramCredentialsResponse = _R.cls
AlterUserScramCredentialsResult = _R.struct("AlterUserScramCredentialsResult")
_TWICE = "A user credential cannot be altered twice in the same request"


def _result(user: str, code: ErrorCode, message: str | None = None) -> AlterUserScramCredentialsResult:
    return AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)


def _check_user_and_mechanism(name: str, mechanism: ScramMechanism | None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism is None:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


async def handle(broker, ctx, request):
    action = Action(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    if not broker.authorize(ctx, [action])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    store = scram_credentials(broker)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, ScramMechanism] = {}
    upsertions: dict[str, tuple[ScramMechanism, ScramCredential]] = {}
    for d in request.deletions:
        if d.name in errors:
            continue
        mechanism = ScramMechanism.from_type(d.mechanism)
        error = _check_user_and_mechanism(d.name, mechanism)
        if d.name in deletions:
            del deletions[d.name]
            error = ErrorCode.DUPLICATE_RESOURCE, _TWICE
        elif error is None and store.get(d.name, mechanism) is None:
            error = ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
        if error is not None:
            errors[d.name] = error
        else:
            deletions[d.name] = mechanism
    for u in request.upsertions:
        if u.name in errors:
            continue
        mechanism = ScramMechanism.from_type(u.mechanism)
        error = _check_user_and_mechanism(u.name, mechanism)
        if u.name in deletions or u.name in upsertions:
            deletions.pop(u.name, None)
            upsertions.pop(u.name, None)
            error = ErrorCode.DUPLICATE_RESOURCE, _TWICE
        elif error is None and (message := check_iterations(u.iterations)) is not None:
            error = ErrorCode.UNACCEPTABLE_CREDENTIAL, message
        elif error is None and not 0 < len(u.salt) <= MAX_SALT_BYTES:
            error = ErrorCode.UNACCEPTABLE_CREDENTIAL, f"The salt must be 1 to {MAX_SALT_BYTES} bytes"
        if error is not None:
            errors[u.name] = error
        else:
            credential = ScramCredential.from_salted_password(
                mechanism, bytes(u.salt), bytes(u.salted_password), u.iterations
            )
            upsertions[u.name] = (mechanism, credential)
    for name, mechanism in deletions.items():
        store.remove(name, mechanism)
    for name, (mechanism, credential) in upsertions.items():
        store.put(name, mechanism, credential)
    if deletions or upsertions:
        await settled(store.save())
    results = [_result(name, ErrorCode.NONE) for name in (*deletions, *upsertions)]
    results += [_result(name, code, message) for name, (code, message) in errors.items()]
    return AlterUserScramCredentialsResponse(results=results)


def error_response(request, code):
    message = "Cluster authorization failed." if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else None
    names = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    return AlterUserScramCredentialsResponse(results=[_result(name, code, message) for name in names])


API = Api(KEY, 0, 0, handle, error_response)
