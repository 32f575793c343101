"""Kafka's primitive wire types: fixed-width integers, varints, strings, bytes, UUIDs.

Sans-IO: a :class:`Reader` walks a buffer the peer sent, a :class:`Writer` builds one.
Every read of peer bytes checks lengths against what is left *before* allocating, and
any malformed input surfaces as :class:`~brokkr.core.errors.CorruptRequest`, never as
``struct.error`` or ``IndexError``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sized

from ..errors import CorruptRequest

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_F64 = struct.Struct(">d")

ZERO_UUID = uuid.UUID(int=0)
VARINT_MAX_BYTES = 5  # an int32
VARLONG_MAX_BYTES = 10  # an int64


def decode_uvarint(buf: bytes | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """The unsigned LEB128 varint of at most ``max_bytes`` at ``pos`` in ``buf[:end]``:
    ``(value, position after it)``. Zigzag-encoded (signed) ones decode as
    ``(v >> 1) ^ -(v & 1)``. Raises CorruptRequest."""
    value = shift = 0
    limit = 7 * max_bytes
    while True:
        if pos >= end:
            raise CorruptRequest("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
        if shift >= limit:
            raise CorruptRequest(f"varint longer than {max_bytes} bytes")


class Reader:
    """A cursor over untrusted bytes. ``pos`` only moves forward."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf: bytes | memoryview, pos: int = 0, end: int | None = None):
        self.buf = memoryview(buf)
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _fixed(self, st: struct.Struct):
        pos = self.pos
        if pos + st.size > self.end:
            raise CorruptRequest(f"truncated: need {st.size} bytes at {pos}, have {self.end - pos}")
        self.pos = pos + st.size
        return st.unpack_from(self.buf, pos)[0]

    def int8(self) -> int:
        return self._fixed(_I8)

    def int16(self) -> int:
        return self._fixed(_I16)

    def uint16(self) -> int:
        return self._fixed(_U16)

    def int32(self) -> int:
        return self._fixed(_I32)

    def uint32(self) -> int:
        return self._fixed(_U32)

    def int64(self) -> int:
        return self._fixed(_I64)

    def float64(self) -> float:
        return self._fixed(_F64)

    def bool(self) -> bool:
        return self._fixed(_I8) != 0

    def uuid(self) -> uuid.UUID:
        raw = self.take(16)
        return uuid.UUID(bytes=bytes(raw))

    def uvarint(self) -> int:
        """Unsigned LEB128 varint, at most 5 bytes (an int32), as Kafka's ByteUtils."""
        pos = self.pos
        if pos < self.end and (byte := self.buf[pos]) < 0x80:  # one byte, as most are
            self.pos = pos + 1
            return byte
        value, self.pos = decode_uvarint(self.buf, self.pos, self.end, VARINT_MAX_BYTES)
        return value

    def varint(self) -> int:
        v = self.uvarint()
        return (v >> 1) ^ -(v & 1)

    def uvarlong(self) -> int:
        value, self.pos = decode_uvarint(self.buf, self.pos, self.end, VARLONG_MAX_BYTES)
        return value

    def varlong(self) -> int:
        v = self.uvarlong()
        return (v >> 1) ^ -(v & 1)

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes as a zero-copy view."""
        if n < 0 or self.pos + n > self.end:
            raise CorruptRequest(f"length {n} exceeds the {self.end - self.pos} bytes left")
        pos = self.pos
        self.pos = pos + n
        return self.buf[pos : pos + n]

    def skip(self, n: int) -> None:
        self.take(n)

    # Length prefixes. A compact length is stored as N+1 (0 means null).
    def length(self, compact: bool) -> int:
        return self.uvarint() - 1 if compact else self.int32()

    def count(self, compact: bool) -> int:
        """An array element count, bounded by the bytes left (as Kafka bounds it)."""
        n = self.uvarint() - 1 if compact else self.int32()
        if n > self.end - self.pos:
            raise CorruptRequest(f"array of {n} elements cannot fit in {self.end - self.pos} bytes")
        return n

    def string(self, compact: bool) -> str | None:
        n = self.uvarint() - 1 if compact else self.int16()
        if n < 0:
            return None
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRequest(f"string is not UTF-8: {exc}") from None

    def bytes(self, compact: bool) -> memoryview | None:
        n = self.length(compact)
        if n < 0:
            return None
        return self.take(n)

    def skip_tagged_fields(self) -> None:
        """Skip a flexible struct's tagged fields (for structs and headers that define none)."""
        for _ in range(self.uvarint()):
            self.uvarint()
            self.skip(self.uvarint())


class Writer:
    """Builds an encoded message in one bytearray.

    A value whose bytes are not at hand (a fetch's file region, sent later with sendfile)
    is :meth:`defer`-red: its length prefix is written and ``deferred`` records where its
    bytes go, so the message becomes ``buf`` cut at those positions with the values in
    between (:func:`brokkr.core.protocol.frames.encode_response`)."""

    __slots__ = ("buf", "deferred")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.deferred: list[tuple[int, Sized]] | None = None

    def int8(self, v: int) -> None:
        self.buf += _I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _F64.pack(v)

    def bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def uvarint(self, v: int) -> None:
        self.buf += encode_uvarint(v)

    def varint(self, v: int) -> None:
        self.buf += encode_uvarint((v << 1) ^ (v >> 63))

    def raw(self, data: bytes | memoryview) -> None:
        self.buf += data

    def length(self, n: int, compact: bool) -> None:
        """Write a length or count; ``-1`` is null."""
        if compact:
            self.buf += encode_uvarint(n + 1)
        else:
            self.buf += _I32.pack(n)

    def string(self, v: str | None, compact: bool) -> None:
        if v is None:
            if compact:
                self.buf.append(0)
            else:
                self.buf += _I16.pack(-1)
            return
        data = v.encode()
        if compact:
            self.buf += encode_uvarint(len(data) + 1)
        else:
            self.buf += _I16.pack(len(data))
        self.buf += data

    def bytes(self, v: bytes | memoryview | None, compact: bool) -> None:
        if v is None:
            self.length(-1, compact)
            return
        self.length(len(v), compact)
        self.buf += v

    def defer(self, v: Sized, compact: bool) -> None:
        """Write the length prefix of ``v``, whose ``len(v)`` bytes follow it in the
        message but are not copied into ``buf``."""
        self.length(len(v), compact)
        if self.deferred is None:
            self.deferred = []
        self.deferred.append((len(self.buf), v))


def encode_uvarint(v: int) -> bytes:
    if v < 0x80:
        return bytes((v,))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def encode_varint(v: int) -> bytes:
    """Zigzag varint (also serves varlongs: Python ints are unbounded)."""
    return encode_uvarint((v << 1) ^ (v >> 63))
