"""DeleteAcls (key 31), versions 1-3 (Kafka 4 removed v0): Kafka's ``AclApis.handleDeleteAcls``
and ``AclControlManager.deleteAcls``.

Needs ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for every filter); without
an ACL store every filter answers SECURITY_DISABLED. Each filter lists the ACLs it
matched and removed (an ACL matched by two filters is listed under both); a filter with an
element Kafka does not define answers INVALID_REQUEST. The removals are persisted before
the response.
"""

from __future__ import annotations

from ..authorization import AclBindingFilter, AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from ..shared_documents import settled
from . import Api
from .create_acls import acl_store

KEY = 31
_R = response_spec(KEY)
DeleteAclsResponse = _R.cls
DeleteAclsFilterResult = _R.struct("DeleteAclsFilterResult")
DeleteAclsMatchingAcl = _R.struct("DeleteAclsMatchingAcl")


def _invalid(acl_filter: AclBindingFilter) -> str | None:
    """Kafka's ``AclControlManager.validateFilter``."""
    if 0 in (acl_filter.resource_type, acl_filter.pattern_type):
        return "Unknown patternFilter."
    if 0 in (acl_filter.operation, acl_filter.permission_type):
        return "Unknown entryFilter."
    return None


async def handle(broker, ctx, request):
    store, error = acl_store(broker, ctx, AclOperation.ALTER)
    if error:
        return error_response(request, *error)
    filters = [
        AclBindingFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in request.filters
    ]
    errors = [_invalid(f) for f in filters]
    deleted = iter(await settled(store.delete_acls([f for f, e in zip(filters, errors) if e is None])))
    results = []
    for message in errors:
        if message is not None:
            results.append(DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=message))
            continue
        matching = [
            DeleteAclsMatchingAcl(
                error_code=ErrorCode.NONE,
                error_message=None,
                resource_type=acl.resource_type,
                resource_name=acl.resource_name,
                pattern_type=acl.pattern_type,
                principal=acl.principal,
                host=acl.host,
                operation=acl.operation,
                permission_type=acl.permission_type,
            )
            for acl in next(deleted)
        ]
        results.append(DeleteAclsFilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=matching))
    return DeleteAclsResponse(filter_results=results)


def error_response(request, code, message=None):
    return DeleteAclsResponse(
        filter_results=[DeleteAclsFilterResult(error_code=code, error_message=message) for _ in request.filters]
    )


API = Api(KEY, 1, 3, handle, error_response)
