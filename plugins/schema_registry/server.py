"""The registry's HTTP listeners (``brokkr.schema.registry.listeners``).

Their sockets are bound while the broker starts (``brokkr_broker_starting``), before it
joins a cluster, so that the bound ports (``:0`` picks a free one) are known: ``urls``
lists them, and the first, with ``brokkr.schema.registry.host.name`` for a wildcard
host, is published as this broker's ``schema-registry`` service (``Broker.services``)
for other brokers to forward to. An ``https://`` listener takes the broker's TLS
settings (``ssl.*``, overridden by ``listener.name.schema_registry.ssl.*``; ``core/tls.py``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from urllib.parse import urlsplit

from aiohttp import web
from brokkr.core.errors import ConfigError
from brokkr.core.tls import server_context

from .api import SERVICE, BasicAuth, RegistryApi
from .store import SchemaRegistry

log = logging.getLogger("brokkr.schema_registry")

TLS_LISTENER = "SCHEMA_REGISTRY"


def parse_listener(text: str) -> tuple[str, str, int]:
    """``http://HOST:PORT`` or ``https://HOST:PORT`` -> (scheme, host, port)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        port = None
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or port is None or parts.path not in ("", "/"):
        raise ConfigError(f"brokkr.schema.registry.listeners: {text!r} is not http://HOST:PORT or https://HOST:PORT")
    return parts.scheme, parts.hostname or "", port


def uses_basic_auth(broker) -> bool:
    """``authentication.method``, by default BASIC where the broker authenticates SCRAM users."""
    method = broker.config["brokkr.schema.registry.authentication.method"]
    if method is not None:
        return method.upper() == "BASIC"
    scram = any(m.upper().startswith("SCRAM-") for m in broker.config["sasl.enabled.mechanisms"] or ())
    return scram and any(listener.uses_sasl for listener in broker.listeners)


class RegistryServer:
    def __init__(self, broker, registry: SchemaRegistry):
        self.broker = broker
        self.registry = registry
        config = broker.config
        self.listeners = [parse_listener(text) for text in config["brokkr.schema.registry.listeners"]]
        https = any(scheme == "https" for scheme, _, _ in self.listeners)
        self.tls = server_context(config, TLS_LISTENER) if https else None
        auth = BasicAuth(registry) if uses_basic_auth(broker) else None
        self.api = RegistryApi(registry, auth, config["brokkr.schema.registry.request.max.bytes"], https)
        self.sockets: list[tuple[str, socket.socket]] = []
        self.urls: list[str] = []
        self._runner: web.AppRunner | None = None

    def bind(self) -> None:
        """Take the listeners' ports (not accepting yet) and publish the first one's URL."""
        try:
            for scheme, host, port in self.listeners:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
                sock.setblocking(False)
                self.sockets.append((scheme, sock))
                bound = sock.getsockname()[1]
                shown = f"[{host}]" if ":" in host else host
                self.urls.append(f"{scheme}://{shown or '0.0.0.0'}:{bound}")
        except OSError as exc:
            self.close()
            raise ConfigError(
                f"brokkr.schema.registry.listeners: cannot bind {scheme}://{host}:{port}: {exc}"
            ) from None
        scheme, host, _ = self.listeners[0]
        advertised = self.broker.config["brokkr.schema.registry.host.name"]
        if not advertised:
            advertised = host if host not in ("", "0.0.0.0", "::") else socket.getfqdn()
        port = self.sockets[0][1].getsockname()[1]
        shown = f"[{advertised}]" if ":" in advertised else advertised
        self.broker.services[SERVICE] = f"{scheme}://{shown}:{port}"

    async def start(self) -> None:
        self._runner = web.AppRunner(self.api.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        for scheme, sock in self.sockets:
            site = web.SockSite(self._runner, sock, ssl_context=self.tls if scheme == "https" else None)
            await site.start()
        log.info("schema registry serves %s", ", ".join(self.urls))

    def close(self) -> None:
        """Stop serving: the runner (its sites, their connections) ends in the background
        while the broker stops; sockets never served are closed at once."""
        runner, self._runner = self._runner, None
        if runner is None:
            for _, sock in self.sockets:
                sock.close()
        else:
            asyncio.get_running_loop().create_task(self._cleanup(runner))

    async def _cleanup(self, runner: web.AppRunner) -> None:
        await self.api.close()
        await runner.cleanup()
