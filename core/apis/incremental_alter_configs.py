"""IncrementalAlterConfigs (key 44), versions 0-1: SET, DELETE, APPEND and SUBTRACT single
settings of a topic (see :mod:`.alter_configs` for the checks both APIs share). APPEND and
SUBTRACT apply to list settings only (``cleanup.policy``), as in Kafka; DELETE returns a
setting to its default."""

from __future__ import annotations

from ..config import TOPIC_CONFIG_DEFS, ConfigType, format_value
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .alter_configs import alter_resources

KEY = 44
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_R = response_spec(KEY)
IncrementalAlterConfigsResponse = _R.cls
AlterConfigsResourceResponse = _R.struct("AlterConfigsResourceResponse")


def _apply(topic, resource) -> dict[str, str]:
    overrides = topic.config.override_strings()
    for c in resource.configs:
        d = TOPIC_CONFIG_DEFS.get(c.name)
        if d is None:
            raise BrokkrError(f"Unknown topic config name: {c.name}", ErrorCode.INVALID_CONFIG)
        if c.config_operation == SET:
            if c.value is None:
                raise BrokkrError(f"Null value not supported for : {c.name}", ErrorCode.INVALID_REQUEST)
            overrides[c.name] = c.value
        elif c.config_operation == DELETE:
            overrides.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if d.type is not ConfigType.LIST:
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise BrokkrError(
                    f"Config value {verb} is not allowed for config key: {c.name}", ErrorCode.INVALID_CONFIG
                )
            current = list(topic.config[c.name])
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                current += [v for v in given if v not in current]
            else:
                current = [v for v in current if v not in given]
            overrides[c.name] = format_value(current)
        else:
            raise BrokkrError(f"Unknown config operation {c.config_operation}", ErrorCode.INVALID_REQUEST)
    return overrides


async def handle(broker, ctx, request):
    return alter_resources(broker, ctx, request, _apply, IncrementalAlterConfigsResponse, AlterConfigsResourceResponse)


def error_response(request, code):
    return IncrementalAlterConfigsResponse(
        responses=[
            AlterConfigsResourceResponse(error_code=code, resource_type=r.resource_type, resource_name=r.resource_name)
            for r in request.resources
        ]
    )


API = Api(KEY, 0, 1, handle, error_response)
