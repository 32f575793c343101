"""Aborted transactions: Kafka's ``.txnindex`` entries and the fetch-time search over them.

A read_committed consumer must drop the records of aborted transactions; the broker tells
it which by returning, with each fetch, the aborted transactions that overlap the fetched
range (producer id and first offset; the consumer skips that producer's batches from the
first offset until it meets the ABORT marker). Kafka keeps them in a ``.txnindex`` file per
segment, one entry per transaction aborted by a marker in that segment::

    version             int16   0
    producer_id         int64
    first_offset        int64   the transaction's first offset in this partition
    last_offset         int64   the offset of its ABORT marker
    last_stable_offset  int64   the partition's LSO once the marker was written

34 bytes an entry, appended in marker order. The last stable offset lets a search stop
early: no transaction after an entry whose LSO is past the fetch's upper bound can start
below it (Kafka's ``TxnIndexSearchResult.isComplete``).

:class:`AbortedTxnList` holds entries in memory (the memory storage, and logs of
third-party storages that keep no index of their own); the segment storage keeps Kafka's
files (``plugins/storage/segment/txn_index.py``), both searched by :func:`collect_aborted`.
"""

from __future__ import annotations

import bisect
import itertools
import struct
from collections.abc import Iterable
from typing import NamedTuple

from .errors import CorruptRequest

TXN_INDEX_VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def _last_offset(txn: AbortedTxn) -> int:
    return txn.last_offset


def encode_entry(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(TXN_INDEX_VERSION, *txn)


def decode_entries_untrusted(data: bytes | memoryview) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` (Kafka's ``TransactionIndex.iterator``): raises
    CorruptRequest for a size that is not a whole number of entries or another version."""
    if len(data) % ENTRY_SIZE:
        raise CorruptRequest(f"transaction index of {len(data)} bytes is not a whole number of entries")
    out = []
    for version, *fields in ENTRY.iter_unpack(data):
        if version != TXN_INDEX_VERSION:
            raise CorruptRequest(f"transaction index entry of unknown version {version}")
        out.append(AbortedTxn(*fields))
    return out


def search(entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound: int, out: list[AbortedTxn]) -> bool:
    """Kafka's ``TransactionIndex.collectAbortedTxns`` over one index: add to ``out`` the
    entries overlapping [``fetch_offset``, ``upper_bound``); return whether the search is
    complete (an entry's last stable offset reached ``upper_bound``)."""
    for txn in entries:
        if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
            out.append(txn)
        if txn.last_stable_offset >= upper_bound:
            return True
    return False


#: Per producer id, the (first offset, marker offset) of each of its aborted transactions.
AbortedByProducer = dict[int, list[tuple[int, int]]]


def by_producer(entries: Iterable[AbortedTxn]) -> AbortedByProducer:
    out: AbortedByProducer = {}
    for txn in entries:
        out.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return out


def is_aborted(aborted: AbortedByProducer, producer_id: int, offset: int) -> bool:
    """Whether the transactional batch of ``producer_id`` at ``offset`` belongs to an
    aborted transaction (readers of files and the log cleaner drop those)."""
    return any(first <= offset <= last for first, last in aborted.get(producer_id, ()))


class AbortedTxnList:
    """Aborted transactions kept in memory, in marker order (what a log that keeps no
    ``.txnindex`` answers with; see :class:`brokkr.core.log.PartitionLog`)."""

    def __init__(self) -> None:
        self.entries: list[AbortedTxn] = []

    def append_aborted_txn(self, txn: AbortedTxn) -> None:
        self.entries.append(txn)

    def aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The transactions overlapping [``fetch_offset``, ``upper_bound``); markers are in
        offset order, so the search starts at the first one at or past ``fetch_offset``."""
        out: list[AbortedTxn] = []
        start = bisect.bisect_left(self.entries, fetch_offset, key=_last_offset)
        search(itertools.islice(self.entries, start, None), fetch_offset, upper_bound, out)
        return out

    def truncate_aborted_txns(self, offset: int) -> None:
        """Forget the transactions whose marker is at or after ``offset`` (a truncation, or
        a replay from there that will add them again)."""
        self.entries = [t for t in self.entries if t.last_offset < offset]

    def drop_aborted_txns_before(self, offset: int) -> None:
        """Forget the transactions that ended below ``offset`` (the new log start)."""
        self.entries = [t for t in self.entries if t.last_offset >= offset]
