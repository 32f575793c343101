"""Kafka error codes of transactions that :class:`brokkr.core.errors.ErrorCode` does not
hold yet, and how older API versions see them.

(Kept here so the partition side's own additions to core's ErrorCode merge cleanly; an
integrator may fold them into ErrorCode.) :func:`error_code` turns a code from the wire
into whichever enum holds it.
"""

from __future__ import annotations

import enum

from brokkr.core.errors import ErrorCode


class TxnError(enum.IntEnum):
    INVALID_PRODUCER_ID_MAPPING = 49
    OPERATION_NOT_ATTEMPTED = 55
    TRANSACTIONAL_ID_NOT_FOUND = 105


def for_version(error: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED (KIP-588) as a request of ``version`` knows it: versions below
    ``fenced_since`` get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def error_code(code: int) -> ErrorCode | TxnError:
    """``code`` as an enum member (UNKNOWN_SERVER_ERROR for one neither holds)."""
    for enum_cls in (ErrorCode, TxnError):
        try:
            return enum_cls(code)
        except ValueError:
            pass
    return ErrorCode.UNKNOWN_SERVER_ERROR
