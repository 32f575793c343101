"""Frames as the connection's Channel reads them (core/channel.py): pipelined requests in
one write, a frame larger than the read buffer and its first body step arriving with
others behind it, frames cut at every boundary, and the answers in request order."""

from __future__ import annotations

import asyncio
import gc
import socket
import time

import pytest
from brokkr.core.channel import (
    BODY_STEP,
    CORK_BYTES,
    CORK_FRAMES,
    READ_BUFFER_BYTES,
    READ_BUFFER_MAX_BYTES,
    Channel,
)
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import encode_request, request_spec
from brokkr.core.protocol.records import iter_batches_untrusted, read_all_records
from brokkr.core.testing import RawClient
from wire import API_VERSIONS, FETCH, METADATA, PRODUCE, batch, fetch_body, metadata_body, produce_body

API_VERSIONS_BODY = request_spec(API_VERSIONS).cls()


def _answers(client: RawClient, expected: list[tuple[int, int, int]]) -> list:
    """Read one response per (correlation id, api key, version), checking the order."""
    bodies = []
    for correlation_id, api_key, version in expected:
        got, body = client.receive(api_key, version)
        assert got == correlation_id, "responses come back in request order"
        bodies.append(body)
    return bodies


def test_pipelined_frames_in_one_write_are_each_answered_in_order(brokkr_broker_factory):
    broker = brokkr_broker_factory({"message.max.bytes": str(8 << 20)})
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("piped")).topics[0].error_code == 0
        big = batch(3000, value=b"v" * 1000)  # ~3 MB: past the read buffer and the first body step
        assert len(big) > BODY_STEP + READ_BUFFER_MAX_BYTES
        frames, expected = [], []
        for i in range(60):
            if i % 20 == 10:
                frames.append(encode_request(PRODUCE, 9, i, "piped", produce_body("piped", big)))
                expected.append((i, PRODUCE, 9))
            elif i % 2:
                frames.append(encode_request(PRODUCE, 9, i, "piped", produce_body("piped", batch(5))))
                expected.append((i, PRODUCE, 9))
            else:
                frames.append(encode_request(API_VERSIONS, 0, i, "piped", API_VERSIONS_BODY))
                expected.append((i, API_VERSIONS, 0))
        c.sock.sendall(b"".join(frames))
        answers = _answers(c, expected)
        produced = [a.responses[0].partition_responses[0] for a in answers if hasattr(a, "responses")]
        assert [(p.error_code, p.error_message) for p in produced if p.error_code] == []
        offsets = [p.base_offset for p in produced]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        fetched = c.request(FETCH, 12, fetch_body("piped", max_bytes=64 << 20, partition_max_bytes=64 << 20))
        records = fetched.responses[0].partitions[0].records
        assert sum(h.record_count for h in iter_batches_untrusted(records)) == 30 * 5 + 3 * 3000


def test_frames_cut_at_every_byte_boundary_are_reassembled(brokkr_broker):
    """Two requests sent in pieces of 1, 2, 3, ... bytes, with pauses: the size prefix, the
    header and the body each arrive split."""
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("cut")).topics[0].error_code == 0
        data = encode_request(PRODUCE, 9, 7, "cut", produce_body("cut", batch(3))) + encode_request(
            API_VERSIONS, 0, 8, "cut", API_VERSIONS_BODY
        )
        pos, step = 0, 1
        while pos < len(data):
            c.sock.sendall(data[pos : pos + step])
            pos += step
            step = step % 7 + 1
            if pos % 5 == 0:
                time.sleep(0.001)
        produced, _ = _answers(c, [(7, PRODUCE, 9), (8, API_VERSIONS, 0)])
        assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE


@pytest.mark.parametrize("storage", ["segment", "memory"])
def test_reused_produce_buffers_never_change_what_the_log_holds(brokkr_broker_factory, storage):
    """Large Produce frames are read into buffers the broker reuses (FramePool): what one
    request appended must survive the next requests overwriting its buffer."""
    broker = brokkr_broker_factory({"brokkr.storage": storage})
    values = [bytes([65 + i]) * 600 for i in range(8)]
    with RawClient(broker.bootstrap_servers) as a, RawClient(broker.bootstrap_servers) as b:
        assert a.request(METADATA, 12, metadata_body("reuse")).topics[0].error_code == 0
        for i, value in enumerate(values):
            client = (a, b)[i % 2]
            big = batch(1000, value=value)  # ~600 KB: pooled
            assert len(big) > READ_BUFFER_MAX_BYTES
            part = client.request(PRODUCE, 9, produce_body("reuse", big)).responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.NONE and part.base_offset == 1000 * i
        fetched = a.request(FETCH, 12, fetch_body("reuse", max_bytes=64 << 20, partition_max_bytes=64 << 20))
    records = read_all_records(fetched.responses[0].partitions[0].records)
    assert [r.value for r in records] == [v for v in values for _ in range(1000)]


