"""Fetch answered with file regions (sendfile) instead of bytes, over raw sockets.

The region path must put on the wire exactly what the bytes path does, on plaintext and
TLS listeners; a segment deleted between the read and the send still sends what was read;
a file truncated below a region aborts the connection instead of sending a short frame;
a region larger than the socket takes waits for the client, and a client that stops
reading is closed as idle, on asyncio's loop and uvloop; small reads stay bytes; every
region is closed once its response is sent or dropped.
"""

from __future__ import annotations

import os
import time

import attrs
import pytest
from brokkr.core import file_region, responses
from brokkr.core.client import RawClient
from brokkr.core.file_region import FileRegion
from brokkr.core.log import Capability
from brokkr.core.protocol.frames import request_spec
from brokkr.core.responses import ResponseParts

from tests.integration.conftest import aio_consume, ck_consume, ck_flush, ck_producer, kp_consume
from tests.test_listeners_and_tls import address, tls_client
from tests.tls_certs import make_tls
from tests.wire import FETCH, METADATA, PRODUCE, batch, metadata_body, produce_body

TOPIC = "regions"
PARTITIONS = 3
BATCHES = 12
VERSIONS = (4, 7, 11, 12, 13, 16, 17)


def batch_records(i: int) -> int:
    return 1 + i % 4


def fill(bootstrap: str) -> None:
    """BATCHES batches of growing values into every partition."""
    with RawClient(bootstrap) as c:
        c.request(METADATA, 12, metadata_body(TOPIC))
        for p in range(PARTITIONS):
            for i in range(BATCHES):
                body = produce_body(TOPIC, batch(batch_records(i), value=b"v" * (40 * i)), partition=p)
                [t] = c.request(PRODUCE, 9, body).responses
                assert t.partition_responses[0].error_code == 0


def answer_bytes(broker, monkeypatch) -> None:
    """From now on the storage answers bytes, as one without Capability.READ_REGIONS (the
    memory one) does: its partitions no longer know it has them."""
    for p in broker.broker.topics[TOPIC].local_partitions():
        caps = p.capabilities
        without = attrs.evolve(caps, declared=caps.declared & ~Capability.READ_REGIONS, read_regions=False)
        monkeypatch.setattr(p, "capabilities", without)


def fetch_body(topic_id, offsets, partition_max_bytes: int, **kwargs):
    spec = request_spec(FETCH)
    parts = [
        spec.struct("FetchPartition")(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
        for p, o in enumerate(offsets)
    ]
    topic = spec.struct("FetchTopic")(topic=TOPIC, topic_id=topic_id, partitions=parts)
    values = {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 50 << 20, **kwargs}
    return spec.cls(topics=[topic], **values)


def fetches(c: RawClient, topic_id) -> list[bytes]:
    """The raw response frames of fetches in many versions, from several offsets, with
    partition limits that cut after one batch (KIP-74), mid-log, or not at all."""
    frames = []
    for version in VERSIONS:
        for offsets in ((0, 0, 0), (3, 9, 20), (30, 0, 5)):
            for limit in (1, 700, 1 << 20):
                c.send(
                    FETCH, version, fetch_body(topic_id, offsets, limit, max_bytes=3000 if limit == 700 else 50 << 20)
                )
                frames.append(c.receive_frame())
    c.request(METADATA, 12, metadata_body(TOPIC))  # answered after the last fetch's send finished
    return frames


def _record_regions(monkeypatch) -> list[FileRegion]:
    made: list[FileRegion] = []
    original = FileRegion.of.__func__

    def of(cls, *args):
        region = original(cls, *args)
        made.append(region)
        return region

    monkeypatch.setattr(FileRegion, "of", classmethod(of))
    return made


@pytest.fixture
def regions(monkeypatch) -> list[FileRegion]:
    """Every region the storage hands out during the test; every read is one, however
    small (the storage answers reads under ``file_region.MIN_BYTES`` as bytes otherwise)."""
    monkeypatch.setattr(file_region, "MIN_BYTES", 1)
    return _record_regions(monkeypatch)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return make_tls(tmp_path_factory.mktemp("tls"))


def both_listeners(tls, **more) -> dict:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "ssl.keystore.location": str(tls.server_pem),
        "ssl.truststore.location": str(tls.ca_pem),
        "num.partitions": PARTITIONS,
        **more,
    }


def topic_id(broker):
    return broker.broker.topics[TOPIC].topic_id


def test_regions_put_on_the_wire_what_the_bytes_path_does(brokkr_broker_factory, regions, monkeypatch):
    broker = brokkr_broker_factory({"num.partitions": PARTITIONS, "log.segment.bytes": 2048})
    fill(broker.bootstrap_servers)
    assert len(broker.broker.partition(TOPIC, 0).log.segments()) > 3
    with RawClient(broker.bootstrap_servers) as c:
        sent = fetches(c, topic_id(broker))
    assert len(regions) > 2 * len(sent)
    assert all(r.closed for r in regions)
    answer_bytes(broker, monkeypatch)
    with RawClient(broker.bootstrap_servers) as c:
        expected = fetches(c, topic_id(broker))
    assert max(len(f) for f in expected) > 2 * 2048  # a segment of each partition
    for i, (got, want) in enumerate(zip(sent, expected, strict=True)):
        assert got == want, f"fetch {i}"


