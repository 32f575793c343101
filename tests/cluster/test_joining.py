"""Joining a cluster at start: a broker whose ZooKeeper does not answer within
``zookeeper.connection.timeout.ms`` stops with one line naming ``zookeeper.connect``, exit
status 1, and never listened meanwhile (it listens only once it has joined)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from brokkr.core.testing import free_port

TIMEOUT_MS = 1500


def test_an_unreachable_zookeeper_stops_the_broker_in_one_line_before_it_listens(tmp_path):
    pytest.importorskip("kazoo")
    port, closed = free_port(), free_port()
    settings = {
        "zookeeper.connect": f"127.0.0.1:{closed}",
        "zookeeper.connection.timeout.ms": TIMEOUT_MS,
        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "log.dirs": str(tmp_path / "data"),
    }
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "brokkr.core.cli", "serve", *(f"--override={k}={v}" for k, v in settings.items())],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        accepted = 0
        while proc.poll() is None and time.monotonic() - started < 30:
            with socket.socket() as s:
                s.settimeout(1)
                accepted += s.connect_ex(("127.0.0.1", port)) == 0
            time.sleep(0.02)
        stderr = proc.communicate(timeout=10)[1]
    finally:
        proc.kill()
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, stderr
    assert elapsed < TIMEOUT_MS / 1000 + 15, "bounded by the connection timeout (and the interpreter's start)"
    assert accepted == 0, "no listener may be open before the cluster is joined"
    assert "Traceback" not in stderr
    [line] = [line for line in stderr.splitlines() if "zookeeper.connect" in line]
    assert line.startswith(
        f"brokkr: could not connect to ZooKeeper at zookeeper.connect=127.0.0.1:{closed} within {TIMEOUT_MS} ms "
        "(zookeeper.connection.timeout.ms): "
    )
    assert line.endswith("Connection refused"), "with the first attempt's failure"
    assert [line for line in stderr.splitlines() if "WARNING" in line or "ERROR" in line] == []
