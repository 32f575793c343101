"""A minimal blocking Kafka client that speaks raw frames with brokkr's own codecs: what
brokkr's command-line tools (``brokkr topics``, ``brokkr configs``, the console tools, ...)
and tests use to talk to a running broker. ``request(api_key, version, body)`` sends one
request and decodes its response; ``request_spec(key).cls`` builds bodies. Given a
:class:`~brokkr.core.client_config.ClientConfig`, it speaks TLS and SASL as the
listener expects."""

from __future__ import annotations

import socket
import time
from typing import Any

from .client_config import ClientConfig, login
from .errors import ConfigError
from .protocol.frames import decode_response, encode_request, request_spec

METADATA = 3


class RawClient:
    """A minimal blocking Kafka client speaking raw frames, for brokkr's tools and for tests
    of error paths and of plugins: ``request(api_key, version, body)`` sends one request
    and decodes its response with brokkr's own codecs (``request_spec(key).cls`` builds
    bodies). With a ClientConfig it re-authenticates before the broker's SASL session
    ends (KIP-368), between requests."""

    def __init__(
        self,
        bootstrap_servers: str,
        timeout: float = 10.0,
        client_id: str | None = "brokkr-raw",
        *,
        config: ClientConfig | None = None,
    ):
        """Connect to the first of ``bootstrap_servers`` (``host:port,...``) that answers;
        an OSError names each address tried. With ``config``: TLS and SASL as it says."""
        self.client_id = client_id
        self._next_id = 0
        self.config = config
        self._reauthenticate_at: float | None = None
        self.address, self.sock = _connect(bootstrap_servers, timeout)
        try:
            if config is not None and config.tls is not None:
                host = self.address.rpartition(":")[0].strip("[]")
                try:
                    self.sock = config.tls.wrap_socket(self.sock, server_hostname=host)
                except OSError as exc:
                    raise ConnectionError(f"TLS handshake with {self.address} failed: {exc}") from None
            if config is not None and config.sasl is not None:
                self._login()
        except BaseException:
            self.sock.close()
            raise

    def _login(self) -> None:
        assert self.config is not None and self.config.sasl is not None
        self._reauthenticate_at = None
        lifetime_ms = login(self, self.config.sasl)
        if lifetime_ms > 0:  # re-authenticate before the broker's session ends (KIP-368), as Kafka's clients do
            self._reauthenticate_at = time.monotonic() + lifetime_ms * 0.85 / 1000

    def send(self, api_key: int, version: int, body: Any, correlation_id: int | None = None) -> int:
        if correlation_id is None:
            self._next_id += 1
            correlation_id = self._next_id
        self.sock.sendall(encode_request(api_key, version, correlation_id, self.client_id, body))
        return correlation_id

    def receive_frame(self) -> bytes:
        size = int.from_bytes(self._exactly(4), "big", signed=True)
        return self._exactly(size)

    def receive(self, api_key: int, version: int) -> tuple[int, Any]:
        return decode_response(api_key, version, self.receive_frame())

    def request(self, api_key: int, version: int, body: Any) -> Any:
        if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            self._login()
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
                raise ConnectionError(f"connection closed by the broker at {self.address}")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Brokers:
    """A tool's connections to one cluster: the bootstrap connection, which answers
    Metadata, and one to each broker it names, opened on first use and kept; all with the
    same ClientConfig."""

    def __init__(self, bootstrap: str, client_id: str, config: ClientConfig | None = None, timeout: float = 30.0):
        self.bootstrap_servers, self.client_id, self.config, self.timeout = bootstrap, client_id, config, timeout
        self.bootstrap = self._open(bootstrap)
        self.addresses: dict[int, str] = {}  # node id -> host:port, from the latest Metadata
        self._nodes: dict[int, RawClient] = {}

    def _open(self, address: str) -> RawClient:
        return RawClient(address, self.timeout, self.client_id, config=self.config)

    def metadata(self, topics: list[str] | None, auto_create: bool = False) -> Any:
        """Metadata v12 of ``topics`` (None: all); reconnects once when the bootstrap
        connection was lost."""
        spec = request_spec(METADATA)
        wanted = None if topics is None else [spec.struct("MetadataRequestTopic")(name=t) for t in topics]
        body = spec.cls(topics=wanted, allow_auto_topic_creation=auto_create)
        try:
            response = self.bootstrap.request(METADATA, 12, body)
        except OSError:
            self.bootstrap.close()
            self.bootstrap = self._open(self.bootstrap_servers)
            response = self.bootstrap.request(METADATA, 12, body)
        for b in response.brokers:
            self.addresses[b.node_id] = f"[{b.host}]:{b.port}" if ":" in b.host else f"{b.host}:{b.port}"
        return response

    def node(self, node_id: int) -> RawClient:
        """The connection to broker ``node_id`` (named by the latest Metadata)."""
        if node_id not in self._nodes:
            self._nodes[node_id] = self._open(self.addresses[node_id])
        return self._nodes[node_id]

    def drop(self, node_id: int) -> None:
        """Close the connection to ``node_id`` (after an error on it); the next use reopens it."""
        client = self._nodes.pop(node_id, None)
        if client is not None:
            client.close()

    def close(self) -> None:
        for node_id in list(self._nodes):
            self.drop(node_id)
        self.bootstrap.close()

    def __enter__(self) -> Brokers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _connect(bootstrap_servers: str, timeout: float) -> tuple[str, socket.socket]:
    failures = []
    addresses = [a.strip() for a in bootstrap_servers.split(",") if a.strip()]
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--bootstrap-server {address!r} is not HOST:PORT")
        try:
            return address, socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        except OSError as exc:
            failures.append((address, exc))
    if not failures:
        raise ConfigError(f"no bootstrap server in {bootstrap_servers!r}")
    last = failures[-1][1]
    described = ", ".join(f"{a} ({e.strerror or e})" for a, e in failures)
    error = type(last)(f"cannot reach {described}")  # the same kind of OSError, naming each address
    error.errno = last.errno
    raise error
