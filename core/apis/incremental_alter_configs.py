"""IncrementalAlterConfigs (key 44), versions 0-1: SET, DELETE, APPEND and SUBTRACT single
settings of a topic (see :mod:`.alter_configs` for the checks both APIs share). APPEND and
SUBTRACT apply to list settings only (``cleanup.policy``), as in Kafka; DELETE returns a
setting to its default."""

from __future__ import annotations

from ..config import ConfigType, format_value
from ..errors import BrokkrError, ErrorCode
from ..protocol.frames import response_spec
from . import Api
from .alter_configs import alter_resources, error_response_of

KEY = 44
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_R = response_spec(KEY)
IncrementalAlterConfigsResponse = _R.cls
AlterConfigsResourceResponse = _R.struct("AlterConfigsResourceResponse")


def _apply(current: dict[str, str], resource, defs, config) -> dict[str, str]:
    """The resource's settings after the operations: ``current`` its own (Kafka's strings),
    ``defs`` the definitions of the names it takes, ``config`` its effective values."""
    settings = dict(current)
    for c in resource.configs:
        d = defs.get(c.name)
        if d is None:
            raise BrokkrError(f"Unknown topic config name: {c.name}", ErrorCode.INVALID_CONFIG)
        if c.config_operation == SET:
            if c.value is None:
                raise BrokkrError(f"Null value not supported for : {c.name}", ErrorCode.INVALID_REQUEST)
            settings[c.name] = c.value
        elif c.config_operation == DELETE:
            settings.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if d.type is not ConfigType.LIST:
                verb = "append" if c.config_operation == APPEND else "subtract"
                raise BrokkrError(
                    f"Config value {verb} is not allowed for config key: {c.name}", ErrorCode.INVALID_CONFIG
                )
            values = list(config[c.name] or [])
            given = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                values += [v for v in given if v not in values]
            else:
                values = [v for v in values if v not in given]
            settings[c.name] = format_value(values)
        else:
            raise BrokkrError(f"Unknown config operation {c.config_operation}", ErrorCode.INVALID_REQUEST)
    return settings


async def handle(broker, ctx, request):
    return await alter_resources(
        broker, ctx, request, _apply, IncrementalAlterConfigsResponse, AlterConfigsResourceResponse
    )


error_response = error_response_of(IncrementalAlterConfigsResponse, AlterConfigsResourceResponse)


API = Api(KEY, 0, 1, handle, error_response)
