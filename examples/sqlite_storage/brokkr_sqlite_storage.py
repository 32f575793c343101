"""An example storage backend: every partition's batches as rows of one SQLite database.

Select it with ``brokkr.storage=sqlite``; the database is ``brokkr.sqlite3`` in the first
of ``log.dirs``. It satisfies :class:`brokkr.core.log.Storage` and passes brokkr's
storage contract (``brokkr.core.storage_contract.StorageContract``). Batches are stored
as the core hands them over, one row per append; a row's ``segment`` groups rows into
segments of ``segment.bytes`` so that retention works as with files.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.log import (
    AppendInfo,
    Capability,
    OffsetOutOfRange,
    SegmentInfo,
    StoredTopic,
    TimestampOffset,
    batch_records,
)
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.records import iter_batches_untrusted

SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (name TEXT PRIMARY KEY, topic_id TEXT, partitions INTEGER, configs TEXT);
CREATE TABLE IF NOT EXISTS starts (topic TEXT, partition INTEGER, log_start INTEGER, PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS batches (
    topic TEXT, partition INTEGER, base_offset INTEGER, last_offset INTEGER, max_timestamp INTEGER,
    segment INTEGER, data BLOB, PRIMARY KEY (topic, partition, base_offset)
);
CREATE TABLE IF NOT EXISTS snapshots (topic TEXT, partition INTEGER, offset INTEGER, data BLOB,
    PRIMARY KEY (topic, partition, offset));
CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, text TEXT);
"""


class SqliteLog:
    def __init__(self, db: sqlite3.Connection, topic: str, partition: int, config, codecs):
        self.db, self.key, self.config, self.codecs = db, (topic, partition), config, codecs
        row = db.execute("SELECT log_start FROM starts WHERE topic=? AND partition=?", self.key).fetchone()
        self._start = row[0] if row else 0
        row = db.execute(
            "SELECT max(last_offset), max(segment) FROM batches WHERE topic=? AND partition=?", self.key
        ).fetchone()
        self._end = row[0] + 1 if row[0] is not None else self._start
        self._segment = row[1] if row[1] is not None else self._start

    def _rows(self, where: str, *args):
        return self.db.execute(f"SELECT * FROM batches WHERE topic=? AND partition=? AND {where}", (*self.key, *args))

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    def append(self, records, first_offset, last_offset, max_timestamp, record_count) -> AppendInfo:
        rolled = None
        segments = self.segments()
        if segments[-1].size and segments[-1].size + len(records) > self.config["segment.bytes"]:
            rolled = segments[-1]
            self._segment = first_offset
        self.db.execute(
            "INSERT INTO batches VALUES (?, ?, ?, ?, ?, ?, ?)",
            (*self.key, first_offset, last_offset, max_timestamp, self._segment, bytes(records)),
        )
        self.db.commit()
        self._end = last_offset + 1
        return AppendInfo(first_offset, last_offset, record_count, max_timestamp, len(records), rolled)

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> bytes:
        if not self._start <= offset <= self._end:
            raise OffsetOutOfRange(f"offset {offset} is outside [{self._start}, {self._end}]")
        out, size = [], 0
        for row in self._rows("last_offset >= ? AND base_offset < ? ORDER BY base_offset", offset, max_offset):
            data = row[6]
            if size + len(data) > max_bytes and not (min_one and not out):
                break
            out.append(data)
            size += len(data)
        return b"".join(out)

    def _records(self, data: bytes):
        return [rec for h in iter_batches_untrusted(data) for rec in batch_records(data, h, self.codecs)]

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        for row in self._rows("max_timestamp >= ? AND last_offset >= ? ORDER BY base_offset", timestamp, self._start):
            for rec in self._records(row[6]):
                if rec.timestamp >= timestamp and rec.offset >= self._start:
                    return TimestampOffset(rec.offset, rec.timestamp)
        return None

    def max_timestamp(self) -> TimestampOffset | None:
        row = self._rows("1 ORDER BY max_timestamp DESC, base_offset LIMIT 1").fetchone()
        if row is None:
            return None
        rec = next(r for r in self._records(row[6]) if r.timestamp == row[4])
        return TimestampOffset(rec.offset, rec.timestamp)

    def segments(self) -> list[SegmentInfo]:
        rows = self.db.execute(
            "SELECT segment, sum(length(data)), max(max_timestamp) FROM batches WHERE topic=? AND partition=? "
            "GROUP BY segment ORDER BY segment",
            self.key,
        ).fetchall()
        if not rows or rows[-1][0] != self._segment:
            rows.append((self._segment, 0, -1))
        ends = [base for base, _, _ in rows[1:]] + [self._end]
        return [SegmentInfo(base, end, size, ts) for (base, size, ts), end in zip(rows, ends)]

    def delete_before(self, offset: int) -> None:
        if offset < self._start:
            return
        self._start = offset
        doomed = [(*self.key, s.base_offset) for s in self.segments() if s.size and s.next_offset <= offset]
        if offset == self._end:  # every record goes: the next append starts a new segment here
            self._segment = offset
        self.db.executemany("DELETE FROM batches WHERE topic=? AND partition=? AND segment=?", doomed)
        self.db.execute("INSERT OR REPLACE INTO starts VALUES (?, ?, ?)", (*self.key, offset))
        self.db.commit()

    def truncate_to(self, offset: int) -> None:
        if offset >= self._end:
            return
        if self._rows("base_offset = ?", offset).fetchone() is None:
            raise ValueError(f"offset {offset} is not a batch boundary")
        self.db.execute("DELETE FROM batches WHERE topic=? AND partition=? AND base_offset >= ?", (*self.key, offset))
        self.db.execute("DELETE FROM snapshots WHERE topic=? AND partition=? AND offset > ?", (*self.key, offset))
        self.db.commit()
        self._end = offset
        self._start = min(self._start, offset)
        (last,) = self.db.execute("SELECT max(segment) FROM batches WHERE topic=? AND partition=?", self.key).fetchone()
        self._segment = offset if last is None else last

    def write_producer_snapshot(self, offset: int, data: bytes) -> None:
        self.db.execute("INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?)", (*self.key, offset, data))
        self.db.execute(  # keep the two newest
            "DELETE FROM snapshots WHERE topic=? AND partition=? AND offset < (SELECT min(offset) FROM (SELECT "
            "offset FROM snapshots WHERE topic=? AND partition=? ORDER BY offset DESC LIMIT 2))",
            (*self.key, *self.key),
        )
        self.db.commit()

    def latest_producer_snapshot(self) -> tuple[int, bytes] | None:
        return self.db.execute(
            "SELECT offset, data FROM snapshots WHERE topic=? AND partition=? AND offset <= ? ORDER BY offset DESC",
            (*self.key, self._end),
        ).fetchone()

    def close(self) -> None:
        pass

    def delete(self) -> None:
        for table in ("batches", "starts", "snapshots"):
            self.db.execute(f"DELETE FROM {table} WHERE topic=? AND partition=?", self.key)
        self.db.commit()


