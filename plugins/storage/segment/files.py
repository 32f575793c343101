"""Kafka's small files beside the segments, in Kafka's own formats.

In each log directory::

    .lock                              locked while a process uses the directory (Kafka's FileLock)
    meta.properties                    version=1: node.id, cluster.id, directory.id (KRaft);
                                       version=0: broker.id, cluster.id (ZooKeeper-era Kafka)
    recovery-point-offset-checkpoint   0 / count / "topic partition offset" lines
    log-start-offset-checkpoint        same format
    .kafka_cleanshutdown               present after a clean shutdown
    brokkr-topics.json                 the topic catalog (first log dir only; Kafka keeps
                                       it in its KRaft metadata log instead)
    brokkr-{name}.json                 broker-level state documents, e.g. brokkr-producer-ids.json
                                       (first log dir only; Kafka's are KRaft records too)
    {topic}-{partition}/               one directory per partition

In each partition directory::

    00000000000000000000.log           record batches as on the wire
    00000000000000000000.index         offset index
    00000000000000000000.timeindex     time index
    00000000000000000042.snapshot      producer state at offset 42 (the two newest kept)
    partition.metadata                 "version: 0" / "topic_id: <base64 uuid>"
    leader-epoch-checkpoint            0 / count / "epoch start_offset" lines

Every file here is replaced atomically: written to a temporary file, fsynced, renamed
over the old one, and the directory fsynced. The per-partition ones, and the broker's
checkpoints, are written so on the storage's flusher thread, never on the event loop
(see :mod:`.partition_log` and :mod:`.storage`). Where a compiler was at install, the
three functions that write them durably run in C (``_files.c``), each letting go of the GIL
once rather than at every system call, so that the flusher does not take the event loop's
thread turn by turn.
"""

from __future__ import annotations

import base64
import errno
import fcntl
import json
import os
import re
import struct
import uuid
from pathlib import Path

import attrs
from brokkr.core.config import read_properties
from brokkr.core.errors import ConfigError
from brokkr.core.log import StoredTopic

try:
    from . import _files
except ImportError:  # built only where a C compiler was at install (setup.py)
    _files = None

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
#: The files beside a segment's ``.log``, which go with it.
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
#: Left behind by a crash in the middle of a deletion, a compaction or a file swap.
LEFTOVER_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
LOCK = ".lock"
PARTITION_METADATA = "partition.metadata"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CATALOG = "brokkr-topics.json"

_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")


class CorruptFile(ValueError):
    """A checkpoint or metadata file that does not parse."""


class LogDirInUse(ConfigError):
    """Another process (a broker, brokkr's or Kafka's, or a tool) holds a log dir's lock."""

    exit_status = 1  # the ``brokkr`` command's, as Kafka's start exits when it cannot lock


#: ``struct flock`` (l_type, l_whence, l_start, l_len, l_pid) for an open file description lock.
_FLOCK = struct.Struct("hhqqi")


class LogDirLock:
    """Kafka's ``FileLock`` on ``<dir>/.lock``: an exclusive fcntl lock held until
    :meth:`release`. On Linux it is an open file description lock, which conflicts with
    Kafka's (a JVM's fcntl lock) and also with a second lock taken in this same process,
    by another broker or tool embedded beside it; elsewhere a plain fcntl lock."""

    def __init__(self, directory: Path):
        self.path = directory / LOCK
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if hasattr(fcntl, "F_OFD_SETLK"):
                fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
            else:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self.release()
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LogDirInUse(
                    f"Failed to acquire lock on file {LOCK} in {directory}. "
                    "A Kafka instance in another process or thread is using this directory."
                ) from None
            raise

    def release(self) -> None:
        """Unlock (closing the descriptor does it); a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    """``00000000000000000042.log``: the base offset in 20 digits."""
    return directory / f"{base_offset:020d}{suffix}"


def state_file(directory: Path, name: str) -> Path:
    """``brokkr-{name}.json``: where ``Storage.write_state`` keeps the document ``name``."""
    return directory / f"brokkr-{name}.json"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``"orders-3"`` -> ``("orders", 3)``; None for anything else (including Kafka's
    ``-delete`` and ``-future`` directories)."""
    m = _PARTITION_DIR.fullmatch(name)
    return (m["topic"], int(m["partition"])) if m else None


