"""Who is asking: the connection and request context that hooks receive."""

from __future__ import annotations

import attrs


@attrs.frozen
class Principal:
    """A Kafka principal such as ``User:alice``."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal("User", "ANONYMOUS")


@attrs.frozen
class ConnectionInfo:
    """One accepted connection, as authentication sees it."""

    connection_id: str
    listener: str
    security_protocol: str
    client_host: str
    client_port: int
    #: The client's certificate on an SSL or SASL_SSL listener, once verified against the
    #: truststore (as :meth:`ssl.SSLSocket.getpeercert` returns it); None when it sent none.
    peer_certificate: dict | None = attrs.field(default=None, eq=False)


@attrs.frozen
class RequestContext:
    """One request, as authorization, quotas and validation see it (Kafka's RequestContext)."""

    connection: ConnectionInfo
    principal: Principal
    api_key: int
    api_version: int
    client_id: str | None
    correlation_id: int
    #: What the request used, by quota type, as its handler records it (``"produce"``:
    #: bytes appended, ``"fetch"``: bytes returned); the dispatcher adds ``"request"`` and
    #: calls ``brokkr_quota_throttle_ms`` once with all of it.
    usage: dict[str, float] = attrs.field(factory=dict, eq=False)

    @property
    def client_host(self) -> str:
        return self.connection.client_host

    @property
    def listener(self) -> str:
        return self.connection.listener