class SqliteStorage:
    durable = True
    #: Beyond the base contract its logs keep producer snapshots (table ``snapshots``);
    #: aborted transactions are kept by the broker in memory, and without leader epochs
    #: it serves a lone broker only (a cluster refuses it).
    capabilities = Capability.PRODUCER_SNAPSHOTS

    def __init__(self, path: Path, codecs):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)
        self.codecs = codecs

    def load_topics(self) -> list[StoredTopic]:
        rows = self.db.execute("SELECT name, topic_id, partitions, configs FROM topics ORDER BY name")
        return [StoredTopic(n, uuid.UUID(i), p, json.loads(c)) for n, i, p, c in rows]

    def save_topics(self, topics: list[StoredTopic]) -> None:
        self.db.execute("DELETE FROM topics")
        self.db.executemany(
            "INSERT INTO topics VALUES (?, ?, ?, ?)",
            [(t.name, str(t.topic_id), t.partitions, json.dumps(t.configs)) for t in topics],
        )
        self.db.commit()

    def open_log(self, topic: StoredTopic, partition: int, config) -> SqliteLog:
        return SqliteLog(self.db, topic.name, partition, config, self.codecs)

    def read_state(self, name: str) -> str | None:
        row = self.db.execute("SELECT text FROM state WHERE name=?", (name,)).fetchone()
        return row and row[0]

    def write_state(self, name: str, text: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO state VALUES (?, ?)", (name, text))
        self.db.commit()

    def checkpoint(self) -> None:
        self.db.commit()

    def close(self) -> None:
        self.db.close()


@hookimpl
def brokkr_config_definitions() -> list[ConfigDef]:
    doc = "Database file, relative to the first of log.dirs."
    return [ConfigDef("sqlite.storage.file", ConfigType.STRING, "brokkr.sqlite3", doc)]


@hookimpl
def brokkr_open_storage(broker) -> SqliteStorage | None:
    if broker.config["brokkr.storage"] != "sqlite":
        return None
    return SqliteStorage(Path(broker.config["log.dirs"][0]) / broker.config["sqlite.storage.file"], broker.codecs)
