"""CreateAcls (key 30), versions 1-3 (Kafka 4 removed v0): Kafka's ``AclApis.handleCreateAcls``
and ``AclControlManager.validateNewAcl``.

The request needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every
creation); without an ACL store (``authorizer.class.name`` unset) every creation answers
SECURITY_DISABLED. Each ACL is validated on its own (INVALID_REQUEST with Kafka's
message); the valid ones are added together and persisted before the response. Creating
an ACL that exists already succeeds and changes nothing.
"""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..shared_documents import settled
from . import Api
from .common import cluster_store

KEY = 30
_R = response_spec(KEY)
CreateAclsResponse = _R.cls
AclCreationResult = _R.struct("AclCreationResult")
NO_AUTHORIZER = (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")


def invalid_acl(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create ``acl``, or None (``AclApis`` then ``validateNewAcl``)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {acl.permission_type.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ":" not in acl.principal:
        return (
            f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal type "
            "from the principal name)"
        )
    return None


def acl_store(broker, ctx, operation: AclOperation):
    """The ACL store once the request may perform ``operation`` on the cluster (ALTER to
    change ACLs, DESCRIBE to list them): ``(store, None)`` or ``(None, (code, message))``."""
    return cluster_store(broker, ctx, operation, broker.hook.brokkr_acl_store, NO_AUTHORIZER)


async def handle(broker, ctx, request):
    store, error = acl_store(broker, ctx, AclOperation.ALTER)
    if error:
        return error_response(request, *error)
    results, valid = [], []
    for c in request.creations:
        acl = AclBinding(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        message = invalid_acl(acl)
        if message is None:
            valid.append(acl)
            results.append(AclCreationResult(error_code=ErrorCode.NONE, error_message=None))
        else:
            results.append(AclCreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=message))
    if valid:
        await settled(store.create_acls(valid))
    return CreateAclsResponse(results=results)


def error_response(request, code, message=None):
    return CreateAclsResponse(
        results=[AclCreationResult(error_code=code, error_message=message) for _ in request.creations]
    )


API = Api(KEY, 1, 3, handle, error_response)
