"""Connections and the memory their requests hold are bounded with Kafka's settings:
max.connections (accepting waits), max.connections.per.ip and its overrides (closed at
once), queued.max.requests and queued.max.request.bytes (reading waits), and
connections.max.idle.ms for clients stalled mid-frame or not reading their responses."""

from __future__ import annotations

import socket
import struct
import sys
import time

import pytest
from brokkr.core.protocol.frames import encode_request, request_spec
from brokkr.core.testing import RawClient
from serve import Served
from wire import API_VERSIONS, FETCH, METADATA, PRODUCE, batch, fetch_body, metadata_body, produce_body

API_VERSIONS_REQ = request_spec(API_VERSIONS).cls()


def api_versions_frame(correlation_id: int = 1) -> bytes:
    return encode_request(API_VERSIONS, 0, correlation_id, "limits", API_VERSIONS_REQ)


def answered_within(sock: socket.socket, seconds: float) -> bool:
    """Whether a whole response frame arrives within ``seconds``."""
    sock.settimeout(seconds)
    try:
        size = struct.unpack(">i", _exactly(sock, 4))[0]
        _exactly(sock, size)
        return True
    except (TimeoutError, ConnectionError):
        return False


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    sock.settimeout(within)
    try:
        while True:
            if not sock.recv(1 << 20):
                return True
    except TimeoutError:
        return False
    except ConnectionError:
        return True


@pytest.mark.parametrize("setting", ["max.connections", "listener.name.plaintext.max.connections"])
def test_at_max_connections_new_clients_wait_until_one_leaves(brokkr_broker_factory, setting):
    broker = brokkr_broker_factory({setting: "3"})
    first = [connect(broker.bootstrap_servers) for _ in range(3)]
    for s in first:
        s.sendall(api_versions_frame())
        assert answered_within(s, 5)
    waiting = connect(broker.bootstrap_servers)  # the kernel completes it; the broker does not accept it
    waiting.sendall(api_versions_frame())
    assert not answered_within(waiting, 0.5)
    first[0].close()
    assert answered_within(waiting, 5), "accepted once a connection closed"
    for s in (*first[1:], waiting):
        s.close()


def test_max_connections_per_ip_closes_new_connections_and_overrides_raise_it(brokkr_broker_factory):
    broker = brokkr_broker_factory({"max.connections.per.ip": "2"})
    kept = [connect(broker.bootstrap_servers) for _ in range(2)]
    for s in kept:
        s.sendall(api_versions_frame())
        assert answered_within(s, 5)
    third = connect(broker.bootstrap_servers)
    assert closed_by_peer(third, 5)
    kept[0].close()
    time.sleep(0.2)
    again = connect(broker.bootstrap_servers)
    again.sendall(api_versions_frame())
    assert answered_within(again, 5), "room again once one left"
    for s in (*kept[1:], again, third):
        s.close()

    broker = brokkr_broker_factory({"max.connections.per.ip": "1", "max.connections.per.ip.overrides": "127.0.0.1:3"})
    three = [connect(broker.bootstrap_servers) for _ in range(3)]
    for s in three:
        s.sendall(api_versions_frame())
        assert answered_within(s, 5)
    assert closed_by_peer(connect(broker.bootstrap_servers), 5)


def test_queued_max_requests_holds_reading_until_a_request_is_answered(brokkr_broker_factory):
    broker = brokkr_broker_factory({"queued.max.requests": "1"})
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        c.send(FETCH, 12, fetch_body("t", max_wait_ms=1500, min_bytes=1))  # a long poll: one request held
        time.sleep(0.2)
        other = connect(broker.bootstrap_servers)
        other.sendall(api_versions_frame())
        start = time.monotonic()
        assert answered_within(other, 5)
        assert time.monotonic() - start > 1.0, "the second request waited for the long poll's answer"
        c.receive_frame()
        other.close()


def test_queued_max_request_bytes_and_a_frame_stalled_midway(brokkr_broker_factory):
    broker = brokkr_broker_factory({"queued.max.request.bytes": "1000", "connections.max.idle.ms": "1500"})
    stalled = connect(broker.bootstrap_servers)
    stalled.sendall(struct.pack(">i", 50_000) + b"\0" * 100)  # declares 50 kB, sends 100 bytes, stops
    time.sleep(0.2)
    other = connect(broker.bootstrap_servers)
    other.sendall(api_versions_frame())
    start = time.monotonic()
    assert answered_within(other, 10)
    assert time.monotonic() - start > 1.0, "held while the stalled frame's bytes were admitted"
    assert closed_by_peer(stalled, 5), "a frame stalled midway is closed after connections.max.idle.ms"
    other.close()


def test_clients_that_never_read_their_fetches_are_closed_and_their_memory_returns(tmp_path):
    served = Served(
        "--override",
        "listeners=PLAINTEXT://127.0.0.1:0",
        "--override",
        f"log.dirs={tmp_path / 'd'}",
        "--override",
        "connections.max.idle.ms=1000",
        cwd=tmp_path,
        program=(sys.executable, "-m", "brokkr.core.cli", "--log-level", "DEBUG"),  # idle closes: DEBUG
    )
    try:
        with RawClient(served.address) as c:
            assert c.request(METADATA, 12, metadata_body("big")).topics[0].error_code == 0
            for _ in range(40):  # 4 MB of records
                assert c.request(PRODUCE, 9, produce_body("big", batch(100, value=b"x" * 1000))).responses
        baseline = served.rss_mb()
        hogs = []
        for _ in range(10):
            s = connect(served.address)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            frame = encode_request(
                FETCH, 12, 1, "hog", fetch_body("big", max_bytes=8 << 20, partition_max_bytes=8 << 20)
            )
            s.sendall(frame * 20)  # pipelined, never read
            hogs.append(s)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and served.output().count("not reading its responses") < 10:
            time.sleep(0.2)
        assert served.output().count("not reading its responses") == 10, served.output()
        for s in hogs:
            s.close()
        time.sleep(0.5)
        with RawClient(served.address) as c:  # still serving
            assert c.request(METADATA, 12, metadata_body("big")).topics[0].error_code == 0
        assert served.rss_mb() - baseline < 50, "memory returns near its baseline once they are gone"
    finally:
        served.kill()


