"""The network layer: asyncio listeners and connections (Kafka's SocketServer).

Each connection reads one frame at a time, bounded by ``socket.request.max.bytes``
*before* the body is read, and hands it to
:func:`brokkr.core.dispatch.handle_frame_with_throttle`. Requests on one connection are
processed in order and their responses written in that order (Kafka mutes a channel while
a request is in flight); many connections proceed concurrently. A throttled response
(quotas) is sent at once, then its connection is not read for the throttle time
(KIP-219). A connection that moves no byte for ``connections.max.idle.ms`` (idle, stalled
mid-frame, or not reading its response) is closed; one still sending or taking bytes is
not. Anything that goes wrong on one connection closes that connection only.

TLS listeners (SSL, SASL_SSL) complete the TLS handshake before the connection is
served. On PLAINTEXT and SSL listeners ``brokkr_authenticate`` gives the connection its
principal; on SASL listeners the connection's :class:`~brokkr.core.authenticator.SaslServerAuthenticator`
sees every frame until the client has authenticated (and any re-authentication later).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
from typing import TYPE_CHECKING, Any

import attrs

from .authenticator import SaslListener, SaslServerAuthenticator
from .channel import Channel, FramePool
from .connections import ConnectionQuotas, RequestQueue
from .context import ConnectionInfo
from .dispatch import handle_frame_with_throttle
from .errors import CloseConnection, CorruptRequest
from .listeners import Listener, parse_listeners, resolve_listeners
from .responses import ResponseParts
from .sasl import collect_mechanisms
from .tls import server_context

if TYPE_CHECKING:
    from .broker import Broker

log = logging.getLogger("brokkr.server")

# Connections the kernel completes for a listener while the broker is not accepting
# (max.connections reached), as Kafka's Acceptor leaves them in its backlog.
BACKLOG = 128
# How long a connection closed after an authentication failure waits for the client to close first.
CLOSE_GRACE_S = 0.1


__all__ = ["Listener", "Server", "parse_listeners"]


class Server:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._sockets: list[socket.socket] = []
        self._acceptors: list[asyncio.Task] = []
        self._connections: set[asyncio.Task] = set()
        self._ids = itertools.count()
        self._sasl: dict[str, SaslListener] = {}
        self._tls: dict[str, Any] = {}
        self._listeners: list[Listener] = []
        self.quotas: ConnectionQuotas | None = None
        self.requests = RequestQueue(broker.config["queued.max.requests"], broker.config["queued.max.request.bytes"])
        self.frames = FramePool()

    def bind(self, listeners: list[Listener]) -> list[Listener]:
        """Load the listeners' TLS and SASL settings and take their ports (port 0: a free
        one), not listening yet; returns the listeners with the ports taken. A broker on a
        cluster registers these, and calls :meth:`listen` once it has joined."""
        config = self.broker.config
        listeners = resolve_listeners(listeners, config)
        mechanisms = collect_mechanisms(self.broker.hook, self.broker)
        self._sasl = {
            lst.name: SaslListener.from_config(config, lst.name, mechanisms) for lst in listeners if lst.uses_sasl
        }
        self._tls = {lst.name: server_context(config, lst.name) for lst in listeners if lst.uses_tls}
        self.quotas = ConnectionQuotas(config, [lst.name for lst in listeners])
        self._listeners = listeners
        bound = []
        try:
            for listener in listeners:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as socket.create_server
                address = (listener.host or "", listener.port)
                try:
                    sock.bind(address)
                except OSError as err:  # named as socket.create_server names it
                    message = f"{err.strerror} (while attempting to bind on address {address!r})"
                    raise OSError(err.errno, message) from None
                sock.setblocking(False)
                port = sock.getsockname()[1]
                host = listener.host if listener.host not in ("", "0.0.0.0", "::") else socket.getfqdn()
                bound.append(attrs.evolve(listener, host=host, port=port))
        except BaseException:
            for sock in self._sockets:
                sock.close()
            raise
        return bound

    def listen(self) -> None:
        """Open the bound listeners to clients: from here connections are accepted."""
        for listener, sock in zip(self._listeners, self._sockets):
            sock.listen(BACKLOG)
            task = asyncio.create_task(
                self._accept(listener, sock, self._tls.get(listener.name)), name=f"accept-{listener.name}"
            )
            self._acceptors.append(task)

    async def _accept(self, listener: Listener, sock: socket.socket, ssl: Any) -> None:
        """Kafka's Acceptor: at ``max.connections`` accept nothing (clients wait in the
        backlog); over ``max.connections.per.ip`` close the new connection at once."""
        assert self.quotas is not None
        loop = asyncio.get_running_loop()
        while True:
            await self.quotas.wait_for_room(listener.name)
            try:
                conn, peer = await loop.sock_accept(sock)
            except OSError as exc:  # e.g. out of file descriptors: try again shortly
                log.warning("%s: accepting failed: %s", listener.name, exc)
                await asyncio.sleep(0.1)
                continue
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                # As Kafka's Acceptor: responses leave at once. asyncio sets this only on
                # sockets whose protocol number says TCP, which accepted ones do not (uvloop does).
                try:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:  # already reset by the client
                    conn.close()
                    continue
            ip = str(peer[0])
            if not self.quotas.admit(listener.name, ip):
                log.info("%s: closing a connection from %s: max.connections.per.ip reached", listener.name, ip)
                conn.close()
                continue
            task = asyncio.create_task(self._open(listener, conn, ip, ssl))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _open(self, listener: Listener, conn: socket.socket, ip: str, ssl: Any) -> None:
        assert self.quotas is not None
        loop = asyncio.get_running_loop()
        try:
            channel = Channel()
            try:
                await loop.connect_accepted_socket(lambda: channel, conn, ssl=ssl)
            except (TimeoutError, OSError) as exc:  # e.g. a failed TLS handshake
                log.info("%s: connection from %s failed before its first request: %s", listener.name, ip, exc)
                conn.close()
                return
            await self._serve(listener, channel)
        finally:
            self.quotas.release(listener.name, ip)

    async def stop_accepting(self) -> None:
        for task in self._acceptors:
            task.cancel()
        for sock in self._sockets:
            sock.close()

    async def close_connections(self) -> None:
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=5)

    async def _serve(self, listener: Listener, channel: Channel) -> None:
        transport = channel.transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        conn = ConnectionInfo(
            connection_id=f"{listener.name}-{next(self._ids)}",
            listener=listener.name,
            security_protocol=listener.security_protocol,
            client_host=str(peer[0]),
            client_port=int(peer[1]),
            peer_certificate=transport.get_extra_info("peercert") or None,
        )
        log.debug("%s: connection from %s:%d", conn.connection_id, conn.client_host, conn.client_port)
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
                    # The common frame is buffered already and admitted at once: taken
                    # without a coroutine for each step (the awaits are for waiting).
                    size = channel.size_now()
                    if size is None:
                        size = await channel.read_size(idle_s)
                    if size < 0 or size > limit:
                        log.warning(
                            "%s: frame of %d bytes is outside [0, %s=%d]; closing",
                            conn.connection_id,
                            size,
                            limit_name,
                            limit,
                        )
                        return
                    # Waiting here is waiting for the broker, not the client: no idle timeout.
                    if not self.requests.try_admit(size):
                        await self.requests.admit(size)
                    try:
                        frame = channel.body_now(size)
                        if frame is None:
                            frame = await channel.read_body(size, idle_s, self.frames)
                        keep_open, throttle_ms = await self._answer(conn, sasl, principal, frame, channel, idle_s)
                        del frame
                    finally:
                        channel.release(self.frames)
                        self.requests.release(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                except TimeoutError:  # routine (a client gone quiet): DEBUG, as a connection's open and close
                    log.debug(
                        "%s: idle, stalled mid-frame or not reading its responses for connections.max.idle.ms; closing",
                        conn.connection_id,
                    )
                    return
                if not keep_open:
                    return
                if sasl is not None:
                    principal = sasl.principal
                if throttle_ms:  # KIP-219: answer at once, then read nothing more until the throttle time passes
                    await asyncio.sleep(throttle_ms / 1000)
        except (asyncio.CancelledError, ConnectionError):  # shutdown, or the client went away
            pass
        except Exception:
            log.exception("%s: unexpected error; closing the connection", conn.connection_id)
        finally:
            channel.close()
            log.debug("%s: closed", conn.connection_id)
            self.broker.hot.notify("brokkr_connection_closed", connection=conn, broker=self.broker)

    async def _answer(self, conn, sasl, principal, frame, channel: Channel, idle_s: float) -> tuple[bool, int]:
        """Answer one frame: (keep the connection open?, throttle time in ms). Raises
        TimeoutError when the response cannot be written within connections.max.idle.ms
        (``idle_s``)."""
        if sasl is not None:
            if sasl.intercepts(frame):
                outcome = await sasl.authenticate(frame)
                if outcome.response is not None:
                    channel.write(outcome.response)
                    await channel.drain(idle_s)
                if not outcome.keep_open and outcome.response is not None:
                    # Give the client a moment to read the final error and close first:
                    # some clients (kafka-python) drop data that arrives with the close.
                    await channel.drain_input(CLOSE_GRACE_S)
                return outcome.keep_open, 0
            if sasl.session_expired():
                log.info("%s: SASL session expired (connections.max.reauth.ms); closing", conn.connection_id)
                return False, 0
        try:
            response, throttle_ms = await handle_frame_with_throttle(self.broker, conn, principal, frame)
        except CloseConnection:
            return False, 0
        except CorruptRequest as exc:
            log.warning("%s: %s; closing the connection", conn.connection_id, exc)
            return False, 0
        if isinstance(response, ResponseParts):  # with file regions: closed when sent or failed
            await response.send(channel, idle_s)
        elif response is not None:
            channel.write(response)
            # The transport holds what is unsent; dropping our reference now means a failed
            # drain's traceback (kept in reference cycles until the next full collection)
            # does not keep a large response alive after its client is gone.
            del response
            if channel.blocked:  # a client that stops reading is closed like an idle one
                await channel.drain(idle_s)
        return True, throttle_ms