def test_connections_send_without_nagle_delay(brokkr_broker):
    """Kafka's Acceptor sets TCP_NODELAY on every connection; asyncio would not on accepted
    sockets, and small responses could then wait for the client's delayed ACK (40 ms)."""
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("nodelay")).topics[0].error_code == 0
        client_port = c.sock.getsockname()[1]
        accepted = [
            s
            for s in gc.get_objects()
            if isinstance(s, socket.socket) and s.fileno() >= 0 and s is not c.sock and _peer_port(s) == client_port
        ]
        assert accepted, "the broker's side of the connection"
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in accepted)


def _peer_port(s: socket.socket) -> int | None:
    if s.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        return s.getpeername()[1]
    except OSError:
        return None


class _Transport:
    """What the channel hands its responses to: every write, as one bytes object each."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _corking_channel(pipelined: bool = True) -> tuple[Channel, _Transport]:
    """A channel whose read buffer holds a whole request it has not taken yet, as when the
    client pipelined it, so that what it is asked to send is held; with ``pipelined``
    False, one with nothing buffered."""
    channel, transport = Channel(), _Transport()
    channel.connection_made(transport)
    if pipelined:
        _receive(channel, b"\x00\x00\x00\x03req")
    return channel, transport


def _receive(channel: Channel, data: bytes) -> int:
    """``data`` arriving from the client, as the transport hands it over: as much of it as
    the buffer the channel offers holds, the count returned."""
    view = channel.get_buffer(-1)
    n = min(len(view), len(data))
    view[:n] = data[:n]
    channel.buffer_updated(n)
    return n


def test_small_responses_written_in_one_turn_reach_the_transport_as_one_write_in_order():
    async def main() -> list[bytes]:
        channel, transport = _corking_channel()
        for i in range(3):
            channel.write(bytearray(b"answer-%d;" % i))
        assert transport.writes == [], "held while a whole request waits in the read buffer"
        await asyncio.sleep(0)
        return transport.writes

    assert asyncio.run(main()) == [b"answer-0;answer-1;answer-2;"]


def test_the_answer_to_the_last_buffered_request_goes_out_at_once_with_those_held_before_it():
    async def main() -> None:
        channel, transport = _corking_channel()
        _receive(channel, b"\x00\x00\x00\x03re")  # the next request, not all here yet
        channel.write(b"first;")
        assert transport.writes == []
        assert await channel.read_size(1.0) == 3 and await channel.read_body(3, 1.0) == b"req"
        channel.write(b"second;")
        assert transport.writes == [b"first;second;"], "no whole request left: sent without waiting a turn"
        await asyncio.sleep(0)
        assert transport.writes == [b"first;second;"]
        lone, lone_transport = _corking_channel(pipelined=False)
        lone.write(b"only;")
        assert lone_transport.writes == [b"only;"], "nothing pipelined: nothing held"
        lone.write(b"L" * (CORK_BYTES + 1))
        assert lone_transport.writes == [b"only;", b"L" * (CORK_BYTES + 1)]

    asyncio.run(main())


def test_corked_responses_are_bounded_in_count_and_bytes_and_a_large_one_goes_out_at_once_after_them():
    async def main() -> None:
        channel, transport = _corking_channel()
        for i in range(CORK_FRAMES):
            channel.write(b"%d;" % i)
        assert transport.writes == [b"".join(b"%d;" % i for i in range(CORK_FRAMES))], "sent at the count bound"
        transport.writes.clear()
        channel.write(b"small;")
        channel.write(b"L" * (CORK_BYTES + 1))
        assert transport.writes == [b"small;", b"L" * (CORK_BYTES + 1)], "what was held goes first"
        transport.writes.clear()
        half = b"h" * (CORK_BYTES // 2 + 1)
        channel.write(half)
        channel.write(half)
        assert transport.writes == [half], "the byte bound: the first is sent before the second is held"
        await asyncio.sleep(0)
        assert transport.writes == [half, half]

    asyncio.run(main())


def test_closing_a_channel_sends_what_it_held_first_and_a_closed_one_refuses_writes():
    async def main() -> None:
        channel, transport = _corking_channel()
        channel.write(b"last words")
        channel.close()
        assert transport.writes == [b"last words"] and transport.closed
        with pytest.raises(ConnectionResetError):
            channel.write(b"more")

    asyncio.run(main())


def test_the_read_buffer_grows_while_reads_fill_it_and_holds_at_most_its_largest_unread():
    """A client pipelining more than the read buffer holds, read as the transport reads:
    each read fills all the buffer offers. The buffer doubles after each full read, so the
    reads get larger, until it holds READ_BUFFER_MAX_BYTES; then, none of it taken, reading
    pauses. The frames come out intact, in order, and taking one resumes reading."""

    async def main() -> None:
        channel, transport = Channel(), _Transport()
        channel.connection_made(transport)
        bodies = [bytes([i % 251]) * 1000 + b"%06d" % i for i in range(400)]  # ~400 KB in all
        stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
        reads, pos = [], 0
        while not transport.paused and pos < len(stream):
            reads.append(_receive(channel, stream[pos:]))
            pos += reads[-1]
        assert reads == [READ_BUFFER_BYTES, READ_BUFFER_BYTES, 2 * READ_BUFFER_BYTES]
        assert pos == READ_BUFFER_MAX_BYTES, "at most the largest buffer is read ahead of the broker"
        got = [bytes(await channel.read_body(await channel.read_size(1.0), 1.0))]
        assert not transport.paused, "taking a frame resumes reading"
        while len(got) < len(bodies):
            if pos < len(stream):
                pos += _receive(channel, stream[pos:])
            got.append(bytes(await channel.read_body(await channel.read_size(1.0), 1.0)))
        assert got == bodies

    asyncio.run(main())


def test_a_client_sending_little_at_a_time_or_frames_larger_than_the_buffer_keeps_the_first_one():
    """Reads that never fill the buffer never grow it: a connection of small requests
    holds READ_BUFFER_BYTES however long it lives. Nor does a frame larger than the
    buffer, which fills it but is read into a body of its own."""

    async def main() -> None:
        channel, transport = Channel(), _Transport()
        channel.connection_made(transport)
        frame = (100).to_bytes(4, "big") + b"x" * 100
        for _ in range(2000):  # 200 KB in all, one small request at a time
            offered = channel.get_buffer(-1)
            assert len(offered) == READ_BUFFER_BYTES
            offered[: len(frame)] = frame
            channel.buffer_updated(len(frame))
            assert await channel.read_body(await channel.read_size(1.0), 1.0) == b"x" * 100
        big = bytes(range(256)) * 1200  # 300 KB
        stream = len(big).to_bytes(4, "big") + big
        offered = channel.get_buffer(-1)
        assert len(offered) == READ_BUFFER_BYTES
        offered[:] = stream[:READ_BUFFER_BYTES]
        channel.buffer_updated(READ_BUFFER_BYTES)
        reading = asyncio.ensure_future(channel.read_body(await channel.read_size(1.0), 1.0))
        await asyncio.sleep(0)
        pos = READ_BUFFER_BYTES
        while pos < len(stream):  # the rest goes straight into the body
            pos += _receive(channel, stream[pos:])
        assert bytes(await reading) == big
        assert len(channel.get_buffer(-1)) == READ_BUFFER_BYTES, "the read buffer did not grow"

    asyncio.run(main())


def test_frames_taken_without_waiting_are_those_the_waiting_reads_return_at_every_cut():
    """The server asks ``size_now``/``body_now`` first and awaits ``read_size``/``read_body``
    only when they answer None: over a stream of pipelined frames cut at every byte, the
    frames taken that way are the stream's frames, in order, and an answer of None takes
    nothing."""
    bodies = [b"a" * 5, b"", b"b" * 300, bytes(range(7))]
    stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)

    async def read_all(cut: int) -> tuple[list[bytes], int]:
        channel = Channel()
        channel.connection_made(_Transport())
        _receive(channel, stream[:cut])
        got, at_once = [], 0
        loop = asyncio.get_running_loop()

        def arrive(rest: bytes) -> None:  # as a transport reads: as much as offered, each turn
            if rest:
                loop.call_soon(arrive, rest[_receive(channel, rest) :])

        loop.call_soon(arrive, stream[cut:])
        while len(got) < len(bodies):
            size = channel.size_now()
            body = channel.body_now(size) if size is not None else None
            if body is not None:
                at_once += 1
            else:
                size = size if size is not None else await channel.read_size(1.0)
                body = await channel.read_body(size, 1.0)
            got.append(bytes(body))
        return got, at_once

    for cut in range(len(stream) + 1):
        got, at_once = asyncio.run(read_all(cut))
        assert got == bodies, f"cut at {cut}"
        frames_before_cut = sum(1 for end in _frame_ends(bodies) if end <= cut)
        assert at_once >= frames_before_cut, f"cut at {cut}: a buffered frame was waited for"

    async def nothing_taken() -> None:
        channel = Channel()
        channel.connection_made(_Transport())
        _receive(channel, b"\x00\x00\x00\x05ab")
        assert channel.size_now() == 5 and channel.body_now(5) is None, "three of five bytes: no body yet"
        _receive(channel, b"cde")
        assert channel.body_now(5) == b"abcde" and channel.size_now() is None

    asyncio.run(nothing_taken())


def _frame_ends(bodies: list[bytes]) -> list[int]:
    ends, at = [], 0
    for body in bodies:
        at += 4 + len(body)
        ends.append(at)
    return ends
