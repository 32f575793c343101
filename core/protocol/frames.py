"""Request and response framing: the size prefix, request headers v0-v2, response headers v0-v1.

A Kafka frame is an int32 size followed by that many bytes. A request's bytes start with
a header whose version follows from the API and its version (v2 when the request version
is flexible, else v1; v0 has no client id). A response header is v1 (with tagged fields)
when the response version is flexible, else v0; ApiVersions responses always use v0, so a
client that does not yet know the broker's versions can parse them.
"""

from __future__ import annotations

import functools
import struct
from importlib import resources
from typing import NamedTuple

from ..errors import CorruptRequest, UnknownApi
from . import offset_commit_codec, produce_codec
from .primitives import Reader, Writer
from .schema import MessageSpec, load_message

API_VERSIONS_KEY = 18
_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">ii")  # a response's size and correlation id
_FLEXIBLE_HEADER = struct.Struct(">iiB")  # and header v1's (empty) tagged fields
_HEADER_START = struct.Struct(">hhih")  # api key, api version, correlation id, client id length


@functools.cache
def api_names() -> dict[int, str]:
    """Every API key Kafka defines, e.g. ``{0: "Produce", 1: "Fetch", ...}``."""
    names = {}
    for p in resources.files(__package__).joinpath("messages").iterdir():
        if p.name.endswith("Request.json"):
            head = p.read_text().split('"apiKey":', 1)
            if len(head) == 2:
                names[int(head[1].split(",", 1)[0])] = p.name[: -len("Request.json")]
    return names


@functools.cache  # keys Kafka defines only: any other raises KeyError, which is not cached
def request_spec(api_key: int) -> MessageSpec:
    return load_message(api_names()[api_key] + "Request")


@functools.cache
def response_spec(api_key: int) -> MessageSpec:
    return load_message(api_names()[api_key] + "Response")


class RequestHeader(NamedTuple):
    """A request's header (immutable: a named tuple, built per request for a few opcodes
    where a frozen attrs class takes dozens)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int

    @property
    def api_name(self) -> str:
        return api_names()[self.api_key]


def request_header_version(spec: MessageSpec, api_version: int) -> int:
    lo, hi = spec.valid
    return 2 if spec.is_flexible(min(max(api_version, lo), hi)) else 1


@functools.lru_cache(maxsize=1024)
def _flexible_header(api_key: int, api_version: int) -> bool:
    return response_header_version(api_key, response_spec(api_key), api_version) >= 1


@functools.lru_cache(maxsize=1024)  # bounded: the versions come from untrusted frames
def _header_version(api_key: int, api_version: int) -> int | None:
    """The request header version of an API version; None for a key Kafka does not define."""
    if api_key not in api_names():
        return None
    return request_header_version(request_spec(api_key), api_version)


def response_header_version(api_key: int, spec: MessageSpec, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if spec.is_flexible(api_version) else 0


def parse_request_header_untrusted(
    frame: bytes | memoryview, header_version: int | None = None
) -> tuple[RequestHeader, Reader]:
    """Parse the header of one request frame (without its size prefix).

    The header version follows from the API and its version unless ``header_version``
    is given (v0, without a client id, was only ever used by ControlledShutdown v0,
    which Kafka 4 removed). Returns the header and a reader positioned at the request body. Raises
    :class:`UnknownApi` for an API key Kafka does not define and :class:`CorruptRequest`
    for bytes that do not parse.
    """
    if len(frame) >= _HEADER_START.size:  # the common case in one unpack; anything unusual takes the reader below
        api_key, api_version, correlation_id, n = _HEADER_START.unpack_from(frame)
        version = _header_version(api_key, api_version)  # one cached look-up: also whether Kafka defines the key
        if version is not None:
            if header_version is not None:
                version = header_version
            end = _HEADER_START.size + n
            if version >= 1 and n >= 0 and end < len(frame) and (version == 1 or frame[end] == 0):
                try:
                    client_id = str(frame[_HEADER_START.size : end], "utf-8")
                except UnicodeDecodeError:
                    pass
                else:
                    body = Reader(frame, end + 1 if version >= 2 else end)
                    return RequestHeader(api_key, api_version, correlation_id, client_id, version), body
    return read_request_header(frame, header_version)


def read_request_header(frame: bytes | memoryview, header_version: int | None = None) -> tuple[RequestHeader, Reader]:
    """:func:`parse_request_header_untrusted` field by field with a :class:`Reader`, for
    every header its one-unpack path leaves (a null client id, tagged fields, bytes that
    do not parse)."""
    r = Reader(frame)
    api_key = r.int16()
    api_version = r.int16()
    correlation_id = r.int32()
    if api_key not in api_names():
        raise UnknownApi(f"unknown API key {api_key}")
    version = header_version
    if version is None:
        version = request_header_version(request_spec(api_key), api_version)
    client_id = r.string(compact=False) if version >= 1 else None
    if version >= 2:
        r.skip_tagged_fields()
    return RequestHeader(api_key, api_version, correlation_id, client_id, version), r


def encode_request(
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id: str | None,
    body,
    header_version: int | None = None,
) -> bytes:
    """A whole request frame, size prefix included (for tests, tools and clients)."""
    spec = request_spec(api_key)
    if header_version is None:
        header_version = request_header_version(spec, api_version)
    w = Writer()
    w.raw(_SIZE.pack(0))
    w.int16(api_key)
    w.int16(api_version)
    w.int32(correlation_id)
    if header_version >= 1:
        w.string(client_id, compact=False)
    if header_version >= 2:
        w.uvarint(0)
    spec.encode(api_version, body, w)
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return bytes(w.buf)


#: The responses encoded by a written-out encoder (it answers False to leave one to the generic).
_WRITTEN_OUT = {
    produce_codec.KEY: produce_codec.encode_response,
    offset_commit_codec.KEY: offset_commit_codec.encode_response,
}


def encode_response(api_key: int, api_version: int, correlation_id: int, body) -> bytearray | list:
    """A whole response frame, size prefix included: the encoder's own buffer, not a copy
    of it (a Fetch response can be megabytes); or, when the body holds records whose bytes
    are not at hand (file regions, see :meth:`Writer.defer`), the frame's parts in order,
    bytes and those values alternating, the size prefix counting them all."""
    w = Writer()
    # The size (filled in below), the correlation id and, in header v1, no tagged fields.
    w.buf += (
        _FLEXIBLE_HEADER.pack(0, correlation_id, 0)
        if _flexible_header(api_key, api_version)
        else _HEADER.pack(0, correlation_id)
    )
    written_out = _WRITTEN_OUT.get(api_key)
    if written_out is None or not written_out(api_version, body, w):
        response_spec(api_key).encode(api_version, body, w)
    if w.deferred is None:
        _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
        return w.buf
    _SIZE.pack_into(w.buf, 0, len(w.buf) + sum(len(v) for _, v in w.deferred) - 4)
    parts: list = []
    start = 0
    view = memoryview(w.buf)
    for at, value in w.deferred:
        parts += (bytes(view[start:at]), value)
        start = at
    parts.append(bytes(view[start:]))
    return parts


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview):
    """Decode one response frame (without its size prefix): (correlation id, body)."""
    spec = response_spec(api_key)
    r = Reader(frame)
    correlation_id = r.int32()
    if response_header_version(api_key, spec, api_version) >= 1:
        r.skip_tagged_fields()
    body = spec.decode(api_version, r)
    if r.remaining:
        raise CorruptRequest(f"{r.remaining} trailing bytes in {spec.name} v{api_version}")
    return correlation_id, body
