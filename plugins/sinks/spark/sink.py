"""The Spark Parquet sink: mirrors partitions into a lake beside the broker.

Off unless ``brokkr.sink.lake`` is set. The broker side (this plugin) only *records work*
from the observer hooks, closed segments (``brokkr_segment_rolled``, and those found at
start) and high watermarks, and every ``brokkr.sink.poll.ms`` writes it to a work file
(``brokkr-sink-spark-work.json`` in the first log dir, atomically, off the event loop)
and reads back the commit logs. The copying is done by a separate process
(``python -m brokkr.plugins.sinks.spark.mirror``, :mod:`.mirror`) with its own Spark
driver, which catches up at its own pace; the plugin restarts it if it dies. So a slow
lake never slows the broker, and with ``brokkr.sink.retention.wait=true`` (the default)
retention keeps every segment until it is mirrored (``brokkr_sink_mirrored_offset``).
Needs a storage with segment files (the default ``segment`` one). Spark settings come
from ``brokkr.sink.spark.*`` (``conf.<key>`` for any Spark setting, passed as given), value
schemas from ``brokkr.sink.value.schema.<topic>`` (both declared as families of settings).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from brokkr.core.config import ConfigDef, ConfigType, one_of
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import hookimpl
from brokkr.core.sinks import SinkProgress

from .mirror import CATALOG_ENV, CONF_ENV, CommitLog, default_commit_dir
from .tables import FORMATS, KEY_VALUE, MODES, TableSettings, missing_for, parse_partition_spec

if TYPE_CHECKING:
    from brokkr.core.broker import Broker
    from brokkr.core.log import SegmentInfo
    from brokkr.core.partition import Partition

log = logging.getLogger("brokkr.sink.spark")

CONF_PREFIX = "brokkr.sink.spark.conf."
#: ``brokkr.sink.iceberg.catalog.<property>``: pyiceberg's catalog properties.
CATALOG_PREFIX = "brokkr.sink.iceberg.catalog."
TABLE_MODE = "brokkr.sink.table.mode"
TABLE_UPSERT = "brokkr.sink.table.upsert"
#: ``brokkr.sink.value.schema.<topic>=<Spark DDL>``: typed columns parsed from JSON values.
SCHEMA_PREFIX = "brokkr.sink.value.schema."
WORK_FILE = "brokkr-sink-spark-work.json"


def _partition_spec(value: str) -> None:
    parse_partition_spec(value, None)  # the columns, per the table mode: TableSettings.check


def _topic_table_mode(value: str) -> None:
    """A topic's typed mode is refused where its packages are missing (not a mirror's traceback later)."""
    one_of(*MODES)(value)
    if (module := missing_for(value)) is not None:
        raise ValueError(f"needs {module}: pip install 'brokkr[lake]'")


def _positive(value: int) -> None:
    if value <= 0:
        raise ValueError("must be positive")


CONFIGS = [
    ConfigDef(
        "brokkr.sink.lake",
        ConfigType.STRING,
        None,
        "Where the Spark sink mirrors to (a directory or a URI Spark writes); unset: no sink.",
    ),
    ConfigDef(
        "brokkr.sink.commit.dir",
        ConfigType.STRING,
        None,
        "The local directory of the sink's commit logs (default <lake>/_brokkr_commits).",
    ),
    ConfigDef("brokkr.sink.topics", ConfigType.LIST, [], "The topics to mirror (default: all)."),
    ConfigDef(
        "brokkr.sink.active.interval.ms",
        ConfigType.LONG,
        60000,
        "How often the active segment is mirrored up to the high watermark.",
    ),
    ConfigDef(
        "brokkr.sink.poll.ms",
        ConfigType.LONG,
        1000,
        "How often work is handed to the mirror process and its progress read.",
    ),
    ConfigDef(
        "brokkr.sink.retention.wait",
        ConfigType.BOOLEAN,
        True,
        "Retention keeps segments the sink has not mirrored yet.",
    ),
    ConfigDef("brokkr.sink.spark.master", ConfigType.STRING, "local[*]", "The Spark master of the mirror process."),
    ConfigDef("brokkr.sink.spark.app.name", ConfigType.STRING, "brokkr-mirror", "The Spark application name."),
    ConfigDef(CONF_PREFIX, ConfigType.STRING, None, "conf.<key>: any Spark setting, passed as given.", prefix=True),
    ConfigDef(SCHEMA_PREFIX, ConfigType.STRING, None, "<topic>: Spark DDL of the topic's JSON values.", prefix=True),
    # -- tables (plugins/sinks/spark/tables.py) --
    ConfigDef(
        "brokkr.sink.format",
        ConfigType.STRING,
        "parquet",
        "parquet (Parquet files and brokkr's commit logs), iceberg or delta (one table per topic).",
        validator=one_of(*FORMATS),
    ),
    ConfigDef(
        CATALOG_PREFIX,
        ConfigType.STRING,
        None,
        "catalog.<property>: a pyiceberg catalog property (type, uri, warehouse, ...); "
        "default an SQL catalog in <lake>/_brokkr_iceberg.db.",
        prefix=True,
    ),
    ConfigDef("brokkr.sink.iceberg.namespace", ConfigType.STRING, "brokkr", "The Iceberg namespace of the tables."),
    ConfigDef(
        TABLE_MODE, ConfigType.STRING, KEY_VALUE, "The rows of a table: " + ", ".join(MODES), validator=one_of(*MODES)
    ),
    ConfigDef(
        TABLE_MODE,
        ConfigType.STRING,
        None,
        "This topic's table mode (default brokkr.sink.table.mode).",
        validator=_topic_table_mode,
        topic=True,
    ),
    ConfigDef(
        TABLE_UPSERT,
        ConfigType.BOOLEAN,
        False,
        "Tables hold the latest row per key, a tombstone deletes it (always for compacted topics).",
    ),
    ConfigDef(TABLE_UPSERT, ConfigType.BOOLEAN, None, "This topic's table is an upsert table.", topic=True),
    ConfigDef(
        "brokkr.sink.table.partition",
        ConfigType.STRING,
        None,
        "The tables' partition spec: transforms of columns, e.g. day(timestamp), identity(kafka.partition).",
        validator=_partition_spec,
    ),
    ConfigDef(
        "brokkr.sink.table.flush.records",
        ConfigType.LONG,
        500000,
        "The most offsets one table commit covers (bounds the files written and the driver's memory).",
        validator=_positive,
    ),
    ConfigDef(
        "brokkr.sink.table.flush.bytes",
        ConfigType.LONG,
        50 * 1024 * 1024,
        "The most bytes of the log (batches as stored, as fetch.max.bytes counts them) one table commit "
        "covers: what one commit brings into the mirror driver's memory. A larger batch goes alone.",
        validator=_positive,
    ),
    ConfigDef(
        "brokkr.sink.table.compact.interval.ms",
        ConfigType.LONG,
        3600000,
        "How often the mirror compacts small files and expires old snapshots (0: never).",
    ),
    ConfigDef(
        "brokkr.sink.table.compact.min.files",
        ConfigType.INT,
        8,
        "A table is compacted once it has this many files under the target size.",
        validator=_positive,
    ),
    ConfigDef(
        "brokkr.sink.table.target.file.bytes",
        ConfigType.LONG,
        128 * 1024 * 1024,
        "The size compaction writes files up to; smaller files are compacted.",
        validator=_positive,
    ),
    ConfigDef(
        "brokkr.sink.table.snapshot.retention.ms",
        ConfigType.LONG,
        7 * 24 * 3600 * 1000,
        "Iceberg snapshots older than this are expired, Delta files removed this long ago vacuumed.",
    ),
    ConfigDef(
        "brokkr.sink.schema.registry.url",
        ConfigType.STRING,
        None,
        "The schema registry of the typed table modes (default: this broker's own).",
    ),
]


@hookimpl
def brokkr_config_definitions() -> list[ConfigDef]:
    return CONFIGS


class SparkSink:
    """One broker's sink: the recorded work, the mirror process, the mirrored offsets;
    registered as a plugin of that broker (``brokkr_broker_starting``)."""

    @hookimpl
    def brokkr_broker_started(self) -> None:
        self.start()

    @hookimpl
    def brokkr_broker_stopping(self) -> None:
        self.stop()

    @hookimpl
    def brokkr_segment_rolled(self, partition: Partition, segment: SegmentInfo) -> None:
        if self.wants(partition):
            self.track(partition)
            self.progress.segment_closed(partition.topic.name, partition.index, segment)

    @hookimpl
    def brokkr_high_watermark_advanced(self, partition: Partition, new: int) -> None:
        # The mirror copies what a read_committed consumer may read: the last stable offset
        # (the high watermark, or below it the start of the oldest open transaction). It
        # moves only with the high watermark, so this is where it is taken.
        if self.wants(partition):
            self.track(partition)
            self.progress.high_watermark(partition.topic.name, partition.index, partition.last_stable_offset)

    @hookimpl
    def brokkr_sink_mirrored_offset(self, partition: Partition) -> int | None:
        if not self.retention_wait or not self.wants(partition):
            return None
        return self.progress.mirrored_offset(partition.topic.name, partition.index)

    def __init__(self, broker: Broker):
        config = broker.config
        self.broker = broker
        self.lake: str = config["brokkr.sink.lake"]
        self.topics = set(config["brokkr.sink.topics"])
        self.commit_dir = default_commit_dir(self.lake, config["brokkr.sink.commit.dir"])
        self.commits = CommitLog(self.commit_dir)
        self.poll_s = config["brokkr.sink.poll.ms"] / 1000
        self.retention_wait: bool = config["brokkr.sink.retention.wait"]
        self.progress = SinkProgress()
        self.partitions: dict[tuple[str, int], Partition] = {}
        dirs = config["log.dirs"]
        self.work_file = Path(dirs[0] if isinstance(dirs, list) else str(dirs).split(",")[0].strip()) / WORK_FILE
        #: Spark settings go to the mirror process in its environment, not on its command
        #: line, which any local user can read (``ps``): they may hold secrets (fs.s3a.secret.key).
        self.spark_conf = json.dumps(
            {k[len(CONF_PREFIX) :]: str(v) for k, v in config.explicit.items() if k.startswith(CONF_PREFIX)}
        )
        self.command = [
            sys.executable,
            "-m",
            "brokkr.plugins.sinks.spark.mirror",
            "--work",
            str(self.work_file),
            "--lake",
            self.lake,
            "--commit-dir",
            str(self.commit_dir),
            "--master",
            config["brokkr.sink.spark.master"],
            "--app-name",
            config["brokkr.sink.spark.app.name"],
            "--poll-ms",
            str(config["brokkr.sink.poll.ms"]),
            "--active-interval-ms",
            str(config["brokkr.sink.active.interval.ms"]),
            *(
                f"--value-schema={k[len(SCHEMA_PREFIX) :]}={v}"
                for k, v in sorted(config.explicit.items())
                if k.startswith(SCHEMA_PREFIX)
            ),
            *table_options(config),
        ]
        self.format: str = config["brokkr.sink.format"]
        #: The Iceberg catalog's properties go in the environment too (credentials).
        self.catalog = json.dumps(catalog_properties(config))
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._task: asyncio.Task | None = None
        # A tick's hand-over may still run on its thread when stop() hands over the last work.
        self._handing_over = threading.Lock()

    def wants(self, partition: Partition) -> bool:
        name = partition.topic.name
        if self.format != "parquet" and name in self.broker.internal_topics and name not in self.topics:
            return False  # the brokers' own records (__consumer_offsets, _schemas, ...) make no table unless asked
        return not self.topics or name in self.topics

    def track(self, partition: Partition) -> None:
        key = (partition.topic.name, partition.index)
        if self.partitions.get(key) is not partition:  # new, or its topic was deleted and created again
            self.partitions[key] = partition
            self.progress.seed(*key, partition.log.segments(), partition.last_stable_offset)

    # -- the loop's side: only recording, and a tick every poll.ms ------------------------

    def start(self) -> None:
        for topic in self.broker.topics.values():
            for p in topic.partitions:
                if self.wants(p):
                    self.track(p)
        self._refresh(self._work_document())
        self._task = asyncio.get_running_loop().create_task(self._run(), name="brokkr-sink-spark")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                self._supervise()
                await loop.run_in_executor(None, self._refresh, self._work_document())
            except Exception:
                log.exception("the Spark sink's tick failed")
            await asyncio.sleep(self.poll_s)

    def _work_document(self) -> bytes:
        parts = []
        for (topic, index), p in sorted(self.partitions.items()):
            if p.topic.name not in self.broker.topics or self.broker.topics[p.topic.name] is not p.topic:
                continue  # deleted
            active = p.log.segments()[-1]
            parts.append(
                {
                    "topic": topic,
                    "partition": index,
                    "closed": [[s.base_offset, s.next_offset, s.path] for s in self.progress.closed(topic, index)],
                    "active": [active.base_offset, active.path] if active.path else None,
                    "high_watermark": self.progress.work[(topic, index)].high_watermark,
                }
            )
            if self.format != "parquet":  # the topic's own table settings
                parts[-1]["table"] = topic_table_options(p.topic.config)
        return json.dumps({"updated_ms": int(time.time() * 1000), "partitions": parts}).encode()

    def _refresh(self, work: bytes) -> None:
        """Off the loop: hand the work over, read what is mirrored."""
        from brokkr.plugins.storage.segment.files import write_atomically

        with self._handing_over:
            write_atomically(self.work_file, work)
            for (topic, index), offset in self.commits.all().items():
                self.progress.mark_mirrored(topic, index, offset)

    def _supervise(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        if self.process is not None:
            self.restarts += 1
            log.warning("the mirror process exited with %s; restarting it", self.process.returncode)
        env = dict(os.environ, PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", sys.executable))
        env[CONF_ENV] = self.spark_conf
        env[CATALOG_ENV] = self.catalog
        command = list(self.command)
        registry = self.broker.config["brokkr.sink.schema.registry.url"] or self.broker.services.get(REGISTRY)
        if self.format != "parquet" and registry:
            command.append(f"--registry-url={registry}")
        self.process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
        log.info("mirror process %d started for the lake %s", self.process.pid, self.lake)

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        try:
            self._refresh(self._work_document())
        except Exception:
            log.exception("the Spark sink's last hand-over failed")
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


PLUGIN_NAME = "brokkr.plugins.sinks.spark.sink:sink"


def sink_of(broker: Broker) -> SparkSink | None:
    """The broker's Spark sink, if it has one."""
    return broker.pm.get_plugin(PLUGIN_NAME)


