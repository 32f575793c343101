"""SaslHandshake (key 17), versions 0-1: the SASL mechanism a connection will use.

On a SASL listener the authenticator (:mod:`brokkr.core.authenticator`) answers it
before authentication, and when it starts a re-authentication. A SaslHandshake that
reaches this handler comes from an authenticated connection, or one on a PLAINTEXT or
SSL listener: Kafka answers ILLEGAL_SASL_STATE (``KafkaApis.handleSaslHandshakeRequest``).
"""

from __future__ import annotations

from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 17
SaslHandshakeResponse = response_spec(KEY).cls


def handshake_response(code: int, mechanisms: list[str]) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=code, mechanisms=mechanisms)


async def handle(broker, ctx, request):
    return handshake_response(ErrorCode.ILLEGAL_SASL_STATE, [])


def error_response(request, code):
    return handshake_response(code, [])


API = Api(KEY, 0, 1, handle, error_response)
