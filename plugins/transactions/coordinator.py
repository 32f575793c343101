"""The transaction coordinator of one broker (Kafka's TransactionCoordinator and
TransactionStateManager): the transactional ids of the ``__transaction_state`` partitions
this broker leads, and the operations the transactional APIs ask of them.

Every change of an id's state is one TransactionLogValue record written to its partition
and awaited like acks=-1 before the request is answered (ownership, loading and writing
are :class:`~brokkr.plugins.coordinator_partitions.PartitionedCoordinator`'s). While a
write is in flight the id's ``pending`` state is set and other requests for it answer
CONCURRENT_TRANSACTIONS, as Kafka's ``pendingState`` does.

EndTxn answers once PrepareCommit/PrepareAbort is written; the markers are written
afterwards (:mod:`.markers`), then CompleteCommit/CompleteAbort. A partition that loads
with a transaction in PrepareCommit/PrepareAbort (after a restart, a crash or a change of
leader) completes it the same way; ongoing ones are aborted once they time out
(:mod:`.expiry`).
"""

from __future__ import annotations

import logging
import time

from brokkr.core.broker_client import BrokerClients
from brokkr.core.errors import ErrorCode
from brokkr.core.internal_topics import InternalTopic

from ..coordinator_partitions import PartitionedCoordinator, write_error
from .markers import MarkerWriter
from .metadata import COMPLETE, MAX_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, PREPARE, TransactionMetadata, TxnState
from .records import TxnLogRecord, decode_record, encode_key, encode_value

