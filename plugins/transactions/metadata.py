"""A transactional id's state (Kafka's TransactionMetadata and TransactionState).

Kafka's state machine, with the byte each state is stored as in TransactionLogValue::

    Empty(0) --AddPartitions--> Ongoing(1) --EndTxn--> PrepareCommit(2) / PrepareAbort(3)
    PrepareCommit --markers written--> CompleteCommit(4)
    PrepareAbort  --markers written--> CompleteAbort(5)
    Complete*/Empty --AddPartitions--> Ongoing;  Complete*/Empty --expired--> Dead(6)
    Ongoing --InitProducerId of a new producer, or timeout--> PrepareEpochFence(7) -> PrepareAbort

PrepareEpochFence is never written: the abort it leads to is written as PrepareAbort
with the bumped epoch, which fences the producer that left the transaction open.
"""

from __future__ import annotations

import enum

import attrs

from .records import partitions_struct, value_struct

#: Kafka's RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH.
NO_PRODUCER_ID, NO_PRODUCER_EPOCH = -1, -1
#: The largest epoch before a new producer id is handed out (Short.MaxValue - 1, as Kafka's isEpochExhausted).
MAX_EPOCH = 32767 - 1


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (``CompleteCommit``, ...)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_BY_NAME = {s.kafka_name: s for s in TxnState}
COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
PREPARE = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@attrs.define
class TransactionMetadata:
    """The coordinator's view of one transactional id. ``pending`` is the state being
    written (requests that find one answer CONCURRENT_TRANSACTIONS)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    #: The producer id and epoch before the last bump, so a retried InitProducerId is recognised (KIP-360).
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: set[tuple[str, int]] = attrs.field(factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    pending: TxnState | None = None

    def value(
        self,
        state: TxnState,
        partitions: set[tuple[str, int]],
        *,
        producer_id: int,
        epoch: int,
        timeout_ms: int,
        now_ms: int,
        start_ms: int,
    ):
        """The TransactionLogValue of this id in ``state`` (PrepareEpochFence is stored as PrepareAbort)."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(partitions):
            by_topic.setdefault(topic, []).append(index)
        stored = TxnState.PREPARE_ABORT if state == TxnState.PREPARE_EPOCH_FENCE else state
        return value_struct(
            producer_id=producer_id,
            producer_epoch=epoch,
            transaction_timeout_ms=timeout_ms,
            transaction_status=int(stored),
            transaction_partitions=None
            if stored == TxnState.EMPTY  # as Kafka writes them: null for Empty, else a list
            else [partitions_struct(t, ps) for t, ps in by_topic.items()],
            transaction_last_update_timestamp_ms=now_ms,
            transaction_start_timestamp_ms=start_ms,
        )

    @classmethod
    def from_value(cls, transactional_id: str, value) -> TransactionMetadata:
        partitions = {(p.topic, i) for p in value.transaction_partitions or () for i in p.partition_ids}
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            TxnState(value.transaction_status),
            partitions=partitions,
            start_ms=value.transaction_start_timestamp_ms,
            last_update_ms=value.transaction_last_update_timestamp_ms,
        )

    def apply(self, value) -> None:
        """Take the stored ``value`` (what was written) as the current state."""
        self.producer_id, self.producer_epoch = value.producer_id, value.producer_epoch
        self.timeout_ms = value.transaction_timeout_ms
        self.state = TxnState(value.transaction_status)
        self.partitions = {(p.topic, i) for p in value.transaction_partitions or () for i in p.partition_ids}
        self.start_ms = value.transaction_start_timestamp_ms
        self.last_update_ms = value.transaction_last_update_timestamp_ms