_FUTURE_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)\.[0-9a-f]{32}-future$")


def future_dir_name(topic: str, partition: int) -> str:
    """``{topic}-{partition}.{uuid}-future``: where a log being moved to this log dir is
    written until it replaces the old one (Kafka's ``logFutureDirName``)."""
    return f"{topic}-{partition}.{uuid.uuid4().hex}-future"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    """``"orders-3.<32 hex>-future"`` -> ``("orders", 3)``; None for anything else."""
    m = _FUTURE_DIR.fullmatch(name)
    return (m["topic"], int(m["partition"])) if m else None


def delete_dir_name(topic: str, partition: int) -> str:
    """``{topic}-{partition}.{uuid}-delete``, the topic shortened so that the name fits in
    255 bytes, as Kafka's ``LogFileUtils.logDeleteDirName`` does: a topic name may be
    249 characters, longer than its partition directory's name plus this suffix allows."""
    suffix = f"-{partition}.{uuid.uuid4().hex}-delete"
    return topic[: min(len(topic), 255 - len(suffix))] + suffix


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: written to ``{path}.tmp`` and fsynced, renamed over
    ``path``, its directory fsynced."""
    error = replace_files([(path, data)])[0]
    if error is not None:
        raise error


def replace_files(items: list[tuple[Path, bytes]]) -> list[OSError | None]:
    """:func:`write_atomically` for each (path, data), in order: None for each file
    replaced, else the OSError that stopped it (the others are still written). In C, the
    whole list is one call that lets go of the GIL once."""
    if _files is not None:
        fspath = os.fspath  # str names, for errors worded as the Python code's
        return _files.write_atomically([(fspath(_tmp(p)), fspath(p), fspath(p.parent), data) for p, data in items])
    errors: list[OSError | None] = []
    for path, data in items:
        tmp = _tmp(path)
        try:
            write_synced(tmp, data)
            os.replace(tmp, path)
            fsync_path(path.parent)
        except OSError as exc:
            errors.append(exc)
        else:
            errors.append(None)
    return errors


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def write_synced(path: Path, data: bytes) -> None:
    """Write ``path`` whole and fsync it (the first step of :func:`write_atomically`)."""
    if _files is not None:
        _files.write_synced(os.fspath(path), data)
        return
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_path(path: Path) -> None:
    """fsync a file or directory by name (a file already gone is skipped)."""
    if _files is not None:
        _files.fsync_path(os.fspath(path))
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def kafka_uuid(value: uuid.UUID) -> str:
    """A UUID as Kafka prints it: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _read_versioned_lines(path: Path) -> list[list[str]]:
    """The entries of a Kafka checkpoint file: version 0, a count, then the entries."""
    return _parse_versioned_lines(path.read_text(), path)


def _parse_versioned_lines(text: str, source: Path) -> list[list[str]]:
    lines = text.splitlines()
    try:
        if lines and int(lines[0]) != 0:
            raise CorruptFile(f"{source}: unknown version {lines[0]}")
        if len(lines) < 2:  # as Kafka's CheckpointFile reads it: an empty file (Kafka creates them so) has no entries
            return []
        count = int(lines[1])
    except ValueError:
        raise CorruptFile(f"{source}: malformed header") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptFile(f"{source}: expected {count} entries, found {len(entries)}")
    return entries


def _write_versioned_lines(path: Path, entries: list[list[str]]) -> None:
    write_atomically(path, _versioned_lines(path, entries))