@hookimpl
def brokkr_broker_starting(broker: Broker) -> None:
    """With ``brokkr.sink.lake`` set, the broker gets its own sink, registered as a plugin
    of that broker; without, nothing is registered and appends pay nothing. A sink that
    cannot run (no pyspark, no Java) stops the broker from starting, saying why."""
    if not broker.config["brokkr.sink.lake"]:
        return
    check_spark_installed("brokkr.sink.lake")
    check_table_settings(broker.config)
    broker.pm.register(SparkSink(broker), name=PLUGIN_NAME)


REGISTRY = "schema-registry"  # its URL's name in Broker.services


def catalog_properties(config) -> dict[str, str]:
    return {k[len(CATALOG_PREFIX) :]: str(v) for k, v in config.explicit.items() if k.startswith(CATALOG_PREFIX)}


def table_settings(config) -> TableSettings | None:
    """The broker's table settings (None for the parquet format)."""
    if config["brokkr.sink.format"] == "parquet":
        return None
    return TableSettings(
        format=config["brokkr.sink.format"],
        lake=config["brokkr.sink.lake"],
        mode=config[TABLE_MODE],
        upsert=config[TABLE_UPSERT],
        partition=config["brokkr.sink.table.partition"],
        catalog=catalog_properties(config),
        namespace=config["brokkr.sink.iceberg.namespace"],
        flush_records=config["brokkr.sink.table.flush.records"],
        flush_bytes=config["brokkr.sink.table.flush.bytes"],
        compact_interval_s=config["brokkr.sink.table.compact.interval.ms"] / 1000,
        compact_min_files=config["brokkr.sink.table.compact.min.files"],
        target_file_bytes=config["brokkr.sink.table.target.file.bytes"],
        snapshot_retention_s=config["brokkr.sink.table.snapshot.retention.ms"] / 1000,
        registry_url=config["brokkr.sink.schema.registry.url"],
    )


