"""Writing a transaction's COMMIT/ABORT markers (Kafka's TransactionMarkerChannelManager).

Each partition of the transaction gets its marker from its leader: partitions this broker
leads through :func:`brokkr.core.txn_markers.write_txn_markers`, the others with one
WriteTxnMarkers request per leader through :class:`~brokkr.core.broker_client.BrokerClient`.
Failed partitions are retried after ``BACKOFF_S`` until every marker is written; a partition
whose topic is gone needs none (as in Kafka). TRANSACTION_COORDINATOR_FENCED means a newer
coordinator owns the transaction: this one stops, and the newer one completes it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from brokkr.core.apis.common import partition_leader
from brokkr.core.broker_client import BrokerClients
from brokkr.core.errors import ErrorCode
from brokkr.core.protocol.frames import request_spec
from brokkr.core.txn_markers import TxnMarker, write_txn_markers

log = logging.getLogger("brokkr.transactions")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
BACKOFF_S = 0.1
#: Answers after which a partition needs no marker (INVALID_PRODUCER_EPOCH: a newer epoch already ended it).
_DONE = (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH)
#: What a partition the leader did not answer for (or a failed connection) counts as: retried.
_RETRY = -1  # UNKNOWN_SERVER_ERROR


class MarkerWriter:
    """The marker writing of one transaction coordinator (clients to other brokers are kept)."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.broker = coordinator.broker
        self.clients = BrokerClients(self.broker, "txn-markers")

    async def backoff(self) -> None:
        await asyncio.sleep(BACKOFF_S)

    async def write(
        self, transactional_id: str, producer_id: int, epoch: int, committed: bool, partitions: set[tuple[str, int]]
    ) -> bool:
        """Write the markers to every partition; False when this coordinator was fenced or
        no longer coordinates ``transactional_id``."""
        remaining = set(partitions)
        while remaining:
            coordinator_epoch = self.coordinator.coordinator_epoch(transactional_id)
            if self.coordinator.check_coordinator(transactional_id):
                return False
            results = await self._write_once(producer_id, epoch, committed, coordinator_epoch, remaining)
            if ErrorCode.TRANSACTION_COORDINATOR_FENCED in results.values():
                log.info("markers of %r: this coordinator was fenced", transactional_id)
                return False
            failed = {tp: e for tp, e in results.items() if e not in _DONE}
            remaining = set(failed)
            if remaining:
                log.debug("markers of %r not written yet: %s", transactional_id, failed)
                await self.backoff()
        return True

    async def _write_once(
        self, producer_id: int, epoch: int, committed: bool, coordinator_epoch: int, partitions: set[tuple[str, int]]
    ) -> dict[tuple[str, int], int]:
        by_leader: dict[int | None, list[tuple[str, int]]] = defaultdict(list)
        results: dict[tuple[str, int], int] = {}
        for topic, index in sorted(partitions):
            leader = self._leader(topic, index)
            if leader is False:
                results[(topic, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                by_leader[leader].append((topic, index))
        calls = []
        for leader, tps in by_leader.items():
            if leader is None:
                calls.append(self._write_local(producer_id, epoch, committed, coordinator_epoch, tps))
            elif leader == -1:
                results.update(dict.fromkeys(tps, ErrorCode.LEADER_NOT_AVAILABLE))
            else:
                calls.append(self._write_remote(leader, producer_id, epoch, committed, coordinator_epoch, tps))
        # Alone, the one call is awaited in this task (gather would start a task for it).
        for answer in [await calls[0]] if len(calls) == 1 else await asyncio.gather(*calls):
            results.update(answer)
        return results

    def _leader(self, topic: str, index: int) -> int | None | bool:
        """None: this broker; a node id (-1: none now); False: no such partition."""
        partition = self.broker.partition(topic, index)
        if partition is not None and partition.is_leader:
            return None
        leader = partition_leader(self.broker, topic, index)
        if leader is None:
            return False
        return leader if leader != self.broker.node_id else -1

    async def _write_local(self, producer_id, epoch, committed, coordinator_epoch, tps) -> dict:
        marker = TxnMarker(producer_id, epoch, committed, coordinator_epoch, tuple(tps))
        try:
            return dict(await write_txn_markers(self.broker, marker, self.broker.config["request.timeout.ms"]))
        except Exception:
            log.exception("writing markers to %s failed", tps)
            return dict.fromkeys(tps, ErrorCode.KAFKA_STORAGE_ERROR)

    async def _write_remote(self, node_id, producer_id, epoch, committed, coordinator_epoch, tps) -> dict:
        client = self.clients.get(node_id)
        if client is None:
            return dict.fromkeys(tps, ErrorCode.LEADER_NOT_AVAILABLE)
        spec = request_spec(WRITE_TXN_MARKERS)
        topic_cls = spec.struct("WritableTxnMarkerTopic")
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, index in tps:
            topics[topic].append(index)
        body = spec.cls(
            markers=[
                spec.struct("WritableTxnMarker")(
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    transaction_result=committed,
                    topics=[topic_cls(name=t, partition_indexes=ps) for t, ps in topics.items()],
                    coordinator_epoch=coordinator_epoch,
                )
            ]
        )
        timeout = self.broker.config["request.timeout.ms"] / 1000
        try:
            response = await client.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body, timeout)
        except Exception as exc:  # the connection failed: every partition is retried
            log.debug("WriteTxnMarkers to broker %d failed: %r", node_id, exc)
            return dict.fromkeys(tps, _RETRY)
        results: dict[tuple[str, int], int] = dict.fromkeys(tps, _RETRY)
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if (topic.name, p.partition_index) in results:
                        results[(topic.name, p.partition_index)] = p.error_code
        return results

    def close(self) -> None:
        self.clients.close()
