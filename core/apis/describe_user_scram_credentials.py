"""DescribeUserScramCredentials (key 50), version 0: which SCRAM mechanisms (and iteration
counts) each user has, never the credentials themselves. Needs DESCRIBE on the cluster.
Messages are Kafka's (``ScramImage.describe``)."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..scram import scram_credentials
from . import Api

KEY = 50
_R = response_spec(KEY)
DescribeUserScramCredentialsResponse = _R.cls
DescribeUserScramCredentialsResult = _R.struct("DescribeUserScramCredentialsResult")
CredentialInfo = _R.struct("CredentialInfo")


def _result(user: str, code: ErrorCode, message: str | None = None, infos=()) -> DescribeUserScramCredentialsResult:
    return DescribeUserScramCredentialsResult(
        user=user, error_code=code, error_message=message, credential_infos=list(infos)
    )


async def handle(broker, ctx, request):
    action = Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    if not broker.authorize(ctx, [action])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    store = scram_credentials(broker)
    names = [u.name for u in request.users or []]
    results = []
    for user in dict.fromkeys(names) if names else store.users():
        if names.count(user) > 1:
            results.append(
                _result(
                    user,
                    ErrorCode.DUPLICATE_RESOURCE,
                    f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
                )
            )
            continue
        creds = store.of(user)
        if not creds:
            message = f"Attempt to describe a user credential that does not exist: {user}"
            results.append(_result(user, ErrorCode.RESOURCE_NOT_FOUND, message))
            continue
        infos = [
            CredentialInfo(mechanism=m.type_id, iterations=c.iterations)
            for m, c in sorted(creds.items(), key=lambda i: i[0].type_id)
        ]
        results.append(_result(user, ErrorCode.NONE, None, infos))
    return DescribeUserScramCredentialsResponse(error_code=ErrorCode.NONE, error_message=None, results=results)


def error_response(request, code):
    message = "Cluster authorization failed." if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED else None
    return DescribeUserScramCredentialsResponse(
        error_code=code,
        error_message=message,
        results=[_result(u.name, code, message) for u in request.users or []],
    )


API = Api(KEY, 0, 0, handle, error_response)
