"""SaslAuthenticate (key 36), versions 0-2: one token of a SASL exchange; v1 adds the
session lifetime (KIP-368).

On a SASL listener the authenticator (:mod:`brokkr.core.authenticator`) answers it
during authentication. One that reaches this handler comes after authentication, or on a
PLAINTEXT or SSL listener: Kafka answers ILLEGAL_SASL_STATE
(``KafkaApis.handleSaslAuthenticateRequest``).
"""

from __future__ import annotations

from ..errors import ErrorCode
from ..protocol.frames import response_spec
from . import Api

KEY = 36
SaslAuthenticateResponse = response_spec(KEY).cls


def authenticate_response(
    code: int, message: str | None, auth_bytes: bytes = b"", session_lifetime_ms: int = 0
) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(
        error_code=code, error_message=message, auth_bytes=auth_bytes, session_lifetime_ms=session_lifetime_ms
    )


async def handle(broker, ctx, request):
    return authenticate_response(
        ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate request received after successful authentication"
    )


def error_response(request, code):
    return authenticate_response(code, None)


API = Api(KEY, 0, 2, handle, error_response)
