"""DescribeCluster (key 60), versions 0-2: the cluster id, its brokers as the client
reached them (the listener it connected on), the controller, and on request the cluster
operations the principal may perform. Needs DESCRIBE on the cluster, as in Kafka."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import cluster_authorized_operations, cluster_brokers

KEY = 60
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2  # EndpointType
_R = response_spec(KEY)
DescribeClusterResponse = _R.cls
DescribeClusterBroker = _R.struct("DescribeClusterBroker")


async def handle(broker, ctx, request):
    if ctx.api_version >= 1 and request.endpoint_type == CONTROLLERS_ENDPOINT:
        return DescribeClusterResponse(
            error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
            "CONTROLLER",
            cluster_id="",
        )
    if ctx.api_version >= 1 and request.endpoint_type != BROKERS_ENDPOINT:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"Unsupported endpoint type {request.endpoint_type}",
            cluster_id="",
        )
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    brokers, controller = cluster_brokers(broker, ctx.listener)
    response = DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        cluster_id=broker.cluster_id,
        controller_id=controller,
        brokers=[DescribeClusterBroker(broker_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers],
    )
    if request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = cluster_authorized_operations(broker, ctx)
    return response


def error_response(request, code):
    return DescribeClusterResponse(error_code=code, cluster_id="")


API = Api(KEY, 0, 2, handle, error_response)
