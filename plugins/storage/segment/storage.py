"""The broker's log directories (Kafka's LogManager): which partition lives where, the
checkpoints, the clean-shutdown marker and the topic catalog.

At start, each of ``log.dirs`` is created if needed and checked against its
``meta.properties`` (a directory written by another node id is refused; the cluster id
is kept across restarts). A directory without ``.kafka_cleanshutdown`` was not shut down
cleanly, so its partitions are recovered from their recovery points. Partition
directories the catalog does not list (copied from a Kafka broker, say) are adopted with
the ids and settings Kafka's KRaft metadata log gives them (:mod:`.kraft`), or without it
with no time or size retention, and recorded in the catalog. ``__cluster_metadata`` itself
is left as it is. New partitions go to the directory holding the fewest.

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
from concurrent.futures import Future
from pathlib import Path

from brokkr.core.config import BrokerConfig, TopicConfig
from brokkr.core.errors import ConfigError
from brokkr.core.log import StoredTopic
from brokkr.core.partition import CLUSTER_METADATA_TOPIC

from . import files, kraft
from .cleaner import LogCleaner
from .flusher import Flusher
from .partition_log import SegmentLog

log = logging.getLogger("brokkr.storage")


class SegmentStorage:
    """Satisfies :class:`brokkr.core.log.Storage`."""

    durable = True

    def __init__(self, config: BrokerConfig, codecs: dict, node_id: int, cluster_id: str):
        self.codecs = codecs
        self.config = config
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
        for d in self.dirs:
            self._open_dir(d, node_id)

    def _open_dir(self, d: Path, node_id: int) -> None:
        d.mkdir(parents=True, exist_ok=True)
        meta = files.read_meta_properties(d / files.META_PROPERTIES)
        marker = d / files.CLEAN_SHUTDOWN
        self.clean[d] = marker.exists() or not meta  # a new directory has nothing to recover
        if meta:
            if meta.get("node.id") != str(node_id):
                raise ConfigError(f"Stored node id {meta.get('node.id')} in {d} doesn't match node.id {node_id}")
            self.cluster_id = meta.get("cluster.id", self.cluster_id)
        else:
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
        for path in d.iterdir():
            if path.is_dir() and path.name.endswith("-delete"):
                shutil.rmtree(path)  # a topic deletion interrupted by a crash
            elif path.is_dir() and (key := files.parse_partition_dir(path.name)):
                if key[0] == CLUSTER_METADATA_TOPIC:
                    continue  # Kafka's KRaft metadata log: read for adoption, never opened as a topic
                if key in self.found:
                    raise ConfigError(f"partition {path.name} is in both {self.found[key]} and {d}")
                self.found[key] = d
        if not self.clean[d]:
            log.warning("%s was not shut down cleanly; recovering its partitions", d)

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
        until an operator sets it: adopting data must never delete it."""
        kraft = self._kraft_topics()
        adopted, guessed = [], []
        for name, partitions in sorted(unlisted.items()):
            first = min(partitions)
            metadata = self.found[name, first] / f"{name}-{first}" / files.PARTITION_METADATA
            topic_id = files.read_partition_metadata(metadata)
            known = kraft.get(name) if kraft else None
            if known is not None:
                count = max([*partitions, *known.leader_epochs]) + 1
                self.adopted_epochs.update(((name, p), e) for p, e in known.leader_epochs.items() if p in partitions)
                configs = self._known_topic_configs(name, known.configs)
                adopted.append(StoredTopic(name, topic_id or known.topic_id, count, configs))
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
        self.cleaner.close()
        self.flusher.shutdown(wait=True)  # the fsyncs, snapshots and deletions queued
        _write_checkpoints(self._checkpoint_entries())
        for d in self.dirs:
            # A directory whose partitions were not all opened (so not all recovered) stays unclean.
            if self.clean[d] or not self._unopened(d):
                files.write_clean_shutdown(d / files.CLEAN_SHUTDOWN)


def _entries(kept: list, read: dict, live) -> dict[tuple[str, int], int]:
    """A checkpoint's entries: the open logs' (``live``), and those ``read`` at start for
    the partitions no one opened (``kept``)."""
    entries = {k: read[k] for k in kept if k in read}
    entries.update(live)
    return entries


def _write_checkpoints(checkpoints: list[tuple[Path, dict]]) -> None:
    for path, entries in checkpoints:
        files.write_offset_checkpoint(path, entries)
