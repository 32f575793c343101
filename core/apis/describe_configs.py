"""DescribeConfigs (key 32), versions 1-4: topic, broker and group (resource type 32:
:mod:`~brokkr.core.group_configs`) settings with their sources and synonyms, as Kafka's
ConfigHelper reports them."""

from __future__ import annotations

from ..authorization import CLUSTER_NAME, AclOperation, Action, ResourceType
from ..config import (
    DYNAMIC_BROKER_CONFIGS,
    ConfigSource,
    ConfigType,
    broker_synonyms,
    format_value,
    is_sensitive,
)
from ..errors import ErrorCode
from ..group_configs import GROUP_CONFIG_SOURCE, GROUP_CONFIGS, GROUP_RESOURCE
from ..protocol.frames import response_spec
from . import Api

KEY = 32
TOPIC, BROKER = 2, 4
_R = response_spec(KEY)
DescribeConfigsResponse = _R.cls
DescribeConfigsResult = _R.struct("DescribeConfigsResult")
DescribeConfigsResourceResult = _R.struct("DescribeConfigsResourceResult")
DescribeConfigsSynonym = _R.struct("DescribeConfigsSynonym")


def _topic_entries(broker, topic, request) -> list:
    config = topic.config
    out = []
    for name in sorted(config):
        d = broker.config.topic_defs[name]
        synonyms = []
        if request.include_synonyms:
            if name in config.overrides:
                synonyms.append(
                    DescribeConfigsSynonym(
                        name=name, value=format_value(config[name]), source=ConfigSource.TOPIC_CONFIG
                    )
                )
            for synonym in broker_synonyms(name):
                for scope, source in (
                    ("node", ConfigSource.DYNAMIC_BROKER_CONFIG),
                    ("", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                ):
                    if synonym in broker.config.dynamic[scope]:
                        value = format_value(broker.config.dynamic[scope][synonym])
                        synonyms.append(DescribeConfigsSynonym(name=synonym, value=value, source=source))
                if synonym in broker.config.explicit:
                    value = format_value(broker.config.explicit[synonym])
                    synonyms.append(
                        DescribeConfigsSynonym(name=synonym, value=value, source=ConfigSource.STATIC_BROKER_CONFIG)
                    )
            for synonym in broker_synonyms(name):
                default = broker.config.defs[synonym].default
                if default is not None:
                    value = format_value(default)
                    synonyms.append(
                        DescribeConfigsSynonym(name=synonym, value=value, source=ConfigSource.DEFAULT_CONFIG)
                    )
        out.append(
            DescribeConfigsResourceResult(
                name=name,
                value=format_value(config[name]),
                read_only=False,
                config_source=config.source(name),
                is_sensitive=False,
                synonyms=synonyms,
                config_type=d.type,
                documentation=d.doc if request.include_documentation else None,
            )
        )
    return out


def _broker_entries(broker, request) -> list:
    """Every defined setting, and every one given that has no definition of its own (per
    listener, of a family such as ``brokkr.sink.spark.conf.*``, unknown), as Kafka lists
    its originals; a sensitive one (:func:`~brokkr.core.config.is_sensitive`) with a null value."""
    config = broker.config
    out = []
    for name in sorted({n for n, d in config.defs.items() if not d.prefix} | set(config.explicit)):
        d = config.definition(name)
        sensitive = is_sensitive(name, d)
        source = config.source(name)
        value = None if sensitive else format_value(config[name])
        synonyms = [DescribeConfigsSynonym(name=name, value=value, source=source)] if request.include_synonyms else []
        out.append(
            DescribeConfigsResourceResult(
                name=name,
                value=value,
                read_only=name not in DYNAMIC_BROKER_CONFIGS,
                config_source=source,
                is_sensitive=sensitive,
                synonyms=synonyms,
                config_type=ConfigType.UNKNOWN if d is None else d.type,
                documentation=d.doc if d is not None and request.include_documentation else None,
            )
        )
    return out


def _group_entries(broker, group_id: str, request) -> list:
    """Every group setting: the group's own value (source GROUP_CONFIG), else the broker
    setting behind it (its synonym), else the group setting's default (Kafka's
    createGroupConfigEntry)."""
    configs = broker.group_configs
    own = configs.own(group_id)
    out = []
    for name, d in sorted(GROUP_CONFIGS.items()):
        synonyms = []
        if name in own:
            synonyms.append(DescribeConfigsSynonym(name=name, value=own[name], source=GROUP_CONFIG_SOURCE))
        if d.synonym is not None:
            source = broker.config.source(d.synonym) if d.synonym in broker.config else ConfigSource.DEFAULT_CONFIG
            value = format_value(configs.broker_default(name))
            synonyms.append(DescribeConfigsSynonym(name=d.synonym, value=value, source=source))
        else:
            synonyms.append(
                DescribeConfigsSynonym(name=name, value=format_value(d.default), source=ConfigSource.DEFAULT_CONFIG)
            )
        out.append(
            DescribeConfigsResourceResult(
                name=name,
                value=configs.value(group_id, name),
                read_only=False,
                config_source=synonyms[0].source,
                is_sensitive=False,
                synonyms=synonyms if request.include_synonyms else [],
                config_type=d.type,
                documentation=d.doc if request.include_documentation else None,
            )
        )
    return out


def _resource(r) -> tuple[ResourceType, str]:
    if r.resource_type == TOPIC:
        return ResourceType.TOPIC, r.resource_name
    if r.resource_type == GROUP_RESOURCE:
        return ResourceType.GROUP, r.resource_name
    return ResourceType.CLUSTER, CLUSTER_NAME


async def handle(broker, ctx, request):
    actions = [Action(AclOperation.DESCRIBE_CONFIGS, *_resource(r)) for r in request.resources]
    allowed = broker.authorize(ctx, actions)
    results = []
    for r, ok in zip(request.resources, allowed):
        res = DescribeConfigsResult(
            error_code=ErrorCode.NONE, resource_type=r.resource_type, resource_name=r.resource_name
        )
        results.append(res)
        if r.resource_type == TOPIC:
            topic = broker.topics.get(r.resource_name)
            if not ok:
                res.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif topic is None:
                res.error_code, res.error_message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unknown topic"
            else:
                res.configs = _topic_entries(broker, topic, request)
        elif r.resource_type == BROKER:
            if not ok:
                res.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            elif r.resource_name not in ("", str(broker.node_id)):
                res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, f"Unexpected broker id {r.resource_name}"
            else:
                res.configs = _broker_entries(broker, request)
        elif r.resource_type == GROUP_RESOURCE:
            if not ok:
                res.error_code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif not r.resource_name:
                res.error_code, res.error_message = ErrorCode.INVALID_REQUEST, "Group name must not be empty"
            else:
                res.configs = _group_entries(broker, r.resource_name, request)
        else:
            res.error_code = ErrorCode.INVALID_REQUEST
            res.error_message = f"Unsupported resource type {r.resource_type}"
        if res.configs and r.configuration_keys is not None:
            wanted = set(r.configuration_keys)
            res.configs = [c for c in res.configs if c.name in wanted]
    return DescribeConfigsResponse(results=results)


def error_response(request, code):
    return DescribeConfigsResponse(
        results=[
            DescribeConfigsResult(error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in request.resources
        ]
    )


API = Api(KEY, 1, 4, handle, error_response)
