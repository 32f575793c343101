"""The least a Python server can do per Produce request: a reference for raw_produce.py.

It is not a broker. It reads size-prefixed frames on loopback TCP and, for each, appends
the frame to one file (the write a log append makes) and answers one fixed Produce v9
response with the request's correlation id. It decodes nothing, checks nothing and keeps
no state, so what it costs per request is what the socket, the event loop and a file write
cost in Python, with nothing of Kafka's work on top.

It runs in the cheapest form Python offers: every frame is answered from the protocol's
own callback (no task, future or timer per request), the answers to the frames of one read
go out in one write, and the loop is uvloop's when installed, as ``brokkr serve`` uses it.
Only ``raw_produce.py``'s client talks to it (it answers every frame as Produce v9, to
topic ``raw`` partition 0).

    python benchmarks/floor_server.py PORT FILE
"""

from __future__ import annotations

import asyncio
import os
import sys

from brokkr.core.protocol.frames import encode_response, response_spec

READ_BUFFER_BYTES = 1 << 20  # the largest frame raw_produce sends is far smaller


def canned_response() -> bytes:
    """A Produce v9 response frame (size prefix included) for partition 0 of ``raw``,
    correlation id 0, acknowledged at offset 0."""
    spec = response_spec(0)
    partition = spec.struct("PartitionProduceResponse")(
        index=0, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0
    )
    topic = spec.struct("TopicProduceResponse")(name="raw", partition_responses=[partition])
    return bytes(encode_response(0, 9, 0, spec.cls(responses=[topic])))


class FloorProtocol(asyncio.BufferedProtocol):
    def __init__(self, fd: int, response: bytes):
        self._fd = fd
        self._response = response
        self._buf = bytearray(READ_BUFFER_BYTES)
        self._start = self._end = 0  # unread bytes are _buf[_start:_end]
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._start:  # move the partial frame to the front
            self._buf[: self._end - self._start] = self._buf[self._start : self._end]
            self._end -= self._start
            self._start = 0
        if self._end == len(self._buf):
            raise ValueError("a frame larger than the read buffer")
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        buf, answers = self._buf, []
        while self._end - self._start >= 4:
            size = int.from_bytes(buf[self._start : self._start + 4], "big")
            if self._end - self._start - 4 < size:
                break
            frame = memoryview(buf)[self._start + 4 : self._start + 4 + size]
            os.write(self._fd, frame)
            answer = bytearray(self._response)
            answer[4:8] = frame[4:8]  # the correlation id, after api key and version
            answers.append(answer)
            self._start += 4 + size
        if answers:
            self._transport.write(b"".join(answers))


async def serve(port: int, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    response = canned_response()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: FloorProtocol(fd, response), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port, path))
    else:
        uvloop.run(serve(port, path))


if __name__ == "__main__":
    main()
