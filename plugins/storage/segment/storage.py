"""The broker's log directories (Kafka's LogManager): which partition lives where, the
checkpoints, the clean-shutdown marker and the topic catalog.

At start, each of ``log.dirs`` is created if needed and locked (``.lock``, as Kafka's
LogManager locks it: a directory another process or an embedded broker holds is refused;
released at close), then checked against its ``meta.properties`` (Kafka's version 1, or
version 0 of a ZooKeeper-era broker: a directory written by another node id, or of
another cluster than the other directories, is refused; the cluster id is kept; a Kafka
broker's file is left as it is). A directory without ``.kafka_cleanshutdown`` was not shut down
cleanly, so its partitions are recovered from their recovery points. Partition
directories the catalog does not list (copied from a Kafka broker, say) are adopted with
the ids and settings Kafka's KRaft metadata log gives them (:mod:`.kraft`), or without it
with no time or size retention (an internal topic: with its own settings), and recorded
in the catalog. ``__cluster_metadata`` itself
is left as it is. New partitions go to the directory holding the fewest.

A log moves to another of the directories through :mod:`.move` (AlterReplicaLogDirs). A
``-future`` directory found at start is such a move a crash interrupted: dropped while the
partition's own directory exists, else (the crash came in the middle of the swap, which
renames the old one aside first) renamed into place.

One thread, the flusher, does this storage's disk waits off the event loop, in the order
they were asked for: segment fsyncs, producer snapshots, leader-epoch-checkpoints, the
unlinking of deleted segments and topics (:mod:`.partition_log`), and the checkpoint
files. Opening the logs (recovery after an unclean shutdown included) runs before the
broker listens, so no request waits behind it.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Mapping
from concurrent.futures import Future
from pathlib import Path

from brokkr.core.config import BrokerConfig, TopicConfig
from brokkr.core.errors import ConfigError
from brokkr.core.internal_topics import InternalTopic
from brokkr.core.log import Capability, StoredTopic
from brokkr.core.partition import CLUSTER_METADATA_TOPIC

from . import files, kraft
from .cleaner import LogCleaner
from .flusher import Flusher
from .move import LogMove
from .partition_log import SegmentLog

log = logging.getLogger("brokkr.storage")


class SegmentStorage:
    """Satisfies :class:`brokkr.core.log.Storage`, with every capability Kafka's files give."""

    durable = True
    capabilities = (
        Capability.LEADER_EPOCHS
        | Capability.READ_REGIONS
        | Capability.TXN_INDEX
        | Capability.PRODUCER_SNAPSHOTS
        | Capability.KEPT_HIGH_WATERMARK
        | Capability.COMPACTION
        | Capability.LOG_DIRS
    )

    def __init__(
        self,
        config: BrokerConfig,
        codecs: dict,
        node_id: int,
        cluster_id: str,
        internal_topics: Mapping[str, InternalTopic] | None = None,
    ):
        self.codecs = codecs
        self.config = config
        self.internal_topics = dict(internal_topics or {})  # adopted with their own settings (_adopt)
        self.dirs = [Path(d).absolute() for d in config["log.dirs"]]
        self.cluster_id = cluster_id
        self.flusher = Flusher()
        self.clean: dict[Path, bool] = {}
        self.recovery_points: dict[Path, dict[tuple[str, int], int]] = {}
        self.start_offsets: dict[Path, dict[tuple[str, int], int]] = {}
        self.cleaner_offsets: dict[Path, dict[tuple[str, int], int]] = {}
        #: replication-offset-checkpoint: each partition's high watermark, as last set on its
        #: log by the broker (``SegmentLog.high_watermark``).
        self.high_watermarks: dict[Path, dict[tuple[str, int], int]] = {}
        self.cleaner = LogCleaner(config, codecs)
        self.found: dict[tuple[str, int], Path] = {}  # partition directories on disk
        self.adopted_epochs: dict[tuple[str, int], int] = {}  # leader epochs from Kafka's metadata log
        self.logs: dict[Path, dict[tuple[str, int], SegmentLog]] = {d: {} for d in self.dirs}
        self.locks: list[files.LogDirLock] = []
        try:  # every directory locked before any is touched, as Kafka's LogManager does
            for d in self.dirs:
                d.mkdir(parents=True, exist_ok=True)
                self.locks.append(files.LogDirLock(d))
            metas = {d: _read_meta(d, node_id) for d in self.dirs}
            self.cluster_id = _stored_cluster_id(metas) or cluster_id
            futures: list[tuple[tuple[str, int], Path]] = []
            for d in self.dirs:
                futures += self._open_dir(d, node_id, metas[d])
            self._settle_moves(futures)
        except BaseException:
            self.unlock()
            raise

    def _open_dir(self, d: Path, node_id: int, meta: files.MetaProperties | None) -> list:
        """Check and read ``d``; returns the ``-future`` directories in it (see _settle_moves)."""
        marker = d / files.CLEAN_SHUTDOWN
        self.clean[d] = marker.exists() or meta is None  # a new directory has nothing to recover
        if meta is None:
            files.write_meta_properties(d / files.META_PROPERTIES, node_id, self.cluster_id, uuid.uuid4())
        try:
            self.recovery_points[d] = files.read_offset_checkpoint(d / files.RECOVERY_POINT_CHECKPOINT)
            self.start_offsets[d] = files.read_offset_checkpoint(d / files.LOG_START_CHECKPOINT)
            self.cleaner_offsets[d] = files.read_offset_checkpoint(d / files.CLEANER_CHECKPOINT)
            self.high_watermarks[d] = files.read_offset_checkpoint(d / files.REPLICATION_CHECKPOINT)
        except files.CorruptFile as exc:
            log.warning("%s; recovering every partition in %s from its start", exc, d)
            self.clean[d] = False
            self.recovery_points[d], self.start_offsets[d], self.cleaner_offsets[d] = {}, {}, {}
            self.high_watermarks[d] = {}
        # From here on, until close() writes it again, a crash means an unclean start.
        marker.unlink(missing_ok=True)
        futures = []
        for path in d.iterdir():
            if path.is_dir() and path.name.endswith("-delete"):
                shutil.rmtree(path)  # a topic deletion interrupted by a crash
            elif path.is_dir() and (key := files.parse_future_dir(path.name)):
                futures.append((key, path))
            elif path.is_dir() and (key := files.parse_partition_dir(path.name)):
                if key[0] == CLUSTER_METADATA_TOPIC:
                    continue  # Kafka's KRaft metadata log: read for adoption, never opened as a topic
                if key in self.found:
                    raise ConfigError(f"partition {path.name} is in both {self.found[key]} and {d}")
                self.found[key] = d
        if not self.clean[d]:
            log.warning("%s was not shut down cleanly; recovering its partitions", d)
        return futures

    def _settle_moves(self, futures: list[tuple[tuple[str, int], Path]]) -> None:
        """Moves a crash interrupted (:mod:`.move`): a future log whose partition still has
        its directory had not caught up, and goes; one whose partition has none was being
        swapped in, complete, and takes the partition's name (recovered from its start)."""
        for key, path in futures:
            if key in self.found:
                log.warning("dropping %s: a move to another log dir the last stop interrupted", path)
                shutil.rmtree(path)
                continue
            d = path.parent
            path.rename(d / f"{key[0]}-{key[1]}")
            files.fsync_path(d)
            log.warning("%s-%d: completing its move to %s, which the last stop interrupted", *key, d)
            self.found[key] = d
            self.recovery_points[d].pop(key, None)
            self.clean[d] = False  # its files were never flushed as a whole: recover them

    # -- the Storage contract ----------------------------------------------------------

    def load_topics(self) -> list[StoredTopic]:
        topics = files.read_catalog(self.dirs[0] / files.CATALOG)
        listed = {t.name for t in topics}
        unlisted: dict[str, list[int]] = {}
        for topic, partition in self.found:
            if topic not in listed:
                unlisted.setdefault(topic, []).append(partition)
        if unlisted:
            topics.extend(self._adopt(unlisted))
            self.save_topics(topics)
        return topics

    def _adopt(self, unlisted: dict[str, list[int]]) -> list[StoredTopic]:
        """Topics of partition directories the catalog does not list (copied from a Kafka
        broker, say), with the ids and settings Kafka's KRaft metadata log gives them.
        Without that log their settings are unknown, so no time or size retention applies
        until an operator sets it: adopting data must never delete it. An internal topic
        (``internal_topics``) gets its own settings, under those Kafka's log gives it, and
        without that log at least its own partition count (the directories of some of its
        partitions, or of a creation cut short, are not all of it)."""
        kraft = self._kraft_topics()
        adopted, guessed, internal = [], [], []
        for name, partitions in sorted(unlisted.items()):
            first = min(partitions)
            metadata = self.found[name, first] / f"{name}-{first}" / files.PARTITION_METADATA
            topic_id = files.read_partition_metadata(metadata)
            known = kraft.get(name) if kraft else None
            declared = self.internal_topics.get(name)
            own = declared.configs(self.config, replicated=False) if declared is not None else {}
            if known is not None:
                count = max([*partitions, *known.leader_epochs]) + 1
                self.adopted_epochs.update(((name, p), e) for p, e in known.leader_epochs.items() if p in partitions)
                configs = {**own, **self._known_topic_configs(name, known.configs)}
                adopted.append(StoredTopic(name, topic_id or known.topic_id, count, configs))
            elif declared is not None:
                internal.append(name)
                count = max(max(partitions) + 1, declared.partitions(self.config))
                adopted.append(StoredTopic(name, topic_id or uuid.uuid4(), count, own))
            else:
                guessed.append(name)
                configs = {"retention.ms": "-1", "retention.bytes": "-1"}
                adopted.append(StoredTopic(name, topic_id or uuid.uuid4(), max(partitions) + 1, configs))
        if kraft is not None:
            taken = sorted(kraft.keys() & unlisted.keys())
            log.info("adopted topics %s with the ids and settings of Kafka's metadata log", taken)
        if guessed:
            log.warning(
                "adopting topics %s from partition directories without Kafka's metadata log: their settings are "
                "unknown, so they get retention.ms=-1 and retention.bytes=-1 (nothing is deleted) until set",
                guessed,
            )
        if internal:
            log.info("adopting internal topics %s from partition directories with their own settings", internal)
        return adopted

    def _kraft_topics(self) -> dict[str, kraft.KraftTopic] | None:
        for d in self.dirs:
            try:
                topics = kraft.read_kraft_topics(d, self.codecs)
            except (OSError, kraft.MetadataLogError) as exc:
                raise ConfigError(f"cannot read Kafka's metadata log in {d}: {exc}") from None
            if topics is not None:
                return topics
        return None

    def _known_topic_configs(self, topic: str, configs: dict[str, str]) -> dict[str, str]:
        """The settings brokkr has; each other one is named in the log and dropped."""
        kept = {}
        for key, value in configs.items():
            try:
                self.config.topic_config({key: value})
            except ConfigError as exc:
                log.warning("adopted topic %s: setting %s=%s is not taken over: %s", topic, key, value, exc)
                continue
            kept[key] = value
        return kept

    def save_topics(self, topics: list[StoredTopic]) -> None:
        files.write_catalog(self.dirs[0] / files.CATALOG, topics)

    def read_state(self, name: str) -> str | None:
        path = files.state_file(self.dirs[0], name)
        return path.read_text() if path.exists() else None

    def write_state(self, name: str, text: str) -> None:
        files.write_atomically(files.state_file(self.dirs[0], name), text.encode())

    def open_log(self, topic: StoredTopic, partition: int, config: TopicConfig) -> SegmentLog:
        key = (topic.name, partition)
        d = self.found.pop(key, None) or min(self.dirs, key=lambda d: len(self.logs[d]))
        plog = SegmentLog(
            d / f"{topic.name}-{partition}",
            topic.topic_id,
            config,
            self.codecs,
            self.flusher,
            recovery_point=self.recovery_points[d].get(key, 0),
            log_start_offset=self.start_offsets[d].get(key, 0),
            clean=self.clean[d],
            cleaner_offset=self.cleaner_offsets[d].get(key, 0),
        )
        plog.high_watermark = self.high_watermarks[d].get(key)
        if key in self.adopted_epochs:
            plog.assign_epoch(self.adopted_epochs.pop(key))
        self.logs[d][key] = plog
        return plog

    def move_log(self, plog: SegmentLog, directory: Path) -> LogMove:
        """:class:`brokkr.core.log.LogDirs`: start moving ``plog`` into ``directory``."""
        if directory not in self.dirs or directory == plog.dir.parent:
            raise ValueError(f"{directory} is not another of the log dirs {self.dirs}")
        return LogMove(self, plog, directory)

    def _unopened(self, d: Path) -> list[tuple[str, int]]:
        """Partitions on disk in ``d`` that no one opened (a tool such as ``brokkr scram``
        opens the storage without its logs)."""
        return [key for key, where in self.found.items() if where == d]

    def checkpoint(self) -> Future:
        """The checkpoint files' entries are taken now, on the event loop; the files are
        written (each fsynced, renamed, the directory fsynced) on the flusher, after the
        fsyncs queued before, as Kafka's scheduled checkpoint tasks write them. A recovery
        point taken here is one whose fsync has already returned."""
        return self.flusher.submit(_write_checkpoints, self._checkpoint_entries())

    def _checkpoint_entries(self) -> list[tuple[Path, dict]]:
        out = []
        for d, logs in self.logs.items():
            for key in [k for k, plog in logs.items() if plog.deleted]:
                del logs[key]
            kept = self._unopened(d)  # their entries stay as they were read
            live = logs.items()
            recovery_points = ((k, p.recovery_point) for k, p in live)
            out.append((d / files.RECOVERY_POINT_CHECKPOINT, _entries(kept, self.recovery_points[d], recovery_points)))
            # Kafka lists only the logs whose start is inside their first segment.
            starts = ((k, p.log_start_offset) for k, p in live if p.start_is_mid_segment)
            out.append((d / files.LOG_START_CHECKPOINT, _entries(kept, self.start_offsets[d], starts)))
            cleaned = ((k, p.first_dirty) for k, p in live if p.first_dirty)
            out.append((d / files.CLEANER_CHECKPOINT, _entries(kept, self.cleaner_offsets[d], cleaned)))
            replicated = ((k, p.high_watermark) for k, p in live if p.high_watermark is not None)
            out.append((d / files.REPLICATION_CHECKPOINT, _entries(kept, self.high_watermarks[d], replicated)))
        return out

    def clean_logs(self) -> None:
        """Start cleaning the compacted logs that need it (called by the broker's
        maintenance loop every ``log.cleaner.backoff.ms``)."""
        self.cleaner.schedule([plog for logs in self.logs.values() for plog in logs.values()])

    def close(self) -> None:
        try:
            self.cleaner.close()
            self.flusher.shutdown(wait=True)  # the fsyncs, snapshots and deletions queued
            _write_checkpoints(self._checkpoint_entries())
            for d in self.dirs:
                # A directory whose partitions were not all opened (so not all recovered) stays unclean.
                if self.clean[d] or not self._unopened(d):
                    files.write_clean_shutdown(d / files.CLEAN_SHUTDOWN)
        finally:
            self.unlock()

    def unlock(self) -> None:
        """Release the log dirs' locks (at close; a crash releases them with the process)."""
        for lock in self.locks:
            lock.release()


