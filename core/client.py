"""A minimal blocking Kafka client that speaks raw frames with brokkr's own codecs: what
brokkr's command-line tools (``brokkr topics``, ``brokkr configs``) and tests use to talk
to a running broker. ``request(api_key, version, body)`` sends one request and decodes its
response; ``request_spec(key).cls`` builds bodies."""

from __future__ import annotations

import socket
from typing import Any

from .protocol.frames import decode_response, encode_request


class RawClient:
    """A minimal blocking Kafka client speaking raw frames, for tests of error paths and
    of plugins: ``request(api_key, version, body)`` sends one request and decodes its
    response with brokkr's own codecs (``request_spec(key).cls`` builds bodies)."""

    def __init__(self, bootstrap_servers: str, timeout: float = 10.0, client_id: str | None = "brokkr-raw"):
        host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.client_id = client_id
        self._next_id = 0

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
