"""brokkr's pytest plugin (entry point ``pytest11``): brokers for your tests.

Fixtures:

``brokkr_broker``
    A broker with the embedded defaults, on an ephemeral 127.0.0.1 port, started in a
    background thread for the test and stopped after it. ``brokkr_broker.bootstrap_servers``
    is what clients connect to.

``brokkr_broker_factory``
    ``brokkr_broker_factory(config=None, plugins=())`` starts further brokers with your
    settings and plugins (all stopped after the test).

Mark a test ``@pytest.mark.brokkr_config(key=value, ...)`` to pass settings to
``brokkr_broker`` (dots are written as underscores: ``num_partitions=3``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from .broker import BrokerThread

EPHEMERAL = "PLAINTEXT://127.0.0.1:0"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokkr_config(**settings): settings for the brokkr_broker fixture")


@pytest.fixture
def brokkr_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started: list[BrokerThread] = []

    def start(config: Mapping[str, Any] | None = None, plugins: tuple = (), **kwargs: Any) -> BrokerThread:
        values = {"listeners": EPHEMERAL, "log.dirs": str(tmp_path_factory.mktemp("brokkr-data"))}
        values.update(config or {})
        broker = BrokerThread(values, plugins, **kwargs).start()
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def brokkr_broker(request: pytest.FixtureRequest, brokkr_broker_factory: Any) -> BrokerThread:
    marker = request.node.get_closest_marker("brokkr_config")
    config = {k.replace("_", "."): v for k, v in (marker.kwargs if marker else {}).items()}
    return brokkr_broker_factory(config)


class RawClient:
    """A minimal blocking Kafka client speaking raw frames, for tests of error paths and
    of plugins: ``request(api_key, version, body)`` sends one request and decodes its
    response with brokkr's own codecs (``request_spec(key).cls`` builds bodies)."""

    def __init__(self, bootstrap_servers: str, timeout: float = 10.0, client_id: str | None = "brokkr-raw"):
        import socket

        host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._next_id = 0

    def send(self, api_key: int, version: int, body: Any, correlation_id: int | None = None) -> int:
        from .protocol.frames import encode_request

        if correlation_id is None:
            self._next_id += 1
            correlation_id = self._next_id
        self.sock.sendall(encode_request(api_key, version, correlation_id, self.client_id, body))
        return correlation_id

    def receive_frame(self) -> bytes:
        size = int.from_bytes(self._exactly(4), "big", signed=True)
        return self._exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        from .protocol.frames import decode_response

        return decode_response(api_key, version, self.receive_frame())

    def request(self, api_key: int, version: int, body: Any) -> Any:
        correlation_id = self.send(api_key, version, body)
        got, response = self.receive(api_key, version)
        assert got == correlation_id, f"correlation id {got} != {correlation_id}"
        return response

    def is_closed_by_peer(self) -> bool:
        """True when the broker has closed the connection (reads EOF or a reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
