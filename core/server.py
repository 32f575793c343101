"""The network layer: asyncio listeners and connections (Kafka's SocketServer).

Each connection reads one frame at a time, bounded by ``socket.request.max.bytes``
*before* the body is read, and hands it to
:func:`brokkr.core.dispatch.handle_frame_with_throttle`. Requests on one connection are
processed in order and their responses written in that order (Kafka mutes a channel while
a request is in flight); many connections proceed concurrently. A throttled response
(quotas) is sent at once, then its connection is not read for the throttle time
(KIP-219). A connection that is idle, or stalls mid-frame, for ``connections.max.idle.ms``
is closed. Anything that goes wrong on one connection closes that connection only.

TLS listeners (SSL, SASL_SSL) complete the TLS handshake before the connection is
served. On PLAINTEXT and SSL listeners ``brokkr_authenticate`` gives the connection its
principal; on SASL listeners the connection's :class:`~brokkr.core.authenticator.SaslServerAuthenticator`
sees every frame until the client has authenticated (and any re-authentication later).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from typing import TYPE_CHECKING

import attrs

from .authenticator import SaslListener, SaslServerAuthenticator
from .context import ConnectionInfo
from .dispatch import handle_frame_with_throttle
from .errors import CloseConnection, CorruptRequest
from .listeners import Listener, parse_listeners, resolve_listeners
from .sasl import collect_mechanisms
from .tls import server_context

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("brokkr.server")

# Stream buffer per connection: large enough that a typical 1 MiB produce frame is read
# without pausing and resuming the transport many times.
READ_BUFFER_BYTES = 1 << 20
# How long a connection closed after an authentication failure waits for the client to close first.
CLOSE_GRACE_S = 0.1


__all__ = ["Listener", "Server", "parse_listeners"]


async def _let_peer_close(reader: asyncio.StreamReader) -> None:
    """Before closing after a final error response, give the client a moment to read it
    and close first: some clients (kafka-python) drop data that arrives with the close."""
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(CLOSE_GRACE_S):
            while await reader.read(4096):
                pass


class Server:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        self._ids = itertools.count()
        self._sasl: dict[str, SaslListener] = {}

    async def start(self, listeners: list[Listener]) -> list[Listener]:
        config = self.broker.config
        listeners = resolve_listeners(listeners, config)
        mechanisms = collect_mechanisms(self.broker.hook, self.broker)
        self._sasl = {
            lst.name: SaslListener.from_config(config, lst.name, mechanisms) for lst in listeners if lst.uses_sasl
        }
        tls = {lst.name: server_context(config, lst.name) for lst in listeners if lst.uses_tls}
        bound = []
        for listener in listeners:
            server = await asyncio.start_server(
                lambda r, w, lst=listener: self._serve(lst, r, w),
                listener.host or None,
                listener.port,
                limit=READ_BUFFER_BYTES,
                ssl=tls.get(listener.name),
            )
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            host = listener.host if listener.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
            bound.append(attrs.evolve(listener, host=host, port=port))
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
            peer_certificate=writer.get_extra_info("peercert") or None,
        )
        config = self.broker.config
        max_bytes = config["socket.request.max.bytes"]
        idle_s = config["connections.max.idle.ms"] / 1000
        sasl_listener = self._sasl.get(listener.name)
        try:
            sasl = principal = None
            if sasl_listener is not None:
                sasl = SaslServerAuthenticator(self.broker, conn, sasl_listener)
            else:
                principal = self.broker.hook.brokkr_authenticate(connection=conn, broker=self.broker)
                if principal is None:
                    log.warning("%s: no plugin authenticated the connection; closing", conn.connection_id)
                    return
            while True:
                pre_auth = sasl is not None and sasl.authenticating
                limit, limit_name = (
                    (sasl.max_receive_size, "sasl.server.max.receive.size")
                    if pre_auth
                    else (max_bytes, "socket.request.max.bytes")
                )
                try:
                    async with asyncio.timeout(idle_s):
                        head = await reader.readexactly(4)
                        size = int.from_bytes(head, "big", signed=True)
                        if size < 0 or size > limit:
                            log.warning(
                                "%s: frame of %d bytes is outside [0, %s=%d]; closing",
                                conn.connection_id,
                                size,
                                limit_name,
                                limit,
                            )
                            return
                        frame = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except TimeoutError:
                    log.info("%s: idle or stalled for connections.max.idle.ms; closing", conn.connection_id)
                    return
                if sasl is not None:
                    if sasl.intercepts(frame):
                        outcome = await sasl.authenticate(frame)
                        if outcome.response is not None:
                            writer.write(outcome.response)
                            await writer.drain()
                        if not outcome.keep_open:
                            if outcome.response is not None:
                                await _let_peer_close(reader)
                            return
                        principal = sasl.principal
                        continue
                    if sasl.session_expired():
                        log.info("%s: SASL session expired (connections.max.reauth.ms); closing", conn.connection_id)
                        return
                try:
                    response, throttle_ms = await handle_frame_with_throttle(self.broker, conn, principal, frame)
                except CloseConnection:
                    return
                except CorruptRequest as exc:
                    log.warning("%s: %s; closing the connection", conn.connection_id, exc)
                    return
                if response is not None:
                    writer.write(response)
                    await writer.drain()
                if throttle_ms:  # KIP-219: answer at once, then read nothing more until the throttle time passes
                    await asyncio.sleep(throttle_ms / 1000)
        except (asyncio.CancelledError, ConnectionError):  # shutdown, or the client went away
            pass
        except Exception:
            log.exception("%s: unexpected error; closing the connection", conn.connection_id)
        finally:
            self._connections.discard(task)
            writer.close()
