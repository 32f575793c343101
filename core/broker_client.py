"""A broker's own asyncio client for requests to other brokers (follower fetches, the
transaction coordinator's markers and verifications): one connection, one request in
flight at a time (callers that share a client wait their turn), Kafka's framing and
brokkr's codecs."""

from __future__ import annotations

import asyncio
from typing import Any

from .errors import CorruptRequest
from .protocol.frames import decode_response, encode_request

#: The largest response frame accepted from another broker.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class BrokerClient:
    def __init__(self, host: str, port: int, client_id: str):
        self.host, self.port, self.client_id = host, port, client_id
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._next_id = 0
        self._turn = asyncio.Lock()  # one exchange at a time on the connection

    async def request(self, api_key: int, version: int, body: Any, timeout: float) -> Any:
        """Send one request and return its decoded response (OSError, asyncio.TimeoutError
        or CorruptRequest on failure: the connection is then closed and reopened next time).
        ``timeout`` bounds the exchange, after any wait for an earlier request's."""
        async with self._turn:
            try:
                return await asyncio.wait_for(self._exchange(api_key, version, body), timeout)
            except BaseException:
                self.close()
                raise

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        self._writer.write(encode_request(api_key, version, self._next_id, self.client_id, body))
        await self._writer.drain()
        size = int.from_bytes(await self._reader.readexactly(4), "big", signed=True)
        if not 0 <= size <= MAX_RESPONSE_BYTES:
            raise CorruptRequest(f"a response frame of {size} bytes from {self.host}:{self.port}")
        correlation_id, response = decode_response(api_key, version, await self._reader.readexactly(size))
        if correlation_id != self._next_id:
            raise CorruptRequest(f"correlation id {correlation_id} != {self._next_id}")
        return response

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class BrokerClients:
    """A client per other broker of the cluster, for one purpose (so that one kind of
    request never waits behind another): kept between requests, replaced when a broker's
    address changes."""

    def __init__(self, broker: Any, purpose: str):
        self.broker, self.purpose = broker, purpose
        self._clients: dict[int, BrokerClient] = {}

    def get(self, node_id: int) -> BrokerClient | None:
        """The client for live broker ``node_id`` (None when it is not registered)."""
        info = self.broker.replicas.membership.brokers().get(node_id)
        if info is None:
            return None
        host, port = info.endpoint(self.broker.listeners[0].name)
        client = self._clients.get(node_id)
        if client is None or (client.host, client.port) != (host, port):
            if client is not None:
                client.close()
            client = BrokerClient(host, port, f"broker-{self.broker.node_id}-{self.purpose}")
            self._clients[node_id] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
