"""Built-in request decoding: Kafka's JSON message definitions, compiled by
:mod:`brokkr.core.protocol.schema`."""

from __future__ import annotations

from typing import Any

from .plugins import hookimpl
from .protocol.frames import RequestHeader, request_spec
from .protocol.primitives import Reader


@hookimpl(trylast=True)
def brokkr_decode_request(header: RequestHeader, body: Reader) -> Any:
    return request_spec(header.api_key).decode(header.api_version, body)
