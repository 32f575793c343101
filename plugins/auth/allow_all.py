"""The default security plugin: every PLAINTEXT connection is ``User:ANONYMOUS`` and, when
no authorizer is configured (``authorizer.class.name``), every action is allowed, as a
Kafka broker without an authorizer behaves; other authorizer plugins may still deny."""

from __future__ import annotations

from brokkr.core.authorization import Action, AuthorizationResult
from brokkr.core.context import ANONYMOUS, ConnectionInfo, Principal
from brokkr.core.plugins import hookimpl


@hookimpl(trylast=True)
def brokkr_authenticate(connection: ConnectionInfo) -> Principal | None:
    return ANONYMOUS if connection.security_protocol == "PLAINTEXT" else None


@hookimpl(trylast=True)
def brokkr_authorize(actions: list[Action], broker) -> list[AuthorizationResult] | None:
    if broker.config.get("authorizer.class.name"):  # an authorizer decides: no opinion here
        return None
    return [AuthorizationResult.ALLOWED] * len(actions)


#: ``Broker.authorize`` answers for this hook without calling it while it is the only
#: implementation and no authorizer is configured (``core.authorization.allows_everything``).
brokkr_authorize.allows_everything = True
