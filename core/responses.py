"""Writing a response frame made of parts: encoded bytes and file regions (Fetch).

A fetch answered from segment files (:mod:`brokkr.core.file_region`) encodes to bytes
with holes: the records fields' length prefixes are in the bytes, their batches are
regions of files (:func:`brokkr.core.protocol.frames.encode_response`; a storage answers
reads under ``file_region.MIN_BYTES`` as bytes). Bytes parts go through the connection's
:class:`~brokkr.core.channel.Channel`; a region goes with ``os.sendfile`` from the page
cache to the socket, so the batches are never copied into Python objects (Kafka's
``FileRecords.transferTo``).

The region is sent on the socket itself, once the transport holds nothing unsent (what
precedes the region must reach the socket first); the connection's task is the only
writer and waits for the send, so nothing is written behind it. When the socket's buffer
is full, the send waits for it to take more on a duplicate of the socket's descriptor
(an event loop refuses to watch a descriptor a transport owns; asyncio's and uvloop's
alike). A region goes as bytes instead (``pread``, then written like any response) on TLS
listeners, where the bytes must be encrypted, and when the transport still holds unsent
bytes (a client slow to read).

Every byte written is what the bytes path writes for the same response. If a file can no
longer supply a region's length (truncated in place since the read), the connection is
aborted mid-frame: the client sees a closed connection and fetches again, never a short
frame followed by the next response's bytes.

Idle expiry as for any response: a client that takes no byte for
``connections.max.idle.ms`` is closed; a slow one that keeps reading is not.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING

from .file_region import FileRegion, ShortRegion

if TYPE_CHECKING:
    from .channel import Channel

log = logging.getLogger("brokkr.server")

#: Bytes parts (and regions read on TLS) are handed to the transport at most this much at
#: a time before waiting for it to take them, so a frame is never held whole in memory.
WRITE_CHUNK = 1 << 20


class ResponseParts:
    """One response frame as parts (bytes and :class:`FileRegion`, in order); owns the
    regions and closes them once the frame is sent or cannot be."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | FileRegion]):
        self.parts = parts
        self.size = sum(len(p) for p in parts)

    def __len__(self) -> int:
        """The frame's size, its size prefix included (as ``len`` of a bytes frame)."""
        return self.size

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()

    def to_bytes(self) -> bytes:
        """The frame as one bytes object (for callers that want bytes); raises ShortRegion."""
        return b"".join(p if isinstance(p, bytes) else p.read() for p in self.parts)

    async def send(self, channel: Channel, idle_s: float) -> None:
        """Write the frame to ``channel``. Raises ShortRegion (the connection aborted),
        TimeoutError or ConnectionError; the regions are closed in every case."""
        transport = channel.transport
        sock = None if transport.get_extra_info("ssl_object") is not None else transport.get_extra_info("socket")
        out = None  # a duplicate of the socket's descriptor, made at the first sendfile
        try:
            pending: list[bytes] = []  # written together: one write for a small frame
            size = 0
            for part in self.parts:
                if isinstance(part, FileRegion) and sock is not None:
                    if pending:
                        channel.write(b"".join(pending))
                        pending, size = [], 0
                    channel.uncork()
                    if not transport.get_write_buffer_size():  # what precedes the region is in the socket
                        if out is None:
                            out = os.dup(sock.fileno())
                        await _sendfile(channel, out, part, idle_s)
                        continue
                data = part if isinstance(part, bytes) else part.read()
                pending.append(data)
                size += len(data)
                if size >= WRITE_CHUNK:
                    channel.write(b"".join(pending))
                    pending, size = [], 0
                    await channel.drain(idle_s)
            channel.write(b"".join(pending))
            await channel.drain(idle_s)
        except ShortRegion as exc:
            log.warning("%s; aborting the connection mid-response", exc)
            transport.abort()
            raise
        finally:
            if out is not None:
                os.close(out)
            self.close()


async def _sendfile(channel: Channel, out: int, region: FileRegion, idle_s: float) -> None:
    """Send the whole region on the socket ``out``, waiting while its buffer is full;
    TimeoutError when the client takes nothing for ``idle_s``."""
    source = region.file.fileno()
    sent = 0
    while sent < region.length:
        if channel.transport.is_closing():
            raise ConnectionResetError("the connection closed mid-response")
        try:
            n = os.sendfile(out, source, region.position + sent, region.length - sent)
        except BlockingIOError:
            await _writable(out, idle_s)
            continue
        if n == 0:
            raise ShortRegion(f"{region!r}: the file ended {region.length - sent} bytes short")
        sent += n


async def _writable(fd: int, idle_s: float) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        async with asyncio.timeout(idle_s):
            await ready
    finally:
        loop.remove_writer(fd)
