"""librdkafka's mock cluster in a process of its own, with topics of any partition count.

A client configured with ``test.mock.num.brokers`` starts a mock cluster inside itself, which
serves only that process's clients well and only auto-created topics (4 partitions: the mock
answers no CreateTopics). To load it from several client processes (500 producers) and to
give it a 1000-partition topic, this module runs the cluster alone in a child process through
librdkafka's C API (``rd_kafka_mock_cluster_new``, ``rd_kafka_mock_topic_create``), loaded
with ctypes from the library confluent-kafka ships. The child prints the cluster's bootstrap
address, then serves one command per line on stdin (``create <topic> <partitions>``, answered
``ok`` or ``error <text>``) and exits when stdin closes. The mock then faces clients exactly
as a brokkr subprocess does: over loopback TCP, from another process, its CPU measurable.
"""

from __future__ import annotations

import ctypes
import glob
import os
import select
import subprocess
import sys

import confluent_kafka
from produce import stop_broker  # benchmarks/ is the script's directory

STARTUP_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 30.0


def _library() -> ctypes.CDLL:
    libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
    paths = glob.glob(os.path.join(libs, "librdkafka*.so*")) or ["librdkafka.so.1"]  # wheel's copy, else the system's
    lib = ctypes.CDLL(paths[0])
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_err2str.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


def serve() -> None:
    """The child: one mock broker until stdin closes."""
    lib = _library()
    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
    rk = lib.rd_kafka_new(0, conf, errstr, len(errstr))  # RD_KAFKA_PRODUCER: a handle for the cluster to hang on
    if not rk:
        raise SystemExit(f"rd_kafka_new: {errstr.value.decode()}")
    cluster = lib.rd_kafka_mock_cluster_new(rk, 1)
    print(lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(), flush=True)
    for line in sys.stdin:
        command, *rest = line.split()
        if command == "create":
            topic, partitions = rest[0], int(rest[1])
            err = lib.rd_kafka_mock_topic_create(cluster, topic.encode(), partitions, 1)
            print("ok" if err == 0 else f"error {lib.rd_kafka_err2str(err).decode()}", flush=True)
        else:
            print(f"error unknown command {command!r}", flush=True)
    lib.rd_kafka_mock_cluster_destroy(cluster)
    lib.rd_kafka_destroy(rk)


class MockCluster:
    """The parent's handle on a mock cluster child process (a context manager)."""

    def __init__(self, stderr=None):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            self.bootstrap = self._reply(STARTUP_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _reply(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            code = self.proc.poll()
            raise RuntimeError(f"mock cluster gave no answer within {timeout:.0f}s (exit code {code})")
        return line.strip()

    def create_topic(self, topic: str, partitions: int = 1) -> None:
        self.proc.stdin.write(f"create {topic} {partitions}\n")
        self.proc.stdin.flush()
        answer = self._reply(COMMAND_TIMEOUT_S)
        if answer != "ok":
            raise RuntimeError(f"mock cluster could not create {topic}: {answer}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Closing stdin ends the child; SIGTERM, then SIGKILL, if it does not."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            stop_broker(self.proc)
        self.proc.stdout.close()

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    serve()
