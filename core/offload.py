"""Heavy record work away from the event loop: the broker's offload pool.

Decompressing and walking the records of a large or compressed batch costs up to a
millisecond a megabyte; a 767-byte zstd batch of a million empty records decompresses to
megabytes. Such walks (:class:`brokkr.core.validation.RecordWalk`: decompress, walk, check,
rebuild) run here instead of on the event loop, so that other connections keep their
latency and compressed produce uses more than one core:

- in worker threads, where the walk needs no per-record Python: the codecs decompress and
  the C record walk (``core/protocol/_recordscan.c``) runs without the GIL, and the rest
  is a few calls a batch, so the event loop and the walks run on different cores. The
  batch is walked and stamped in the request's own buffer, with no copy;
- in worker processes, for what would hold the GIL for a long time: a batch to rebuild
  with another codec, damaged records or broken record rules (whose errors the Python walk
  tells), and every walk when the C walk is not built. A thread would not do there: the
  event loop would wait for the GIL at every switch interval.

Memory is bounded: at most ``workers`` walks run at once (a walk holds at most the
decompression bound, ``socket.request.max.bytes``, plus what it builds from it); further
ones wait their turn in their own connection's task, never blocking the loop. Each worker
thread, and the loop for its light walks, decompresses into a buffer it keeps between
walks (``compression.Scratch``) while that buffer holds at most ``SCRATCH_KEPT`` bytes; a
larger one is emptied after its walk. What a walk held goes back when it ends, bombs
refused included: worker processes keep ``brokkr serve``'s fixed mmap threshold, and no
error's frames (:func:`_run`).

Each worker builds its own codec objects from the classes of the broker's codecs (codec
objects keep compression contexts, which are not shared between threads nor cross
processes). A codec whose class cannot be built without arguments, in the worker's import
path, is not offloaded: walks using it run on the event loop as before. The pool belongs to
one broker, starts with the first walk that needs it, and stops with the broker.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import attrs

from .compression import Codec, Scratch
from .protocol.records import C_WALK
from .validation import RecordsError, RecordWalk, RunElsewhere, ValidatedRecords

log = logging.getLogger("brokkr.offload")

_worker_codecs: dict[int, Codec] = {}  # set in each worker process by _start_worker

#: The largest decompression buffer a thread keeps between walks (``compression.Scratch``):
#: one per worker thread and one for the loop's light walks.
SCRATCH_KEPT = 8 * 1024 * 1024


def _codec_classes(codecs: dict[int, Codec]) -> dict[int, tuple[str, str]]:
    """(module, class name) of each codec that a worker can rebuild."""
    classes = {}
    for codec_id, codec in codecs.items():
        cls = type(codec)
        try:
            rebuilt = getattr(importlib.import_module(cls.__module__), cls.__qualname__)()
        except Exception:  # not importable by name, or needs arguments
            continue
        if type(rebuilt) is cls:
            classes[codec_id] = (cls.__module__, cls.__qualname__)
    return classes


def _build_codecs(classes: dict[int, tuple[str, str]]) -> dict[int, Codec]:
    return {codec_id: getattr(importlib.import_module(module), name)() for codec_id, (module, name) in classes.items()}


def _start_worker(classes: dict[int, tuple[str, str]]) -> None:
    from .cli import _keep_large_buffers_mapped

    # The broker's own setting (brokkr serve's), in its own process: else glibc's mmap
    # threshold rises with the first large walk's buffers, and the heap keeps later ones.
    _keep_large_buffers_mapped()
    _worker_codecs.update(_build_codecs(classes))
    threading.Thread(target=_exit_with_broker, args=(os.getppid(),), daemon=True).start()


def _exit_with_broker(broker_pid: int) -> None:
    """A worker whose broker was killed (SIGKILL leaves no chance to stop the pool) would
    wait forever for work: it ends once its parent is gone."""
    while os.getppid() == broker_pid:
        time.sleep(1)
    os._exit(0)


def _run(walk: RecordWalk) -> ValidatedRecords:
    """A walk in a worker process. Its error goes back without the one it replaced (kept as
    ``__context__`` by ``raise ... from None``), whose traceback holds the walk's frames and
    so its decompressed records: a worker keeps its last error until its next one
    (concurrent.futures), which would hold up to the decompression bound a worker."""
    try:
        return walk.run(_worker_codecs, elsewhere=True)
    except RecordsError as exc:
        error = exc
    error.__context__ = None
    raise error


class OffloadPool:
    """One broker's worker threads and processes for record walks."""

    def __init__(self, codecs: dict[int, Codec], workers: int | None = None):
        self.codecs = codecs
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self._classes: dict[int, tuple[str, str]] | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._thread_local = threading.local()  # each worker thread's codecs and Scratch
        self._loop_scratch = Scratch(SCRATCH_KEPT)
        self._slots = asyncio.Semaphore(self.workers)

    async def run(self, walk: RecordWalk) -> ValidatedRecords:
        if self._classes is None:
            self._classes = _codec_classes(self.codecs)
        if walk.header.codec not in self._classes or walk.target not in self._classes:
            return walk.run(self.codecs)  # a codec the workers cannot rebuild: here, as before
        async with self._slots:
            loop = asyncio.get_running_loop()
            if C_WALK and walk.header.codec == walk.target:  # another codec: a rebuild, a process's work
                if self._threads is None:
                    self._threads = ThreadPoolExecutor(self.workers, thread_name_prefix="brokkr-walk")
                try:
                    return await loop.run_in_executor(self._threads, self._run_in_thread, walk)
                except RunElsewhere:
                    pass
            sent = attrs.evolve(walk, records=bytes(walk.records))  # copied only once a worker is free
            try:
                return walk.kept(await loop.run_in_executor(self._executor(), _run, sent))
            except BrokenProcessPool:  # a worker died (killed, out of memory): start afresh next time
                log.error("a record-walk worker died; restarting the pool")
                self._pool = None
                raise

    def run_inline(self, walk: RecordWalk, decompressed_cap: int) -> ValidatedRecords:
        """A light walk, on the event loop (raises TooLargeToRunHere past the cap)."""
        try:
            return walk.run(self.codecs, decompressed_cap, scratch=self._loop_scratch)
        finally:
            self._loop_scratch.done()

    def _run_in_thread(self, walk: RecordWalk) -> ValidatedRecords:
        local = self._thread_local
        if not hasattr(local, "codecs"):
            local.codecs = _build_codecs(self._classes)
            local.scratch = Scratch(SCRATCH_KEPT)
        try:
            return walk.run(local.codecs, in_thread=True, scratch=local.scratch)
        finally:
            local.scratch.done()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: each worker is the broker's own child (see _exit_with_broker); fork
            # would copy a process that runs threads.
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_worker,
                initargs=(self._classes,),
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
            self._threads = None
