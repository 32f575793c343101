"""ListConfigResources (key 74), versions 0-1 (KIP-1142; v0 is KIP-714's
ListClientMetricsResources): the config resources a client may describe, as Kafka's
KafkaApis.handleListConfigResources lists them.

v0 lists client-metrics resources only; v1 takes the resource types to list (none: all
that Kafka 4.1 lists, TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP), and answers
UNSUPPORTED_VERSION with no resources for any other type. The resources are every topic
(internal ones too) and every live broker on the client's listener; brokkr keeps no group
configs and no client-metrics subscriptions and serves no broker loggers in
DescribeConfigs, so those types list nothing rather than resources it cannot describe.
Needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as in Kafka.
"""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .common import cluster_brokers

KEY = 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32  # ConfigResource.Type
_R = response_spec(KEY)
ListConfigResourcesResponse = _R.cls
ConfigResource = _R.struct("ConfigResource")


#: The types each version lists (Kafka's ListConfigResourcesRequest.supportedResourceTypes).
SUPPORTED = {0: frozenset({CLIENT_METRICS}), 1: frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP})}


async def handle(broker, ctx, request):
    if not broker.authorize(ctx, [Action(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)])[0]:
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    supported = SUPPORTED[ctx.api_version]
    types = set(getattr(request, "resource_types", None) or supported)
    if not types <= supported:
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)
    resources = []
    if BROKER in types:
        brokers, _ = cluster_brokers(broker, ctx.listener)
        resources += [ConfigResource(resource_name=str(node_id), resource_type=BROKER) for node_id, *_ in brokers]
    if TOPIC in types:
        resources += [ConfigResource(resource_name=name, resource_type=TOPIC) for name in sorted(broker.topics)]
    return ListConfigResourcesResponse(error_code=ErrorCode.NONE, config_resources=resources)


def error_response(request, code):
    return ListConfigResourcesResponse(error_code=code, config_resources=[])


API = Api(KEY, 0, 1, handle, error_response)
