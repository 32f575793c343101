"""A segment's ``.txnindex``: the transactions aborted by markers in that segment
(Kafka's ``TransactionIndex``; the entry format is in :mod:`brokkr.core.txn_index`).

Like Kafka's, the file exists only once a segment has an entry. Entries are few (one per
aborted transaction), so they are read once and kept in memory; appends go to the file
with ``os.write`` (in the page cache at once, so a killed process loses none) and are
fsynced with the segment."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from brokkr.core.errors import CorruptRequest
from brokkr.core.txn_index import AbortedTxn, decode_entries_untrusted, encode_entry

from .files import write_atomically

log = logging.getLogger("brokkr.storage")


class TransactionIndex:
    def __init__(self, path: Path):
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # read on first use

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                self._entries = decode_entries_untrusted(self.path.read_bytes())
            except FileNotFoundError:
                self._entries = []
            except CorruptRequest as exc:  # Kafka's sanityCheck fails; only a damaged disk does this
                log.warning("ignoring the unreadable transaction index %s: %s", self.path, exc)
                self._entries = []
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, encode_entry(txn))
        finally:
            os.close(fd)
        entries.append(txn)

    def truncate(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (Kafka's ``truncateTo``)."""
        entries = self.entries
        kept = [t for t in entries if t.last_offset < offset]
        if len(kept) != len(entries):
            write_atomically(self.path, b"".join(encode_entry(t) for t in kept))
            self._entries = kept

    def reset(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []

    def sync(self) -> None:
        if self._entries:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
