"""The principal of an SSL connection, as Kafka's ``DefaultKafkaPrincipalBuilder`` makes it
(``ssl.principal.mapping.rules=DEFAULT``): ``User:<the client certificate's distinguished
name>`` (``User:CN=alice,OU=eng,O=example``) when the client presented a certificate,
which it does when ``ssl.client.auth`` is ``requested`` or ``required``; otherwise
``User:ANONYMOUS``. Replace it with a ``brokkr_authenticate`` plugin of your own to map
names differently."""

from __future__ import annotations

from brokkr.core.context import ANONYMOUS, ConnectionInfo, Principal
from brokkr.core.listeners import SSL
from brokkr.core.plugins import hookimpl
from brokkr.core.tls import distinguished_name


@hookimpl(trylast=True)
def brokkr_authenticate(connection: ConnectionInfo) -> Principal | None:
    if connection.security_protocol != SSL:
        return None
    if not connection.peer_certificate:
        return ANONYMOUS
    return Principal("User", distinguished_name(connection.peer_certificate))