def test_a_tls_listener_sends_the_regions_bytes(brokkr_broker_factory, tls, regions):
    broker = brokkr_broker_factory(both_listeners(tls, **{"log.segment.bytes": 2048}))
    fill(address(broker, "PLAINTEXT"))
    with RawClient(address(broker, "PLAINTEXT")) as c:
        plain = fetches(c, topic_id(broker))
    made = len(regions)
    with tls_client(address(broker, "SSL"), tls.ca_pem) as c:
        assert fetches(c, topic_id(broker)) == plain
    assert len(regions) > 2 * made - 10 and all(r.closed for r in regions)


def test_segments_deleted_before_the_send_still_send_what_was_read(brokkr_broker_factory, regions, monkeypatch):
    """Retention (or DeleteRecords, or a compaction swap) closes and unlinks a segment while
    its region waits to be sent: the region's own descriptor still reads that file."""
    broker = brokkr_broker_factory({"num.partitions": PARTITIONS, "log.segment.bytes": 2048})
    fill(broker.bootstrap_servers)
    body = fetch_body(topic_id(broker), (0, 0, 0), 1 << 20)
    with RawClient(broker.bootstrap_servers) as c:
        c.send(FETCH, 12, body)
        expected = c.receive_frame()
    logs = [broker.broker.partition(TOPIC, p).log for p in range(PARTITIONS)]
    first_files = [log.segments()[0].path for log in logs]
    send = ResponseParts.send

    async def send_after_retention(self, channel, idle_s):
        for log in logs:
            log.delete_before(log.log_end_offset)  # every segment but the active one goes
        return await send(self, channel, idle_s)

    monkeypatch.setattr(ResponseParts, "send", send_after_retention)
    with RawClient(broker.bootstrap_servers) as c:
        c.send(FETCH, 12, body)
        assert c.receive_frame() == expected
        c.request(METADATA, 12, metadata_body(TOPIC))
    assert all(len(log.segments()) == 1 and log.log_start_offset > 0 for log in logs)
    assert not any(os.path.exists(path) for path in first_files)
    assert regions and all(r.closed for r in regions)


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SSL"])
def test_a_file_truncated_below_a_region_aborts_the_connection(
    brokkr_broker_factory, tls, regions, monkeypatch, listener
):
    """A follower truncating its log in place shortens the file a region was read from:
    the frame's size was promised, so the connection closes mid-frame (the client fetches
    again) rather than a short frame running into the next response."""
    broker = brokkr_broker_factory(both_listeners(tls))
    fill(address(broker, "PLAINTEXT"))
    log = broker.broker.partition(TOPIC, 1).log
    boundary = sum(batch_records(i) for i in range(6))
    send = ResponseParts.send

    async def send_after_truncation(self, channel, idle_s):
        log.truncate_to(boundary)
        return await send(self, channel, idle_s)

    monkeypatch.setattr(ResponseParts, "send", send_after_truncation)
    connect = (lambda a: tls_client(a, tls.ca_pem)) if listener == "SSL" else RawClient
    with connect(address(broker, listener)) as c:
        c.send(FETCH, 12, fetch_body(topic_id(broker), (0, 0, 0), 1 << 20))
        received = b""
        while chunk := _recv(c.sock):
            received += chunk
        if listener == "PLAINTEXT":  # sendfile: the bytes before the region and what the file still held went out
            assert len(received) - 4 < int.from_bytes(received[:4], "big"), "never a whole frame"
        else:  # TLS: the region is read before anything of the frame is written
            assert received == b""
    assert regions and all(r.closed for r in regions)
    monkeypatch.setattr(ResponseParts, "send", send)
    with RawClient(address(broker, "PLAINTEXT")) as c:  # the broker serves on
        response = c.request(FETCH, 12, fetch_body(topic_id(broker), (0, 0, 0), 1 << 20))
        assert all(p.error_code == 0 and p.records for p in response.responses[0].partitions)


def _recv(sock) -> bytes:
    """The next bytes, b"" once the broker has closed; a stalled connection times out."""
    try:
        return sock.recv(1 << 16)
    except ConnectionResetError:
        return b""


@pytest.mark.brokkr_config(num_partitions=PARTITIONS)
def test_a_waiting_fetch_closes_the_regions_of_its_first_read(brokkr_broker, regions):
    """min_bytes not met: the first read's regions are dropped, the fetch waits, reads again."""
    fill(brokkr_broker.bootstrap_servers)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        body = fetch_body(topic_id(brokkr_broker), (0, 0, 0), 1 << 20, min_bytes=10 << 20, max_wait_ms=200)
        response = c.request(FETCH, 12, body)
        assert all(p.records for p in response.responses[0].partitions)
        c.request(METADATA, 12, metadata_body(TOPIC))
    assert len(regions) == 2 * PARTITIONS and all(r.closed for r in regions)


@pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning")  # kafka-python
@pytest.mark.brokkr_config(log_segment_bytes=64 << 10, num_partitions=2)
def test_real_consumers_read_everything_from_regions(brokkr_broker, regions):
    """librdkafka, kafka-python and aiokafka, default settings: every record, in order,
    across many segments, over both partitions; no region is left open."""
    bootstrap = brokkr_broker.bootstrap_servers
    producer = ck_producer(bootstrap, **{"batch.num.messages": 200})  # many batches, so many segments
    values = {p: [b"%d-%06d-" % (p, i) + b"x" * 90 for i in range(6000)] for p in range(2)}
    for p, vs in values.items():
        for v in vs:
            producer.produce("consumed", v, partition=p)
            producer.poll(0)
    ck_flush(producer)
    assert len(brokkr_broker.broker.partition("consumed", 0).log.segments()) > 5
    for consume in (ck_consume, kp_consume, aio_consume):
        for p, vs in values.items():
            got = consume(bootstrap, "consumed", len(vs), partition=p, timeout=30)
            assert [r.value for r in got] == vs, consume.__name__
            assert [r.offset for r in got] == list(range(len(vs)))
    assert len(regions) > 10
    with RawClient(bootstrap) as c:  # answered once the clients' last fetches are done
        c.request(METADATA, 12, metadata_body("consumed"))
    assert all(r.closed for r in regions)


@pytest.fixture(params=["asyncio", "uvloop"])
def loop_factory(request):
    """The broker's event loop: asyncio's, or uvloop's (``brokkr serve``'s where installed)."""
    if request.param == "asyncio":
        return None
    return pytest.importorskip("uvloop").new_event_loop


def large_partition(broker, batches: int = 12) -> bytes:
    """``batches`` batches of about 1 MB into partition 0 (12 MB: more than a socket's
    buffers hold); the raw Fetch v12 body that asks for all of them."""
    with RawClient(broker.bootstrap_servers) as c:
        c.request(METADATA, 12, metadata_body(TOPIC))
        for _ in range(batches):
            body = produce_body(TOPIC, batch(1000, value=b"m" * 1000), partition=0)
            assert c.request(PRODUCE, 9, body).responses[0].partition_responses[0].error_code == 0
    return fetch_body(topic_id(broker), (0,), 64 << 20, max_bytes=64 << 20)


def test_a_region_larger_than_the_socket_takes_waits_for_the_client_and_goes_whole(
    brokkr_broker_factory, regions, monkeypatch, loop_factory
):
    """The client reads nothing for a while: the sendfile fills the socket, waits for the
    socket to take more, and the frame arrives whole and as the bytes path sends it."""
    broker = brokkr_broker_factory({"message.max.bytes": 2 << 20}, loop_factory=loop_factory)
    body = large_partition(broker)
    waits = []
    writable = responses._writable

    async def counted(fd, idle_s):
        waits.append(fd)
        return await writable(fd, idle_s)

    monkeypatch.setattr(responses, "_writable", counted)
    with RawClient(broker.bootstrap_servers) as c:
        c.send(FETCH, 12, body)
        time.sleep(0.5)
        sent = c.receive_frame()
    assert waits, "the socket filled and the send waited for it"
    assert len(sent) > 12_000_000
    answer_bytes(broker, monkeypatch)
    with RawClient(broker.bootstrap_servers) as c:
        c.send(FETCH, 12, body)
        assert c.receive_frame() == sent
    assert regions and all(r.closed for r in regions)


def test_a_client_that_stops_reading_mid_region_is_closed_as_idle(brokkr_broker_factory, regions, loop_factory):
    broker = brokkr_broker_factory(
        {"message.max.bytes": 2 << 20, "connections.max.idle.ms": 1000}, loop_factory=loop_factory
    )
    body = large_partition(broker)
    with RawClient(broker.bootstrap_servers) as c:  # 12 MB: more than the socket buffers hold
        c.send(FETCH, 12, body)
        deadline = time.monotonic() + 10
        while not (regions and all(r.closed for r in regions)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert regions and all(r.closed for r in regions), "the send gave up and closed its regions"
        received = b""
        while chunk := _recv(c.sock):
            received += chunk
        assert 4 <= len(received) < 12_000_000, "closed mid-frame"
    with RawClient(broker.bootstrap_servers) as c:  # the broker serves on
        assert c.request(METADATA, 12, metadata_body(TOPIC)).topics[0].error_code == 0


@pytest.mark.brokkr_config(num_partitions=PARTITIONS)
def test_small_reads_are_answered_as_bytes(brokkr_broker, monkeypatch):
    """Under ``file_region.MIN_BYTES`` a copy costs less than a descriptor and a sendfile."""
    made = _record_regions(monkeypatch)
    fill(brokkr_broker.bootstrap_servers)
    with RawClient(brokkr_broker.bootstrap_servers) as c:
        response = c.request(FETCH, 12, fetch_body(topic_id(brokkr_broker), (0, 0, 0), 1 << 20))
    assert all(p.error_code == 0 and p.records for p in response.responses[0].partitions)
    assert made == []
