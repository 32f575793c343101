"""The segment storage's durable small writes (files.write_synced, fsync_path,
write_atomically and replace_files) in C and in Python: the same files, the same errors;
and the flusher's batches of file replacements, in order with the rest of its work."""

from __future__ import annotations

import errno
import os
import threading

import pytest
from brokkr.plugins.storage.segment import files
from brokkr.plugins.storage.segment.flusher import Flusher


@pytest.fixture(params=["c", "python"])
def impl(request, monkeypatch):
    """Each test runs with the C module and without it."""
    if request.param == "python":
        monkeypatch.setattr(files, "_files", None)
    elif files._files is None:
        pytest.skip("brokkr.plugins.storage.segment._files is not built")
    return request.param


def test_write_atomically_replaces_the_file_and_leaves_no_temporary(tmp_path, impl):
    path = tmp_path / "leader-epoch-checkpoint"
    files.write_atomically(path, b"0\n1\n0 0\n")
    files.write_atomically(path, bytearray(b"0\n2\n0 0\n3 7\n"))
    assert path.read_bytes() == b"0\n2\n0 0\n3 7\n"
    assert os.listdir(tmp_path) == ["leader-epoch-checkpoint"]
    files.write_atomically(path, memoryview(b""))
    assert path.read_bytes() == b""


def test_write_synced_writes_the_whole_file(tmp_path, impl):
    path = tmp_path / "00000000000000000042.snapshot"
    data = os.urandom(3 * 1024 * 1024 + 5)
    path.write_bytes(b"x" * (5 * 1024 * 1024))  # longer before: truncated
    files.write_synced(path, data)
    assert path.read_bytes() == data


def test_fsync_path_skips_a_file_that_is_gone(tmp_path, impl):
    files.fsync_path(tmp_path)
    files.fsync_path(tmp_path / "gone")  # no error


@pytest.mark.parametrize(
    "case",
    [
        "no directory",  # open of the temporary file fails
        "a directory in the way",  # rename over a directory fails
        "a file for a directory",  # open fails: not a directory
    ],
)
def test_errors_are_the_same_in_c_and_in_python(tmp_path, monkeypatch, case):
    if files._files is None:
        pytest.skip("brokkr.plugins.storage.segment._files is not built")
    if case == "no directory":
        path = tmp_path / "missing" / "f"
    elif case == "a directory in the way":
        path = tmp_path / "f"
        path.mkdir()
    else:
        (tmp_path / "plain").write_bytes(b"")
        path = tmp_path / "plain" / "f"

    def outcome():
        with pytest.raises(OSError) as raised:
            files.write_atomically(path, b"data")
        exc = raised.value
        return type(exc), exc.errno, exc.filename, exc.filename2, str(exc)

    in_c = outcome()
    monkeypatch.setattr(files, "_files", None)
    in_python = outcome()
    assert in_c == in_python
    assert in_c[1] in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR)


def test_replace_files_writes_the_rest_past_a_failure(tmp_path, impl):
    items = [(tmp_path / "a", b"1"), (tmp_path / "missing" / "b", b"2"), (tmp_path / "c", b"3")]
    errors = files.replace_files(items)
    assert [type(e) for e in errors] == [type(None), FileNotFoundError, type(None)]
    assert errors[1].filename == str(tmp_path / "missing" / "b.tmp")
    assert (tmp_path / "a").read_bytes() == b"1" and (tmp_path / "c").read_bytes() == b"3"
    assert files.replace_files([]) == []


def test_the_c_files_module_refuses_what_is_not_a_list_of_four(tmp_path):
    if files._files is None:
        pytest.skip("brokkr.plugins.storage.segment._files is not built")
    with pytest.raises(TypeError):
        files._files.write_atomically(None)
    with pytest.raises(TypeError):
        files._files.write_atomically([(str(tmp_path / "t"), str(tmp_path / "p"), str(tmp_path))])
    with pytest.raises(TypeError):
        files._files.write_atomically([(str(tmp_path / "t"), str(tmp_path / "p"), str(tmp_path), "text")])
    with pytest.raises(ValueError):  # a NUL in a name
        files._files.write_atomically([("a\0b", str(tmp_path / "p"), str(tmp_path), b"")])
    assert os.listdir(tmp_path) == []


