"""Heavy record work away from the event loop: the broker's offload pool.

Walking the records of a large or compressed batch costs about 2 us of Python per record,
so a 767-byte zstd batch of a million empty records would hold the event loop for
seconds. Such walks (:class:`brokkr.core.validation.RecordWalk`: decompress, walk, check,
rebuild) run here instead, in worker processes, so that other connections keep their
latency and compressed produce uses more than one core. A thread would not do: the walk
holds the GIL, and the event loop would wait for it at every switch interval.

Memory is bounded: at most ``workers`` walks run at once (a walk holds at most the
decompression bound, ``socket.request.max.bytes``, plus what it builds from it); further
ones wait their turn in their own connection's task, never blocking the loop.

Each worker builds its own codec objects from the classes of the broker's codecs (codec
objects keep compression contexts, which do not cross processes). A codec whose class
cannot be built without arguments, in the worker's import path, is not offloaded: walks
using it run on the event loop as before. The pool belongs to one broker, starts with the
first walk that needs it, and stops with the broker.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import attrs

from .compression import Codec
from .validation import RecordWalk, ValidatedRecords

log = logging.getLogger("brokkr.offload")

_worker_codecs: dict[int, Codec] = {}  # set in each worker process by _start_worker


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


def _start_worker(classes: dict[int, tuple[str, str]]) -> None:
    for codec_id, (module, name) in classes.items():
        _worker_codecs[codec_id] = getattr(importlib.import_module(module), name)()
    threading.Thread(target=_exit_with_broker, args=(os.getppid(),), daemon=True).start()


def _exit_with_broker(broker_pid: int) -> None:
    """A worker whose broker was killed (SIGKILL leaves no chance to stop the pool) would
    wait forever for work: it ends once its parent is gone."""
    while os.getppid() == broker_pid:
        time.sleep(1)
    os._exit(0)


def _run(walk: RecordWalk) -> ValidatedRecords:
    return walk.run(_worker_codecs, elsewhere=True)


class OffloadPool:
    """One broker's worker processes for record walks."""

    def __init__(self, codecs: dict[int, Codec], workers: int | None = None):
        self.codecs = codecs
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self._classes: dict[int, tuple[str, str]] | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._slots = asyncio.Semaphore(self.workers)

    async def run(self, walk: RecordWalk) -> ValidatedRecords:
        if self._classes is None:
            self._classes = _codec_classes(self.codecs)
        if walk.header.codec not in self._classes or walk.target not in self._classes:
            return walk.run(self.codecs)  # a codec the workers cannot rebuild: here, as before
        async with self._slots:
            sent = attrs.evolve(walk, records=bytes(walk.records))  # copied only once a worker is free
            loop = asyncio.get_running_loop()
            try:
                return walk.kept(await loop.run_in_executor(self._executor(), _run, sent))
            except BrokenProcessPool:  # a worker died (killed, out of memory): start afresh next time
                log.error("a record-walk worker died; restarting the pool")
                self._pool = None
                raise

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
