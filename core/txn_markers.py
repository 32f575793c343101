"""Writing transaction markers: the partition leader's half of ending a transaction.

The transaction coordinator decides COMMIT or ABORT; each partition of the transaction
then gets a marker from its leader (:mod:`brokkr.core.protocol.control`). A coordinator
calls :func:`write_txn_markers` for the partitions this broker leads and sends
WriteTxnMarkers (``core/apis/write_txn_markers.py``, the same function behind the wire)
to the leaders of the others. Through :func:`brokkr.core.append.append` with origin
MARKER (Kafka's ``ReplicaManager.appendRecords`` with origin COORDINATOR and acks=-1),
per partition:

- not held here: UNKNOWN_TOPIC_OR_PARTITION; held but not led: NOT_LEADER_OR_FOLLOWER;
- an ISR below the partition's min.insync.replicas: NOT_ENOUGH_REPLICAS (nothing
  written; the coordinator sends the marker again);
- a producer epoch below the producer's: INVALID_PRODUCER_EPOCH; a coordinator epoch
  below the last marker's: TRANSACTION_COORDINATOR_FENCED (nothing written);
- else the marker is appended: the producer's transaction ends there (last stable
  offset, aborted-transaction index), ``brokkr_txn_marker_written`` observers run, and
  the answer waits until the marker is replicated to the ISR (REQUEST_TIMED_OUT after
  ``timeout_ms``; NOT_LEADER_OR_FOLLOWER if leadership moved meanwhile).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from .apis.common import partition_of
from .append import Origin, append, error_of, wait_acknowledged
from .errors import ErrorCode

if TYPE_CHECKING:
    from .broker import Broker
    from .partition import Partition

#: Kafka's ``request.timeout.ms`` default, which its WriteTxnMarkers handler waits for acks with.
MARKER_TIMEOUT_MS = 30000


@attrs.frozen
class TxnMarker:
    """One transaction's outcome, for its partitions (Kafka's ``TxnMarkerEntry``)."""

    producer_id: int
    producer_epoch: int
    committed: bool  # COMMIT (True) or ABORT (False) control record
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]  # (topic, partition)


async def write_txn_markers(
    broker: Broker, marker: TxnMarker, timeout_ms: int = MARKER_TIMEOUT_MS
) -> dict[tuple[str, int], ErrorCode]:
    """Write ``marker`` to each of its partitions this broker leads, wait until each is
    replicated as acks=-1 waits, and return the error code per partition (NONE: written)."""
    results: dict[tuple[str, int], ErrorCode] = {}
    written: dict[Partition, int] = {}
    for key in marker.partitions:
        partition, results[key] = partition_of(broker.topics.get(key[0]), key[1])
        if partition is None:
            continue
        try:
            info = append(broker, partition, marker, Origin.MARKER)
        except Exception as exc:
            results[key] = error_of(exc, partition)[0]
            continue
        written[partition] = info.last_offset + 1
    for partition, (code, _) in (await wait_acknowledged(broker, written, timeout_ms)).items():
        results[(partition.topic.name, partition.index)] = code
    return results
