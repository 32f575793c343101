"""How older API versions see transaction error codes, and codes from the wire as
:class:`brokkr.core.errors.ErrorCode` members."""

from __future__ import annotations

from brokkr.core.errors import ErrorCode


def for_version(error: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED (KIP-588) as a request of ``version`` knows it: versions below
    ``fenced_since`` get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def error_code(code: int) -> ErrorCode:
    """``code`` as an ErrorCode member (UNKNOWN_SERVER_ERROR for one it does not hold)."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
