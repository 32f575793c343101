"""Request headers: the one-unpack path of ``parse_request_header_untrusted`` against the
field-by-field reader it falls back to, on every API and version and on damaged bytes."""

from __future__ import annotations

import random

import pytest
from brokkr.core.errors import CorruptRequest, UnknownApi
from brokkr.core.protocol.frames import (
    api_names,
    encode_request,
    parse_request_header_untrusted,
    read_request_header,
    request_spec,
)


def _outcome(parse, frame: bytes):
    try:
        header, body = parse(frame)
    except (CorruptRequest, UnknownApi) as exc:
        return type(exc)
    return header, body.pos


def _frames() -> list[bytes]:
    """A request frame (no size prefix) of every API at its first and last version, with
    several client ids: none, empty, ASCII, multi-byte UTF-8."""
    frames = []
    for key in sorted(api_names()):
        spec = request_spec(key)
        for version in sorted(set(spec.valid)):
            for client_id in (None, "", "rdkafka", "prod\u00fccer-\u4e2d"):
                frames.append(encode_request(key, version, 7, client_id, spec.cls())[4:])
    return frames


def test_every_header_parses_to_what_was_encoded_and_the_body_follows_it():
    for frame in _frames():
        header, body = parse_request_header_untrusted(frame)
        assert (header, body.pos) == _outcome(read_request_header, frame)
        assert header.correlation_id == 7
        spec = request_spec(header.api_key)
        assert body.pos + len(spec.encode(header.api_version, spec.cls()).buf) == len(frame)
        assert _outcome(lambda f: parse_request_header_untrusted(f, 0), frame) == _outcome(
            lambda f: read_request_header(f, 0), frame
        )


@pytest.mark.parametrize("seed", range(4))
def test_damaged_headers_parse_or_fail_as_the_reader_says(seed):
    """Truncated frames, changed bytes (lengths, tagged-field counts, UTF-8), unknown keys."""
    rng = random.Random(seed)
    frames = _frames()
    for _ in range(3000):
        frame = bytearray(rng.choice(frames))
        if rng.random() < 0.3:
            del frame[rng.randrange(len(frame) + 1) :]
        for _ in range(rng.randint(1, 3)):
            if frame:
                frame[rng.randrange(min(len(frame), 24))] = rng.choice(
                    (0, 1, 0x7F, 0x80, 0xC3, 0xFF, rng.randrange(256))
                )
        frame = bytes(frame)
        assert _outcome(parse_request_header_untrusted, frame) == _outcome(read_request_header, frame), frame[:24]
