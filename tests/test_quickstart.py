"""The README's quickstart, run as written: the commands of its code lines between the
``<!-- quickstart -->`` and ``<!-- /quickstart -->`` markers, in order, from an empty
directory, against the ``brokkr serve`` its first line starts. Two things differ from a
user's terminal: the broker takes a free port (the other lines' 127.0.0.1:9092 becomes its
address), and ``.venv/bin/`` is the environment running the tests."""

from __future__ import annotations

import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from serve import Served

README, CI = Path(__file__).parents[1] / "README.md", Path(__file__).parents[1] / ".ci" / "run"
START, END = "<!-- quickstart -->", "<!-- /quickstart -->"
#: Where the quickstart's broker listens, and what it produces.
ADDRESS, PRODUCED = "127.0.0.1:9092", ["hello", "world"]


def quickstart_commands(readme: Path) -> list[str]:
    """The commands of the quickstart: its code lines (indented four spaces) between the markers."""
    text = readme.read_text()
    assert START in text and END in text, f"{readme.name} has no {START} ... {END} block"
    block = text.split(START, 1)[1].split(END, 1)[0]
    return [line[4:] for line in block.splitlines() if line.startswith("    ") and line.strip()]


def test_the_quickstart_runs_as_written(tmp_path):
    serve, *commands = quickstart_commands(README)
    here = f"{Path(sys.executable).parent}/"
    words = shlex.split(serve.replace(".venv/bin/", here))
    assert "serve" in words, f"the quickstart starts with brokkr serve, not {serve!r}"
    at = words.index("serve")
    served = Served(
        *words[at + 1 :], "--override", "listeners=PLAINTEXT://127.0.0.1:0", cwd=tmp_path, program=words[:at]
    )
    printed, skipped = {}, []
    try:
        for command in commands:
            if command.startswith("kcat") and shutil.which("kcat") is None:
                skipped.append(command)
                continue
            done = subprocess.run(
                ["bash", "-c", command.replace(".venv/bin/", here).replace(ADDRESS, served.address)],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
            printed[command] = done.stdout
        served.proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert served.proc.wait(timeout=30) == 0, "stopped cleanly"
    finally:
        served.kill()
    readers = [c for c in printed if "console-consumer" in c or c.startswith("kcat")]
    assert readers and all(printed[c].splitlines() == PRODUCED for c in readers), printed
    listed = [c for c in printed if c.startswith("ls data/quickstart-0")]
    assert listed and "00000000000000000000.log" in printed[listed[0]].split()
    dumped = "".join(printed[c] for c in printed if "dump-log" in c)
    assert all(f"payload: {value}" in dumped for value in PRODUCED), dumped
    logged = served.output()
    assert f"listening on {served.address} (data in {tmp_path / 'data'})" in logged, "the start line says where"
    assert "INFO brokkr: brokkr node 0 stopped" in logged and ": connection from" not in logged, logged
    if skipped:
        pytest.skip(f"kcat is not installed: not run: {skipped}")


def test_the_serving_and_the_test_environments_are_apart():
    """The README's first two commands: serving from an environment of brokkr alone, the
    tests from another, which also holds the example plugins (a ``brokkr serve`` there loads
    them); CI runs the second one as written."""
    text = README.read_text()
    serve, test = [line[4:] for line in text.split(START, 1)[0].splitlines() if line.startswith("    ")][:2]
    serving, testing = (shlex.split(command)[3] for command in (serve, test))  # python3 -m venv <dir>
    assert serving != testing and "examples/" not in serve and "examples/" in test
    assert f"{serving}/bin/brokkr serve" in serve and f"{testing}/bin/python -m pytest" in test
    assert test in CI.read_text().splitlines()
