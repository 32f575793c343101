"""Listeners (Kafka's ``EndPoint``): a name, an address and a security protocol.

``listeners=NAME://host:port,...`` names each listener; ``listener.security.protocol.map``
(``NAME:PROTOCOL,...``) gives each name one of Kafka's four security protocols, so
``INTERNAL://:9094`` with ``INTERNAL:SASL_SSL`` is a SASL_SSL listener. Names are
case-insensitive and kept upper-case, as Kafka's ``ListenerName.normalised``; settings for
one listener use its lower-case name: ``listener.name.internal.ssl.keystore.location``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .errors import ConfigError

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}


@attrs.frozen
class Listener:
    """One listener. ``security_protocol`` is empty until the protocol map resolves it."""

    name: str
    host: str
    port: int
    security_protocol: str = ""

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in (SASL_PLAINTEXT, SASL_SSL)


def parse_protocol_map(entries: Iterable[str]) -> dict[str, str]:
    """``["INTERNAL:SASL_SSL", ...]`` -> ``{"INTERNAL": "SASL_SSL", ...}`` (ConfigError if malformed)."""
    out: dict[str, str] = {}
    for entry in entries:
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name:
            raise ConfigError(f"listener.security.protocol.map entry {entry!r} is not of the form NAME:PROTOCOL")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map maps {name} to {protocol!r}, which is not one of "
                + ", ".join(SECURITY_PROTOCOLS)
            )
        out[name] = protocol
    return out


def _parse_uri(uri: str) -> Listener:
    name, sep, address = uri.strip().partition("://")
    host, colon, port = address.rpartition(":")
    if not sep or not name or not colon or not port.isdigit():
        raise ConfigError(f"listener {uri!r} is not of the form NAME://host:port")
    return Listener(name.upper(), host.strip("[]"), int(port))


def parse_listeners(uris: Iterable[str], protocol_map: Mapping[str, str] | None = None) -> list[Listener]:
    """``PLAINTEXT://127.0.0.1:9092`` -> Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT").

    With ``protocol_map`` every name must be mapped; without it, names that Kafka's
    default map knows are resolved and others are left for :func:`resolve_listeners`.
    """
    out = []
    for uri in uris:
        listener = _parse_uri(uri)
        protocol = (DEFAULT_PROTOCOL_MAP if protocol_map is None else protocol_map).get(listener.name, "")
        if protocol_map is not None and not protocol:
            raise ConfigError(
                f"listener {uri!r}: no security protocol is defined for listener {listener.name} "
                "in listener.security.protocol.map"
            )
        out.append(attrs.evolve(listener, security_protocol=protocol))
    names = [lst.name for lst in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"Each listener must have a different name, listeners: {', '.join(uris)}")
    return out


def resolve_listeners(listeners: Iterable[Listener], config: Mapping[str, Any]) -> list[Listener]:
    """``listeners`` with their security protocols from ``listener.security.protocol.map``;
    also checks that ``advertised.listeners`` names only these listeners."""
    protocol_map = parse_protocol_map(config["listener.security.protocol.map"])
    out = []
    for listener in listeners:
        protocol = protocol_map.get(listener.name)
        if protocol is None:
            raise ConfigError(
                f"No security protocol is defined for listener {listener.name} in listener.security.protocol.map"
            )
        out.append(attrs.evolve(listener, security_protocol=protocol))
    names = {lst.name for lst in out}
    for advertised in _advertised(tuple(config["advertised.listeners"] or ())):
        if advertised.name not in names:
            raise ConfigError(f"advertised.listeners names listener {advertised.name}, which listeners does not define")
    return out


def configured_listeners(config: Mapping[str, Any]) -> list[Listener]:
    """The listeners of ``config``, resolved (for plugins that set up per-listener state)."""
    return resolve_listeners(parse_listeners(config["listeners"]), config)


@functools.lru_cache(maxsize=16)
def _advertised(uris: tuple[str, ...]) -> tuple[Listener, ...]:
    return tuple(_parse_uri(uri) for uri in uris)


def advertised_listener(listeners: Iterable[Listener], config: Mapping[str, Any], name: str) -> Listener:
    """What Metadata tells a client connected on listener ``name``: its entry in
    ``advertised.listeners`` (an empty host or port 0 filled in from the bound listener),
    else the bound listener itself."""
    bound = next(lst for lst in listeners if lst.name == name)
    for advertised in _advertised(tuple(config["advertised.listeners"] or ())):
        if advertised.name == name:
            return attrs.evolve(bound, host=advertised.host or bound.host, port=advertised.port or bound.port)
    return bound
