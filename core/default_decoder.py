"""Built-in request decoding: Kafka's JSON message definitions, compiled by
:mod:`brokkr.core.protocol.schema`; Produce by :mod:`brokkr.core.protocol.produce_codec`."""

from __future__ import annotations

from typing import Any

from .plugins import hookimpl
from .protocol import produce_codec
from .protocol.frames import RequestHeader, request_spec
from .protocol.primitives import Reader


@hookimpl(trylast=True)
def brokkr_decode_request(header: RequestHeader, body: Reader) -> Any:
    if header.api_key == produce_codec.KEY:  # the most frequent request: written out
        return produce_codec.decode_request(header.api_version, body)
    return request_spec(header.api_key).decode(header.api_version, body)