def test_other_clients_are_served_while_connections_stall(brokkr_broker_factory):
    broker = brokkr_broker_factory({"connections.max.idle.ms": "5000"})
    stalled = []
    for _ in range(10):
        s = connect(broker.bootstrap_servers)
        s.sendall(struct.pack(">i", 99_000_000) + b"\0" * 10_000)
        stalled.append(s)
    latencies = []
    with RawClient(broker.bootstrap_servers) as c:
        for _ in range(20):
            start = time.monotonic()
            c.request(
                API_VERSIONS, 3, request_spec(API_VERSIONS).cls(client_software_name="t", client_software_version="1")
            )
            latencies.append(time.monotonic() - start)
    assert max(latencies) < 0.5
    for s in stalled:
        s.close()


def test_memory_held_by_frames_stalled_midway_returns_when_their_clients_go(tmp_path):
    served = Served(
        "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}", cwd=tmp_path
    )
    try:
        baseline = served.rss_mb()
        stalled = []
        for _ in range(10):
            s = connect(served.address)
            s.sendall(struct.pack(">i", 99_000_000) + bytes(8 << 20))  # 8 MB of a 99 MB frame, then nothing
            stalled.append(s)
        time.sleep(1)
        held = served.rss_mb() - baseline
        assert held < 200, f"the broker holds what arrived, not what was declared: {held:.0f} MB"
        for s in stalled:
            s.close()
        time.sleep(1)
        with RawClient(served.address) as c:
            assert c.request(METADATA, 12, metadata_body("t")).topics[0].error_code == 0
        assert served.rss_mb() - baseline < 30, "and lets it go when they leave"
    finally:
        served.kill()


def test_a_frame_still_arriving_is_not_idle(brokkr_broker_factory):
    """Kafka's idle expiry counts bytes read as activity: a slow request that keeps
    arriving is answered, however long it takes in all."""
    broker = brokkr_broker_factory({"connections.max.idle.ms": "600"})
    s = connect(broker.bootstrap_servers)
    frame = api_versions_frame()
    s.sendall(frame[:4])
    for i in range(4, len(frame)):  # about 2.5 s in all, never 600 ms without a byte
        time.sleep(0.12)
        s.sendall(frame[i : i + 1])
    assert answered_within(s, 5)
    s.close()


def test_a_client_asking_more_often_than_the_idle_time_stays_open_and_is_closed_that_long_after_its_last_answer(
    brokkr_broker_factory,
):
    """The idle timer outlives each wait (one timer per connection, not one per request):
    a client that asks every 0.4 s for 2.4 s is never idle for connections.max.idle.ms
    (700 ms), though the timer armed at its first wait fires in the middle of a later
    one; once it stops asking, it is closed no sooner than 700 ms after its last answer."""
    broker = brokkr_broker_factory({"connections.max.idle.ms": "700"})
    s = connect(broker.bootstrap_servers)
    for i in range(6):
        s.sendall(api_versions_frame(i + 1))
        assert answered_within(s, 5), f"request {i + 1} not answered: closed as idle while active"
        time.sleep(0.4)
    time.sleep(0.2)  # 0.6 s since the last answer: not idle yet
    s.sendall(api_versions_frame(7))
    assert answered_within(s, 5)
    answered = time.monotonic()
    s.settimeout(10)
    assert s.recv(1) == b"", "closed by the broker"
    assert 0.6 <= time.monotonic() - answered < 5
    s.close()


def test_a_client_still_reading_a_large_response_is_not_idle(brokkr_broker_factory):
    """A response the client keeps taking is written to its end, however long it takes in
    all (the kernel's socket buffers hold its last few MB); only a client that takes nothing for
    connections.max.idle.ms is closed."""
    broker = brokkr_broker_factory({"connections.max.idle.ms": "1500"})
    with RawClient(broker.bootstrap_servers) as c:
        assert c.request(METADATA, 12, metadata_body("slow")).topics[0].error_code == 0
        for _ in range(200):  # 20 MB of records
            assert c.request(PRODUCE, 9, produce_body("slow", batch(100, value=b"x" * 1000))).responses
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = broker.bootstrap_servers.rsplit(":", 1)
    s.connect((host, int(port)))
    s.sendall(
        encode_request(FETCH, 12, 1, "slow", fetch_body("slow", max_bytes=32 << 20, partition_max_bytes=32 << 20))
    )
    size = struct.unpack(">i", _exactly(s, 4))[0]
    assert size > 18 << 20
    received = 0
    s.settimeout(5)
    while received < size:  # about 1 MB every 0.2 s: 4 s in all
        chunk = s.recv(min(size - received, 256 << 10))
        assert chunk, f"closed after {received} of {size} bytes"
        received += len(chunk)
        if received % (1 << 20) < len(chunk):
            time.sleep(0.2)
    s.sendall(api_versions_frame(2))
    assert answered_within(s, 5)
    s.close()
