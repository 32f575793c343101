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
import time
from pathlib import Path
from typing import TYPE_CHECKING

from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.errors import ConfigError
from brokkr.core.plugins import hookimpl
from brokkr.core.sinks import SinkProgress

from .mirror import CONF_ENV, CommitLog, default_commit_dir

if TYPE_CHECKING:
    from brokkr.core.broker import Broker
    from brokkr.core.log import SegmentInfo
    from brokkr.core.partition import Partition

log = logging.getLogger("brokkr.sink.spark")

CONF_PREFIX = "brokkr.sink.spark.conf."
#: ``brokkr.sink.value.schema.<topic>=<Spark DDL>``: typed columns parsed from JSON values.
SCHEMA_PREFIX = "brokkr.sink.value.schema."
WORK_FILE = "brokkr-sink-spark-work.json"

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
        ]
        self.process: subprocess.Popen | None = None
        self.restarts = 0
        self._task: asyncio.Task | None = None

    def wants(self, partition: Partition) -> bool:
        return not self.topics or partition.topic.name in self.topics

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
        return json.dumps({"updated_ms": int(time.time() * 1000), "partitions": parts}).encode()

    def _refresh(self, work: bytes) -> None:
        """Off the loop: hand the work over, read what is mirrored."""
        from brokkr.plugins.storage.segment.files import write_atomically

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
        self.process = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL)
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
    broker.pm.register(SparkSink(broker), name=PLUGIN_NAME)


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