def table_options(config) -> list[str]:
    """The table settings as the mirror process's options (the catalog's go in its environment)."""
    settings = table_settings(config)
    if settings is None:
        return []
    options = [
        f"--format={settings.format}",
        f"--table-mode={settings.mode}",
        f"--iceberg-namespace={settings.namespace}",
        f"--flush-records={settings.flush_records}",
        f"--flush-bytes={settings.flush_bytes}",
        f"--compact-interval-ms={config['brokkr.sink.table.compact.interval.ms']}",
        f"--compact-min-files={settings.compact_min_files}",
        f"--target-file-bytes={settings.target_file_bytes}",
        f"--snapshot-retention-ms={config['brokkr.sink.table.snapshot.retention.ms']}",
    ]
    if settings.upsert:
        options.append("--upsert")
    if settings.partition:
        options.append(f"--partition-spec={settings.partition}")
    return options


def topic_table_options(config) -> dict:
    """A topic's table settings for the mirror: its mode (None: the broker's) and whether its
    table is an upsert table (a compacted topic's is, unless the topic says otherwise)."""
    upsert = config.get(TABLE_UPSERT)
    if upsert is None:
        upsert = True if "compact" in (config.get("cleanup.policy") or []) else None
    return {"mode": config.get(TABLE_MODE), **({"upsert": upsert} if upsert is not None else {})}


def check_table_settings(config) -> None:
    """ConfigError when the table settings cannot work (a missing package included)."""
    settings = table_settings(config)
    if settings is None:
        return
    try:
        settings.check()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_spark_installed(needed_by: str) -> None:
    """ConfigError naming what to install when pyspark or a Java runtime is missing."""
    try:
        found = importlib.util.find_spec("pyspark") is not None
    except ImportError:
        found = False
    if not found:
        raise ConfigError(f"{needed_by} needs pyspark: pip install 'brokkr[spark]'")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ConfigError(f"{needed_by} needs a Java runtime (17 or newer) for Spark: none on PATH or in JAVA_HOME")