log = logging.getLogger("brokkr.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: The name the coordinator is registered under on its broker.
PLUGIN_NAME = "brokkr.transactions.coordinator"


def now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator(PartitionedCoordinator):
    """Registered as a plugin of its broker (``brokkr.transactions.coordinator``); found
    with :func:`brokkr.plugins.transactions.transaction_coordinator_of`."""

    internal = InternalTopic(
        TRANSACTION_STATE_TOPIC,
        PLUGIN_NAME,
        num_partitions="transaction.state.log.num.partitions",
        replication_factor="transaction.state.log.replication.factor",
        segment_bytes="transaction.state.log.segment.bytes",
        min_isr="transaction.state.log.min.isr",
    )
    write_timeout = "request.timeout.ms"

    def __init__(self, broker):
        super().__init__(broker)
        self.txns: dict[str, TransactionMetadata] = {}
        self.markers = MarkerWriter(self)
        #: For KIP-890 verifications asked of other coordinators (never behind a marker write).
        self.verify_clients = BrokerClients(broker, "txn-verify")

    # -- the partitioned state ------------------------------------------------------

    def decode(self, key, value) -> TxnLogRecord:
        return decode_record(key, value)

    def replay(self, record: TxnLogRecord) -> None:
        if record.value is None:
            self.txns.pop(record.transactional_id, None)
            return
        meta = self.txns.get(record.transactional_id)
        if meta is None:
            self.txns[record.transactional_id] = TransactionMetadata.from_value(record.transactional_id, record.value)
        else:
            meta.apply(record.value)

    def loaded(self, index: int) -> None:
        """Complete what was being completed when the partition's last leader stopped."""
        for meta in list(self.txns.values()):
            if meta.state in PREPARE and self.partition_for(meta.transactional_id) == index:
                self.spawn(self.complete(meta), f"complete {meta.transactional_id}")

    def unloaded(self, index: int) -> None:
        for tid in [t for t in self.txns if self.partition_for(t) == index]:
            del self.txns[tid]

    def coordinator_epoch(self, transactional_id: str) -> int:
        return self.owned.get(self.partition_for(transactional_id), (False, -1))[1]

    # -- writing a transition ---------------------------------------------------------

    async def transition(
        self,
        meta: TransactionMetadata,
        state: TxnState,
        *,
        partitions: set[tuple[str, int]] | None = None,
        producer_id: int | None = None,
        epoch: int | None = None,
        timeout_ms: int | None = None,
        start_ms: int | None = None,
    ) -> ErrorCode:
        """Write ``meta`` in ``state`` (unspecified fields as they are) and apply it once
        acknowledged; meanwhile the id is pending. Returns the error to answer, if any."""
        now = now_ms()
        value = meta.value(
            state,
            meta.partitions if partitions is None else partitions,
            producer_id=meta.producer_id if producer_id is None else producer_id,
            epoch=meta.producer_epoch if epoch is None else epoch,
            timeout_ms=meta.timeout_ms if timeout_ms is None else timeout_ms,
            now_ms=now,
            start_ms=meta.start_ms if start_ms is None else start_ms,
        )
        meta.pending = state
        try:
            error = await self.write(
                meta.transactional_id, [(encode_key(meta.transactional_id), encode_value(value))], replay=False
            )
        finally:
            meta.pending = None
        if error:
            log.info("writing %s of %r failed: %s", state.kafka_name, meta.transactional_id, error.name)
            return write_error(error)
        if self.txns.get(meta.transactional_id) is not meta:  # unloaded meanwhile
            return ErrorCode.NOT_COORDINATOR
        meta.apply(value)
        return ErrorCode.NONE

    # -- InitProducerId ---------------------------------------------------------------

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional producer starting (Kafka's
        handleInitProducerId): a new id, or the id's epoch bumped; an ongoing transaction
        is aborted first (answering CONCURRENT_TRANSACTIONS until it is)."""
        error = self.check_coordinator(transactional_id)
        if error:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if transactional_id not in self.txns:
            producer_id = await self.broker.producer_ids.generate_producer_id()  # may wait for the cluster
            if transactional_id not in self.txns:  # no other request created it meanwhile
                self.txns[transactional_id] = TransactionMetadata(
                    transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms
                )
        meta = self.txns[transactional_id]
        if meta.pending is not None or meta.state in PREPARE or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            return ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if producer_id != NO_PRODUCER_ID:  # KIP-360: the producer names the id and epoch it had
            if (producer_id, producer_epoch) == (meta.last_producer_id, meta.last_producer_epoch) and (
                meta.state == TxnState.EMPTY or meta.state in COMPLETE
            ):
                return ErrorCode.NONE, meta.producer_id, meta.producer_epoch  # a retry of the bump just made
            if (producer_id, producer_epoch) != (meta.producer_id, meta.producer_epoch):
                return ErrorCode.PRODUCER_FENCED, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if meta.state == TxnState.ONGOING:
            self.spawn(self.fence_and_abort(meta), f"fence {transactional_id}")
            return ErrorCode.CONCURRENT_TRANSACTIONS, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        old = meta.producer_id, meta.producer_epoch
        new_id, new_epoch = meta.producer_id, meta.producer_epoch + 1
        if meta.producer_epoch >= MAX_EPOCH:
            new_id, new_epoch = await self.broker.producer_ids.generate_producer_id(), 0
        error = await self.transition(
            meta,
            TxnState.EMPTY,
            partitions=set(),
            producer_id=new_id,
            epoch=new_epoch,
            timeout_ms=timeout_ms,
            start_ms=-1,
        )
        if error:
            if meta.producer_epoch == NO_PRODUCER_EPOCH and self.txns.get(transactional_id) is meta:
                del self.txns[transactional_id]  # never written
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        # Only a KIP-360 bump is remembered, so that its retry gets the same answer; a new
        # producer's bump forgets it, so the producer it replaced stays fenced.
        meta.last_producer_id, meta.last_producer_epoch = old if producer_id != NO_PRODUCER_ID else (-1, -1)
        return ErrorCode.NONE, meta.producer_id, meta.producer_epoch

    # -- checks shared by the producer's requests ------------------------------------

    def _producer_check(
        self, transactional_id: str, producer_id: int, epoch: int, completing_ok: bool = False
    ) -> TransactionMetadata | int:
        """The id's state when this producer may change it now, else the error to answer
        (``completing_ok``: a transaction being completed is not an error)."""
        error = self.check_coordinator(transactional_id)
        if error:
            return error
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.pending is not None or (
            not completing_ok and (meta.state in PREPARE or meta.state == TxnState.PREPARE_EPOCH_FENCE)
        ):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return meta

    # -- AddPartitionsToTxn / AddOffsetsToTxn -----------------------------------------

    async def add_partitions(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: set[tuple[str, int]]
    ) -> int:
        """Add ``partitions`` to the producer's transaction, starting it if none is ongoing."""
        meta = self._producer_check(transactional_id, producer_id, epoch)
        if not isinstance(meta, TransactionMetadata):
            return meta
        if meta.state == TxnState.ONGOING:
            if partitions <= meta.partitions:
                return ErrorCode.NONE
            return await self.transition(meta, TxnState.ONGOING, partitions=meta.partitions | partitions)
        return await self.transition(meta, TxnState.ONGOING, partitions=set(partitions), start_ms=now_ms())

    def verify(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        """KIP-890 part 1 (AddPartitionsToTxn v4 verify_only): per partition, NONE when it
        is in the producer's ongoing transaction, else the error Kafka answers."""
        error = self.check_coordinator(transactional_id)
        meta = self.txns.get(transactional_id)
        if not error:
            if meta is None or meta.producer_id != producer_id:
                error = ErrorCode.INVALID_PRODUCER_ID_MAPPING
            elif meta.producer_epoch != epoch:
                error = ErrorCode.PRODUCER_FENCED
            elif meta.state in PREPARE or meta.pending in PREPARE:
                error = ErrorCode.CONCURRENT_TRANSACTIONS
        if error:
            return dict.fromkeys(partitions, error)
        ongoing = meta.partitions if meta.state == TxnState.ONGOING else set()
        return {tp: ErrorCode.NONE if tp in ongoing else ErrorCode.INVALID_TXN_STATE for tp in partitions}

    # -- EndTxn -----------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> int:
        """Commit or abort the producer's transaction (Kafka's handleEndTransaction):
        answers once PrepareCommit/PrepareAbort is written; markers follow."""
        meta = self._producer_check(transactional_id, producer_id, epoch, completing_ok=True)
        if not isinstance(meta, TransactionMetadata):
            return meta
        done, preparing = (
            (TxnState.COMPLETE_COMMIT, TxnState.PREPARE_COMMIT)
            if commit
            else (TxnState.COMPLETE_ABORT, TxnState.PREPARE_ABORT)
        )
        if meta.state == done:
            return ErrorCode.NONE  # a retry of the EndTxn that completed it
        if meta.state == preparing:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if meta.state != TxnState.ONGOING:
            return ErrorCode.INVALID_TXN_STATE
        error = await self.transition(meta, preparing)
        if not error:
            self.spawn(self.complete(meta), f"complete {transactional_id}")
        return error

    async def fence_and_abort(self, meta: TransactionMetadata) -> None:
        """Abort ``meta``'s ongoing transaction with its epoch bumped, so the producer that
        left it open is fenced (PrepareEpochFence: a new producer, or a timeout)."""
        if meta.pending is not None or meta.state != TxnState.ONGOING:
            return
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else meta.producer_epoch
        error = await self.transition(meta, TxnState.PREPARE_EPOCH_FENCE, epoch=epoch)
        if not error:
            await self.complete(meta)

    async def complete(self, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction, then CompleteCommit/CompleteAbort."""
        committed = meta.state == TxnState.PREPARE_COMMIT
        written = await self.markers.write(
            meta.transactional_id, meta.producer_id, meta.producer_epoch, committed, set(meta.partitions)
        )
        if not written or self.txns.get(meta.transactional_id) is not meta:
            return  # no longer coordinated here: the next leader completes it
        state = TxnState.COMPLETE_COMMIT if committed else TxnState.COMPLETE_ABORT
        while True:
            error = await self.transition(meta, state, partitions=set())
            if error in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR) or self.txns.get(meta.transactional_id) is not meta:
                return
            await self.markers.backoff()
