"""AlterConfigs (key 33), versions 0-2: replace a resource's settings wholesale (Kafka's
legacy API; IncrementalAlterConfigs is the one AdminClients use today).

Shared with :mod:`.incremental_alter_configs`: both take resources in the same shape and
answer one result per resource, in Kafka's order of checks: a resource named twice is
INVALID_REQUEST; then ALTER_CONFIGS on the topic (TOPIC_AUTHORIZATION_FAILED) or on the
cluster for a broker (CLUSTER_AUTHORIZATION_FAILED); then the resource itself. Topic
settings take effect at once, for every partition, and are saved with the topic catalog;
``validate_only`` checks everything and changes nothing. A broker resource ("" for the
cluster-wide default, or this broker's id) changes the dynamic broker settings
(``config.DYNAMIC_BROKER_CONFIGS``: the log defaults behind topic settings), which every
topic without its own value follows at once and which are kept in the storage; any other
broker setting is answered as Kafka answers one that is not dynamic (INVALID_REQUEST). A
group (resource type 32, ALTER_CONFIGS on the group) takes Kafka's group settings
(:mod:`~brokkr.core.group_configs`), within the broker's bounds (INVALID_CONFIG).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..config import NotDynamic, check_dynamic, format_value
from ..errors import BrokkrError, ErrorCode
from ..group_configs import GROUP_CONFIGS, GROUP_RESOURCE
from ..protocol.frames import response_spec
from . import Api

KEY = 33
TOPIC, BROKER = 2, 4
_R = response_spec(KEY)
AlterConfigsResponse = _R.cls
AlterConfigsResourceResponse = _R.struct("AlterConfigsResourceResponse")


async def alter_resources(broker, ctx, request, new_settings: Callable, response_cls, result_cls):
    """Answer an (Incremental)AlterConfigs request. ``new_settings(current, resource, defs,
    config)`` gives a resource's new settings (Kafka's strings) from its current ones (the
    topic's own, or the broker's dynamic ones) or raises BrokkrError."""
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    actions = []
    for r in request.resources:
        if r.resource_type == TOPIC:
            actions.append(Action(AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, r.resource_name))
        elif r.resource_type == BROKER:
            actions.append(Action(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME))
        elif r.resource_type == GROUP_RESOURCE:
            actions.append(Action(AclOperation.ALTER_CONFIGS, ResourceType.GROUP, r.resource_name))
    allowed = iter(broker.authorize(ctx, actions))
    results = []
    for r in request.resources:
        res = result_cls(
            resource_type=r.resource_type, resource_name=r.resource_name, error_code=ErrorCode.NONE, error_message=None
        )
        results.append(res)
        authorized = next(allowed) if r.resource_type in (TOPIC, BROKER, GROUP_RESOURCE) else True
        try:
            if counts[(r.resource_type, r.resource_name)] > 1:
                raise BrokkrError("Each resource may appear at most once in a request", ErrorCode.INVALID_REQUEST)
            if r.resource_type == TOPIC:
                if not authorized:
                    raise BrokkrError("Authorization failed.", ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                topic = broker.topics.get(r.resource_name)
                if topic is None:
                    raise BrokkrError(f"Topic {r.resource_name} does not exist.", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                names = Counter(c.name for c in r.configs)
                if any(n > 1 for n in names.values()):
                    raise BrokkrError("Error due to duplicate config keys", ErrorCode.INVALID_REQUEST)
                settings = new_settings(topic.config.override_strings(), r, broker.config.topic_defs, topic.config)
                if broker.replicas is not None:  # kept by the cluster, applied by every broker
                    await broker.replicas.alter_topic_config(r.resource_name, settings, request.validate_only)
                else:
                    broker.alter_topic_config(r.resource_name, settings, request.validate_only)
            elif r.resource_type == BROKER:
                if not authorized:
                    raise BrokkrError("Authorization failed.", ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                if r.resource_name not in ("", str(broker.node_id)):
                    raise BrokkrError(
                        f"Unexpected broker id, expected {broker.node_id} or empty string, but received "
                        f"{r.resource_name}",
                        ErrorCode.INVALID_REQUEST,
                    )
                scope = "" if r.resource_name == "" else "node"
                current = {k: format_value(v) for k, v in broker.config.dynamic[scope].items()}
                names = Counter(c.name for c in r.configs)
                if any(n > 1 for n in names.values()):
                    raise BrokkrError("Error due to duplicate config keys", ErrorCode.INVALID_REQUEST)
                try:
                    check_dynamic(names)  # before the operations, which would take any broker setting
                except NotDynamic as exc:
                    raise BrokkrError(str(exc), ErrorCode.INVALID_REQUEST) from None
                settings = new_settings(current, r, broker.config.defs, broker.config)
                broker.alter_broker_config(scope, settings, request.validate_only)
            elif r.resource_type == GROUP_RESOURCE:  # a group's own settings (core/group_configs.py)
                if not authorized:
                    raise BrokkrError("Authorization failed.", ErrorCode.GROUP_AUTHORIZATION_FAILED)
                if not r.resource_name:
                    raise BrokkrError("Default group resources are not allowed.", ErrorCode.INVALID_REQUEST)
                names = Counter(c.name for c in r.configs)
                if any(n > 1 for n in names.values()):
                    raise BrokkrError("Error due to duplicate config keys", ErrorCode.INVALID_REQUEST)
                unknown = sorted(n for n in names if n not in GROUP_CONFIGS)
                if unknown:
                    raise BrokkrError(f"Unknown group config name: {unknown[0]}", ErrorCode.INVALID_CONFIG)
                configs = broker.group_configs
                settings = new_settings(configs.own(r.resource_name), r, GROUP_CONFIGS, {})
                await configs.alter(r.resource_name, settings, request.validate_only)
            else:
                raise BrokkrError(f"Unsupported resource type {r.resource_type}", ErrorCode.INVALID_REQUEST)
        except BrokkrError as exc:
            res.error_code, res.error_message = exc.code, str(exc)
    return response_cls(responses=results)


def _replace(current, resource, defs, config) -> dict[str, str]:
    return {c.name: c.value for c in resource.configs if c.value is not None}


async def handle(broker, ctx, request):
    return await alter_resources(broker, ctx, request, _replace, AlterConfigsResponse, AlterConfigsResourceResponse)


def error_response_of(response_cls, result_cls):
    """The whole-request error answer of (Incremental)AlterConfigs: one result per resource."""

    def error_response(request, code):
        return response_cls(
            responses=[
                result_cls(error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
                for r in request.resources
            ]
        )

    return error_response


error_response = error_response_of(AlterConfigsResponse, AlterConfigsResourceResponse)


API = Api(KEY, 0, 2, handle, error_response)
