"""The errors a client gets when a write to ``__consumer_offsets`` fails."""

from __future__ import annotations

from brokkr.core.errors import ErrorCode

#: What a failed write to __consumer_offsets answers (Kafka's mapping of append errors).
WRITE_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


def write_error(error: ErrorCode, too_large: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR) -> ErrorCode:
    """The error a client gets for a failed write: ``too_large`` for records over the
    size limit (offset commits answer INVALID_COMMIT_OFFSET_SIZE), NONE for success."""
    if not error:
        return ErrorCode.NONE
    return too_large if error in TOO_LARGE else WRITE_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR)
