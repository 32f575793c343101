"""What a read_committed reader of segment files keeps, with no broker to ask: the
partition's last stable offset and its aborted transactions, from its files alone.

- Aborted transactions: the ``.txnindex`` of every segment (Kafka's format,
  :mod:`brokkr.core.txn_index`), read whole (one small entry per aborted transaction).
- The last stable offset: the newest producer snapshot (``.snapshot``, which carries each
  producer's open transaction) brought up to the end of the log by replaying the batch
  headers after it with the broker's own producer state
  (:class:`~brokkr.core.producer_state.ProducerStateManager`), exactly as a broker does when
  it opens the partition. A broker snapshots at every roll, so this reads the headers of
  the active segment; the records are never decoded.

Both are read on the driver when a DataFrame is planned, like the offset index.
"""

from __future__ import annotations

import os
from pathlib import Path

from brokkr.core.errors import CorruptRequest
from brokkr.core.producer_state import CorruptSnapshot, ProducerStateManager, decode_snapshot
from brokkr.core.protocol.control import read_end_txn_marker
from brokkr.core.txn_index import AbortedByProducer, AbortedTxn, by_producer, decode_entries_untrusted
from brokkr.plugins.storage.segment.files import PRODUCER_SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX
from brokkr.plugins.storage.segment.segment import scan_batches


def aborted_transactions(directory: Path) -> AbortedByProducer:
    """The aborted transactions of a partition directory, by producer id."""
    entries: list[AbortedTxn] = []
    for path in sorted(directory.glob(f"*{TXN_INDEX_SUFFIX}")):
        try:
            entries.extend(decode_entries_untrusted(path.read_bytes()))
        except CorruptRequest as exc:
            raise ValueError(f"{path}: {exc}") from exc
    return by_producer(entries)


def last_stable_offset(directory: Path, segments: list[tuple[int, Path]]) -> int | None:
    """The partition's last stable offset from its files (None: no transaction is open, so
    everything is stable). ``segments``: (base offset, ``.log`` path), oldest first."""
    state = ProducerStateManager(directory.name)
    start = 0
    snapshots = sorted((int(p.stem), p) for p in directory.glob(f"*{PRODUCER_SNAPSHOT_SUFFIX}") if p.stem.isdigit())
    for offset, path in reversed(snapshots):
        try:
            state.load_entries(decode_snapshot(path.read_bytes()))
        except (CorruptSnapshot, OSError):
            continue
        start = offset
        break
    end = start
    for i, (_, log) in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1][0] <= start:
            continue  # wholly before the snapshot
        fd = os.open(log, os.O_RDONLY)
        try:
            for _, h, buf in scan_batches(fd, 0, os.fstat(fd).st_size):
                if h.last_offset < start:
                    continue
                end = h.last_offset + 1
                if not h.is_control:
                    state.update(h, h.base_offset)
                elif (marker := read_end_txn_marker(buf, h)) is not None:
                    state.complete_txn(h, marker, h.base_offset)
        except CorruptRequest:
            pass  # a torn or damaged tail: the log ends before it, as recovery would decide
        finally:
            os.close(fd)
    return state.first_unstable_offset(end)
