"""The network layer: asyncio listeners and connections (Kafka's SocketServer).

Each connection reads one frame at a time, bounded by ``socket.request.max.bytes``
*before* the body is read, and hands it to :func:`brokkr.core.dispatch.handle_frame`.
Requests on one connection are processed in order and their responses written in that
order (Kafka mutes a channel while a request is in flight); many connections proceed
concurrently. A connection that is idle, or stalls mid-frame, for
``connections.max.idle.ms`` is closed. Anything that goes wrong on one connection closes
that connection only.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import TYPE_CHECKING

import attrs

from .context import ConnectionInfo
from .dispatch import handle_frame
from .errors import CloseConnection, ConfigError, CorruptRequest

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("brokkr.server")

SUPPORTED_PROTOCOLS = ("PLAINTEXT",)
# Stream buffer per connection: large enough that a typical 1 MiB produce frame is read
# without pausing and resuming the transport many times.
READ_BUFFER_BYTES = 1 << 20


@attrs.frozen
class Listener:
    name: str
    host: str
    port: int

    @property
    def security_protocol(self) -> str:
        return self.name


def parse_listeners(uris: list[str]) -> list[Listener]:
    """``PLAINTEXT://127.0.0.1:9092`` -> Listener("PLAINTEXT", "127.0.0.1", 9092)."""
    out = []
    for uri in uris:
        name, sep, address = uri.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ConfigError(f"listener {uri!r} is not of the form NAME://host:port")
        if name not in SUPPORTED_PROTOCOLS:
            raise ConfigError(f"listener {uri!r}: security protocol {name} is not supported yet")
        out.append(Listener(name, host.strip("[]"), int(port)))
    return out


class Server:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self._ids = itertools.count()

    async def start(self, listeners: list[Listener]) -> list[Listener]:
        bound = []
        for listener in listeners:
            server = await asyncio.start_server(
                lambda r, w, lst=listener: self._serve(lst, r, w),
                listener.host or None,
                listener.port,
                limit=READ_BUFFER_BYTES,
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            host = listener.host if listener.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
            bound.append(Listener(listener.name, host, port))
        return bound

    async def stop_accepting(self) -> None:
        for server in self._servers:
            server.close()

    async def close_connections(self) -> None:
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)
        for server in self._servers:
            await server.wait_closed()

    async def _serve(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        conn = ConnectionInfo(
            connection_id=f"{listener.name}-{next(self._ids)}",
            listener=listener.name,
            security_protocol=listener.security_protocol,
            client_host=str(peer[0]),
            client_port=int(peer[1]),
        )
        config = self.broker.config
        max_bytes = config["socket.request.max.bytes"]
        idle_s = config["connections.max.idle.ms"] / 1000
        try:
            principal = self.broker.hook.brokkr_authenticate(connection=conn, broker=self.broker)
            if principal is None:
                log.warning("%s: no plugin authenticated the connection; closing", conn.connection_id)
                return
            while True:
                try:
                    async with asyncio.timeout(idle_s):
                        head = await reader.readexactly(4)
                        size = int.from_bytes(head, "big", signed=True)
                        if size < 0 or size > max_bytes:
                            log.warning(
                                "%s: frame of %d bytes is outside [0, socket.request.max.bytes=%d]; closing",
                                conn.connection_id,
                                size,
                                max_bytes,
                            )
                            return
                        frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except TimeoutError:
                    log.info("%s: idle or stalled for connections.max.idle.ms; closing", conn.connection_id)
                    return
                try:
                    response = await handle_frame(self.broker, conn, principal, frame)
                except CloseConnection:
                    return
                except CorruptRequest as exc:
                    log.warning("%s: %s; closing the connection", conn.connection_id, exc)
                    return
                if response is not None:
                    writer.write(response)
                    await writer.drain()
        except (asyncio.CancelledError, ConnectionError):  # shutdown, or the client went away
            pass
        except Exception:
            log.exception("%s: unexpected error; closing the connection", conn.connection_id)
        finally:
            self._connections.discard(task)
            writer.close()
