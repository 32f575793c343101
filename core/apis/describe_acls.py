"""DescribeAcls (key 29), versions 1-3 (Kafka 4 removed v0): Kafka's ``AclApis.handleDescribeAcls``.

Needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED); answers the ACLs the
filter matches (see :class:`brokkr.core.authorization.AclBindingFilter`, including pattern
types ANY and MATCH), grouped by resource pattern. A filter with an element Kafka does not
define answers INVALID_REQUEST; without an ACL store, SECURITY_DISABLED.
"""

from __future__ import annotations

from ..authorization import AclBindingFilter, AclOperation
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .create_acls import acl_store

KEY = 29
_R = response_spec(KEY)
DescribeAclsResponse = _R.cls
DescribeAclsResource = _R.struct("DescribeAclsResource")
AclDescription = _R.struct("AclDescription")


async def handle(broker, ctx, request):
    store, error = acl_store(broker, ctx, AclOperation.DESCRIBE)
    if error:
        return error_response(request, *error)
    acl_filter = AclBindingFilter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if acl_filter.is_unknown():
        return error_response(request, ErrorCode.INVALID_REQUEST, "The filter contains UNKNOWN elements")
    resources: dict[tuple, list] = {}
    for acl in store.acls(acl_filter):
        resources.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(
            AclDescription(
                principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission_type
            )
        )
    return DescribeAclsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        resources=[
            DescribeAclsResource(resource_type=kind, resource_name=name, pattern_type=pattern, acls=acls)
            for (kind, name, pattern), acls in resources.items()
        ],
    )


def error_response(request, code, message=None):
    return DescribeAclsResponse(error_code=code, error_message=message)


API = Api(KEY, 1, 3, handle, error_response)
