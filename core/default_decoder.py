"""Built-in request decoding: Kafka's JSON message definitions, compiled by
:mod:`brokkr.core.protocol.schema`; Produce by :mod:`brokkr.core.protocol.produce_codec`,
OffsetCommit by :mod:`brokkr.core.protocol.offset_commit_codec`."""

from __future__ import annotations

from typing import Any

from .plugins import hookimpl
from .protocol import offset_commit_codec, produce_codec
from .protocol.frames import RequestHeader, request_spec
from .protocol.primitives import Reader


@hookimpl(trylast=True)
def brokkr_decode_request(header: RequestHeader, body: Reader) -> Any:
    if header.api_key == produce_codec.KEY:  # the most frequent request: written out
        return produce_codec.decode_request(header.api_version, body)
    if header.api_key == offset_commit_codec.KEY:  # a consumer's every commit: written out for 2-9
        request = offset_commit_codec.decode_request(header.api_version, body)
        if request is not None:
            return request
    return request_spec(header.api_key).decode(header.api_version, body)
