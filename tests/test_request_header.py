"""A request header is parsed in one unpack where it can be (``parse_request_header_untrusted``)
and field by field otherwise (``read_request_header``): both must read every header alike,
and refuse alike what Kafka refuses."""

from __future__ import annotations

import struct

import pytest
from brokkr.core.errors import CorruptRequest, UnknownApi
from brokkr.core.protocol.frames import parse_request_header_untrusted, read_request_header


def _header(api_key: int, version: int, correlation: int, client_id: bytes | None, tagged: bytes | None) -> bytes:
    head = struct.pack(">hhi", api_key, version, correlation)
    head += struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id
    return head + (tagged if tagged is not None else b"")


HEADERS = [
    _header(0, 9, 7, b"producer-1", b"\x00"),  # Produce v9: header v2, no tagged fields
    _header(0, 8, 8, b"producer-1", b""),  # Produce v8: header v1
    _header(3, 12, 9, b"", b"\x00"),  # an empty client id
    _header(3, 12, 10, None, b"\x00"),  # a null client id: the field-by-field path
    _header(18, 3, 11, b"c\xc3\xa9", b"\x00"),  # ApiVersions v3, a UTF-8 client id
    _header(18, 99, 12, b"new-client", b""),  # a version brokkr does not know (answered UNSUPPORTED_VERSION)
    _header(3, 12, 13, b"tagged", b"\x01\x00\x00"),  # one (empty) tagged field
    _header(3, 12, 14, b"bad-\xff", b"\x00"),  # not UTF-8
    _header(3, 12, 15, b"cut", b""),  # a header v2 without its tagged fields
    _header(0, 9, 16, b"x" * 5, b"")[:-2],  # cut inside the client id
    _header(-3, 0, 17, b"x", b""),  # a key Kafka does not define
    _header(1000, 0, 18, b"x", b""),
]


def _read(parse, frame: bytes, header_version=None):
    try:
        header, body = parse(frame + b"body", header_version)
    except (CorruptRequest, UnknownApi) as exc:
        return type(exc)
    return header, bytes(body.buf[body.pos : body.end])


@pytest.mark.parametrize("frame", HEADERS)
@pytest.mark.parametrize("header_version", [None, 1, 2])
def test_the_one_unpack_path_and_the_field_by_field_path_agree(frame, header_version):
    assert _read(parse_request_header_untrusted, frame, header_version) == _read(
        read_request_header, frame, header_version
    )


def test_a_header_reads_as_kafka_writes_it():
    header, body = parse_request_header_untrusted(HEADERS[0] + b"body")
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (0, 9, 7, "producer-1")
    assert header.header_version == 2 and header.api_name == "Produce"
    assert body.remaining == 4
    with pytest.raises(UnknownApi):
        parse_request_header_untrusted(HEADERS[-1])