def test_the_c_files_module_is_built():
    """Where brokkr was installed with a C compiler (CI, and the README's commands), the
    flusher's small writes run in C; set BROKKR_PYTHON_ONLY=1 where that cannot be built."""
    if os.environ.get("BROKKR_PYTHON_ONLY"):
        pytest.skip("BROKKR_PYTHON_ONLY is set")
    assert files._files is not None, "brokkr.plugins.storage.segment._files is not built: pip install -e . with gcc"


# -- the flusher's batches ----------------------------------------------------------------


@pytest.fixture
def flusher():
    f = Flusher()
    yield f
    f.shutdown(wait=True)


def test_replacements_queued_together_are_one_job_and_the_last_data_wins(tmp_path, flusher, monkeypatch):
    calls = []
    real = files.replace_files
    monkeypatch.setattr(files, "replace_files", lambda items: calls.append(list(items)) or real(items))
    gate = threading.Event()
    flusher.submit(gate.wait, 10)
    for i in range(100):
        flusher.replace_file(tmp_path / f"f{i}", b"first", lambda: True)
    flusher.replace_file(tmp_path / "f7", b"again", lambda: True)
    gate.set()
    flusher.submit(lambda: None).result(timeout=10)
    assert len(calls) == 1 and len(calls[0]) == 100
    assert (tmp_path / "f7").read_bytes() == b"again" and (tmp_path / "f8").read_bytes() == b"first"


def test_work_queued_between_replacements_keeps_its_place(tmp_path, flusher):
    path = tmp_path / "f"
    seen = []
    gate = threading.Event()
    flusher.submit(gate.wait, 10)
    flusher.replace_file(path, b"1", lambda: True)
    flusher.submit(lambda: seen.append(path.read_bytes()))  # runs after the first write, before the second
    flusher.replace_file(path, b"2", lambda: True)
    gate.set()
    flusher.submit(lambda: None).result(timeout=10)
    assert seen == [b"1"] and path.read_bytes() == b"2"


def test_a_replacement_queued_while_its_batch_runs_goes_in_the_next(tmp_path, flusher, monkeypatch):
    started, release = threading.Event(), threading.Event()
    real = files.replace_files

    def slow(items):
        started.set()
        release.wait(10)
        return real(items)

    monkeypatch.setattr(files, "replace_files", slow)
    flusher.replace_file(tmp_path / "f", b"1", lambda: True)
    assert started.wait(10)
    flusher.replace_file(tmp_path / "f", b"2", lambda: True)  # the running batch has taken its items
    release.set()
    flusher.submit(lambda: None).result(timeout=10)
    assert (tmp_path / "f").read_bytes() == b"2"


def test_an_unwanted_replacement_is_skipped_and_a_failed_one_logged(tmp_path, flusher, caplog):
    flusher.replace_file(tmp_path / "skipped", b"x", lambda: False)
    flusher.replace_file(tmp_path / "missing" / "f", b"x", lambda: True)
    flusher.replace_file(tmp_path / "written", b"x", lambda: True)
    flusher.submit(lambda: None).result(timeout=10)
    assert sorted(os.listdir(tmp_path)) == ["written"]
    assert any("missing" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


def test_a_replacement_after_shutdown_is_refused_as_other_work_is(tmp_path):
    flusher = Flusher()
    gate = threading.Event()
    flusher.submit(gate.wait, 10)
    flusher.replace_file(tmp_path / "queued", b"x", lambda: True)
    gate.set()
    flusher.shutdown(wait=True)
    assert (tmp_path / "queued").read_bytes() == b"x", "what was queued before the shutdown is done"
    with pytest.raises(RuntimeError):
        flusher.replace_file(tmp_path / "late", b"x", lambda: True)
    with pytest.raises(RuntimeError):
        flusher.submit(lambda: None)
