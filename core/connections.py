"""What bounds the broker's connections and the memory their requests hold, with Kafka's
settings (Kafka's ``ConnectionQuotas`` and the request memory pool of its SocketServer).

- ``max.connections`` (and ``listener.name.<l>.max.connections``): while the limit is
  reached, the listener accepts nothing more; new clients wait in the kernel's backlog, as
  Kafka's acceptor blocks, and are accepted as connections close.
- ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
  (``host:count,...``): a connection over its address's limit is closed at once.
- ``queued.max.requests`` and ``queued.max.request.bytes`` (-1: no bound): requests read
  from their sockets and not yet answered, broker-wide. Before a request's body is read,
  its size is admitted; while the broker holds that many requests, or their bytes reach
  the bound, no connection reads another body until one is answered (a request is
  admitted whenever the bytes held are below the bound, as Kafka's non-strict pool does,
  so one request larger than the bound still gets through).
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Mapping
from typing import Any

from .config import listener_value, parse_ip_overrides


class ConnectionQuotas:
    """Open connections per listener, per address and in all; one per broker."""

    def __init__(self, config: Mapping[str, Any], listeners: list[str]):
        self.max_total: int = config["max.connections"]
        self.max_per_listener = {name: listener_value(config, name, "max.connections") for name in listeners}
        self.max_per_ip: int = config["max.connections.per.ip"]
        self.ip_overrides = parse_ip_overrides(config["max.connections.per.ip.overrides"])
        self.total = 0
        self.per_listener: collections.Counter[str] = collections.Counter()
        self.per_ip: collections.Counter[str] = collections.Counter()
        self._freed = asyncio.Event()

    def _full(self, listener: str) -> bool:
        return self.total >= self.max_total or self.per_listener[listener] >= self.max_per_listener[listener]

    async def wait_for_room(self, listener: str) -> None:
        """Return once ``listener`` may accept another connection."""
        while self._full(listener):
            self._freed.clear()
            await self._freed.wait()

    def admit(self, listener: str, ip: str) -> bool:
        """Count a new connection from ``ip``; False (not counted) when its address is at its limit."""
        if self.per_ip[ip] >= self.ip_overrides.get(ip, self.max_per_ip):
            return False
        self.total += 1
        self.per_listener[listener] += 1
        self.per_ip[ip] += 1
        return True

    def release(self, listener: str, ip: str) -> None:
        self.total -= 1
        self.per_listener[listener] -= 1
        self.per_ip[ip] -= 1
        if not self.per_ip[ip]:
            del self.per_ip[ip]
        self._freed.set()


class RequestQueue:
    """Requests read and not yet answered, broker-wide: ``queued.max.requests`` of them, and
    while ``queued.max.request.bytes`` (if > 0) is not exceeded."""

    def __init__(self, max_requests: int, max_bytes: int):
        self.max_requests = max_requests
        self.max_bytes = max_bytes
        self.requests = 0
        self.bytes = 0
        self._freed = asyncio.Event()

    def _full(self) -> bool:
        return self.requests >= self.max_requests or (self.max_bytes > 0 and self.bytes >= self.max_bytes)

    def try_admit(self, size: int) -> bool:
        """:meth:`admit` where there is room now (True), without a coroutine; else False."""
        if self._full():
            return False
        self.requests += 1
        self.bytes += size
        return True

    async def admit(self, size: int) -> None:
        while self._full():
            self._freed.clear()
            await self._freed.wait()
        self.requests += 1
        self.bytes += size

    def release(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        self._freed.set()