def _read_meta(d: Path, node_id: int) -> files.MetaProperties | None:
    """``d``'s meta.properties, whose node id (``node.id``, or a ZooKeeper-era broker's
    ``broker.id``), where it has one, must be this node's (Kafka's MetaPropertiesEnsemble)."""
    path = d / files.META_PROPERTIES
    try:
        meta = files.read_meta_properties(path)
    except files.CorruptFile as exc:
        raise ConfigError(str(exc)) from None
    if meta is not None and meta.node_id is not None and meta.node_id != node_id:
        raise ConfigError(
            f"Stored node id {meta.node_id} doesn't match previous node id {node_id} in {path}. If you moved your "
            "data, make sure your configured node id matches. If you intend to create a new node, you should "
            "remove all data in your data directories."
        )
    return meta


def _stored_cluster_id(metas: dict[Path, files.MetaProperties | None]) -> str | None:
    """The cluster id the directories' meta.properties agree on (None: none has one)."""
    found = None
    for d, meta in metas.items():
        if meta is None or meta.cluster_id is None:
            continue
        if found is not None and meta.cluster_id != found:
            raise ConfigError(
                f"Invalid cluster.id in: {d / files.META_PROPERTIES}. Expected {found}, but read {meta.cluster_id}"
            )
        found = meta.cluster_id
    return found


def _entries(kept: list, read: dict, live) -> dict[tuple[str, int], int]:
    """A checkpoint's entries: the open logs' (``live``), and those ``read`` at start for
    the partitions no one opened (``kept``)."""
    entries = {k: read[k] for k in kept if k in read}
    entries.update(live)
    return entries


def _write_checkpoints(checkpoints: list[tuple[Path, dict]]) -> None:
    for path, entries in checkpoints:
        files.write_offset_checkpoint(path, entries)
