"""ApiVersions (key 18): which APIs and versions this broker serves.

An unsupported ApiVersions version is answered in v0 with UNSUPPORTED_VERSION and the
full list, so the client can retry with a version both sides know (KIP-511).
"""

from __future__ import annotations

import re

from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 18
_R = response_spec(KEY)
ApiVersionsResponse = _R.cls
ApiVersion = _R.struct("ApiVersion")
# KIP-511: client software name and version must match this.
_SOFTWARE = re.compile(r"^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$")


def supported_api_versions(broker) -> list:
    """The APIs of ``broker``'s table (``brokkr_apis``), by key."""
    return [
        ApiVersion(
            api_key=api.key,
            min_version=api.min_version if api.advertised_min_version is None else api.advertised_min_version,
            max_version=api.max_version,
        )
        for api in sorted(broker.apis.values(), key=lambda a: a.key)
    ]


def unsupported_version_response(broker):
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=supported_api_versions(broker))


async def handle(broker, ctx, request):
    if ctx.api_version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name or "")
        and _SOFTWARE.fullmatch(request.client_software_version or "")
    ):
        return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST)
    return ApiVersionsResponse(error_code=ErrorCode.NONE, api_keys=supported_api_versions(broker))


def error_response(request, code):
    # Only for a failing handler (no broker at hand): the error, without the list.
    return ApiVersionsResponse(error_code=code, api_keys=[])


API = Api(KEY, 0, 4, handle, error_response)
