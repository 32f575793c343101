"""Kafka error codes of transactions that :class:`brokkr.core.errors.ErrorCode` does not
hold yet, and how older API versions see them.

(Kept here so the partition side's own additions to core's ErrorCode merge cleanly; an
integrator may fold them into ErrorCode.)
"""

from __future__ import annotations

import enum

from brokkr.core.errors import ErrorCode


class TxnError(enum.IntEnum):
    INVALID_PRODUCER_ID_MAPPING = 49
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    OPERATION_NOT_ATTEMPTED = 55
    PRODUCER_FENCED = 90
    TRANSACTIONAL_ID_NOT_FOUND = 105


def for_version(error: int, version: int, fenced_since: int) -> int:
    """PRODUCER_FENCED (KIP-588) as a request of ``version`` knows it: versions below
    ``fenced_since`` get INVALID_PRODUCER_EPOCH, as Kafka answers them."""
    if error == TxnError.PRODUCER_FENCED and version < fenced_since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
