"""The segment storage's flusher held back, and a process killed with its queue: what the
crash tests of the segment storage share."""

from __future__ import annotations

import threading

from brokkr.core.storage_contract import Harness


def hold(harness: Harness) -> threading.Event:
    """Hold the storage's flusher until the returned event is set, so that the disk work
    queued from now on waits behind it. Returns once the hold is running: a hold still
    queued when :func:`crash` cancels the queue would let the work behind it run."""
    running, release = threading.Event(), threading.Event()
    harness.storage.flusher.submit(lambda: (running.set(), release.wait(30)))
    assert running.wait(10), "the flusher did not start the hold"
    return release


def crash(harness: Harness, release: threading.Event | None = None) -> None:
    """Forget the open storage as a killed process would: the disk work still queued on
    its flusher never happens (the one running finishes; ``release`` ends a hold), and its
    log dirs' locks go with the process."""
    flusher = harness.storage.flusher
    harness.storage.unlock()
    harness.storage, harness.logs = None, []
    flusher.shutdown(wait=False, cancel_futures=True)
    if release is not None:
        release.set()
    flusher.shutdown(wait=True)
