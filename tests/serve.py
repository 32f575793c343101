"""``brokkr serve`` in a child process, as a user runs it."""

from __future__ import annotations

import glob
import re
import subprocess
import sys
import threading
import time


class Served:
    """A ``brokkr serve`` process: its address once it listens, and everything it logged
    (read continuously, so a chatty broker never blocks on a full pipe)."""

    def __init__(self, *args: str, cwd, timeout: float = 30, program: tuple[str, ...] = ()):
        """``program``: how ``brokkr`` is run (default: ``python -m brokkr.core.cli``)."""
        command = [*(program or (sys.executable, "-m", "brokkr.core.cli")), "serve", *args]
        self.proc = subprocess.Popen(command, cwd=cwd, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            self.lines.append(line)
            if m := re.search(r"listening on (\S+)", line):
                self.address = m.group(1)
                break
            if not line and self.proc.poll() is not None:
                break
        if not hasattr(self, "address"):
            self.proc.kill()
            raise AssertionError("broker did not start:\n" + "".join(self.lines))
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def output(self) -> str:
        """What the broker logged; complete once the process has exited."""
        if self.proc.poll() is not None:
            self._drain.join(timeout=10)
        return "".join(self.lines)

    def rss_mb(self, children: bool = False) -> float:
        """The broker's resident memory (VmRSS), in MiB; with ``children``, that of its child
        processes added (its record-walk workers, multiprocessing's resource tracker)."""
        pids = [self.proc.pid]
        if children:
            for tasks in glob.glob(f"/proc/{self.proc.pid}/task/*/children"):
                with open(tasks) as f:
                    pids += [int(pid) for pid in f.read().split()]
        return sum(_rss_kib(pid) for pid in pids) / 1024

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except FileNotFoundError:  # a child that ended meanwhile
        return 0