def _versioned_lines(path: Path, entries: list[list[str]]) -> bytes:
    """A checkpoint file's bytes, refusing (CorruptFile) any entry that would not read
    back as written: a field that is empty or holds white space would shift every later
    entry when the file is next read."""
    text = "".join(f"{line}\n" for line in ["0", str(len(entries)), *(" ".join(e) for e in entries)])
    bad = next((e for e in entries if " ".join(e).split() != e), None)
    if bad is not None or _parse_versioned_lines(text, path) != entries:
        raise CorruptFile(f"{path}: refusing to write an entry that would not read back: {bad!r}")
    return text.encode()


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """``recovery-point-offset-checkpoint`` or ``log-start-offset-checkpoint``; empty if absent."""
    if not path.exists():
        return {}
    out = {}
    for entry in _read_versioned_lines(path):
        try:
            topic, partition, offset = entry
            out[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptFile(f"{path}: malformed entry {' '.join(entry)!r}") from None
    return out


def write_offset_checkpoint(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    _write_versioned_lines(path, [[t, str(p), str(o)] for (t, p), o in sorted(offsets.items())])


def read_leader_epochs(path: Path) -> list[tuple[int, int]]:
    """``leader-epoch-checkpoint``: (epoch, start offset) pairs, oldest first."""
    if not path.exists():
        return []
    try:
        return [(int(epoch), int(start)) for epoch, start in _read_versioned_lines(path)]
    except ValueError:
        raise CorruptFile(f"{path}: malformed entry") from None


def write_leader_epochs(path: Path, entries: list[tuple[int, int]]) -> None:
    write_atomically(path, leader_epochs_bytes(path, entries))


def leader_epochs_bytes(path: Path, entries: list[tuple[int, int]]) -> bytes:
    """``leader-epoch-checkpoint`` as :func:`write_leader_epochs` writes it to ``path``."""
    return _versioned_lines(path, [[str(epoch), str(start)] for epoch, start in entries])


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    if not path.exists():
        return None
    fields = read_properties(path)
    if fields.get("version") != "0" or "topic_id" not in fields:
        raise CorruptFile(f"{path}: expected version 0 and a topic_id")
    return parse_kafka_uuid(fields["topic_id"])


def partition_metadata_bytes(topic_id: uuid.UUID) -> bytes:
    return f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n".encode()


@attrs.frozen
class MetaProperties:
    """A log dir's ``meta.properties``, as Kafka's ``MetaProperties`` reads it. Version 1
    (KRaft) has ``node.id`` and ``cluster.id``; version 0 (a ZooKeeper-era broker's, also
    when ``version`` is missing) may lack either, and calls the node id ``broker.id``.
    ``directory.id`` is optional in both."""

    version: int
    node_id: int | None
    cluster_id: str | None
    directory_id: uuid.UUID | None = None


def read_meta_properties(path: Path) -> MetaProperties | None:
    """None when there is no such file; CorruptFile, in Kafka's words, for one Kafka would refuse."""
    if not path.exists():
        return None
    fields = read_properties(path)
    try:
        version = int(fields.get("version", "0"))
    except ValueError:
        raise CorruptFile(f"{path}: Invalid meta.properties version string '{fields['version']}'") from None
    if version not in (0, 1):
        raise CorruptFile(f"{path}: Unknown meta.properties version number {version}")
    v0 = version == 0
    id_name = "broker.id" if v0 else "node.id"
    node_id = None
    if id_name in fields or not v0:
        try:
            node_id = int(fields[id_name])
        except KeyError:
            raise CorruptFile(f"{path}: {id_name} was not found.") from None
        except ValueError:
            raise CorruptFile(f"{path}: Failed to parse {id_name} property as an int: {fields[id_name]}") from None
    cluster_id = fields.get("cluster.id")
    if cluster_id is None and not v0:
        raise CorruptFile(f"{path}: cluster.id was not found.")
    directory_id = None
    if "directory.id" in fields:
        try:
            directory_id = parse_kafka_uuid(fields["directory.id"])
        except ValueError as exc:
            raise CorruptFile(f"{path}: Unable to read directory.id as a Uuid: {exc}") from None
    return MetaProperties(version, node_id, cluster_id, directory_id)


def write_meta_properties(path: Path, node_id: int, cluster_id: str, directory_id: uuid.UUID) -> None:
    text = f"version=1\nnode.id={node_id}\ncluster.id={cluster_id}\ndirectory.id={kafka_uuid(directory_id)}\n"
    write_atomically(path, text.encode())


def write_clean_shutdown(path: Path) -> None:
    write_atomically(path, json.dumps({"version": 0, "brokerEpoch": -1}).encode())


def read_catalog(path: Path) -> list[StoredTopic]:
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text())
        return [
            StoredTopic(t["name"], uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t["configs"]))
            for t in doc["topics"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptFile(f"{path}: {exc}") from None


def write_catalog(path: Path, topics: list[StoredTopic]) -> None:
    doc = {
        "version": 0,
        "topics": [
            {"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
            for t in topics
        ],
    }
    write_atomically(path, json.dumps(doc, indent=1).encode())
