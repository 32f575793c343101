"""The sink's hand-off between the event loop (segments closing) and the mirror's worker
thread (segments mirrored): a segment closed while the worker filters the list is kept."""

from __future__ import annotations

import threading

from brokkr.core.log import SegmentInfo
from brokkr.core.sinks import SinkProgress


class PausingList(list):
    """A list whose first iteration, once it has yielded everything, lets the other thread
    act (``reached``) and waits for it (``resume``, at most ``timeout`` s): the worst moment
    for a segment to close, between the worker's filtering and its replacing the list."""

    def __init__(self, items, reached: threading.Event, resume: threading.Event, timeout: float):
        super().__init__(items)
        self.reached, self.resume, self.timeout = reached, resume, timeout

    def __iter__(self):
        first = not self.reached.is_set()
        yield from self[:]  # a copy: an append now is not seen by this walk
        if first:  # only the worker's walk pauses
            self.reached.set()
            self.resume.wait(self.timeout)


def test_a_segment_closed_while_the_worker_marks_progress_is_never_dropped():
    progress = SinkProgress()
    progress.segment_closed("t", 0, SegmentInfo(0, 10, 100))
    reached, resume = threading.Event(), threading.Event()
    work = progress.work[("t", 0)]
    work.closed = PausingList(work.closed, reached, resume, timeout=1.0)

    worker = threading.Thread(target=progress.mark_mirrored, args=("t", 0, 5))
    worker.start()
    assert reached.wait(5)
    closer = threading.Thread(target=progress.segment_closed, args=("t", 0, SegmentInfo(10, 20, 100)))
    closer.start()
    closer.join(0.2)  # on the loop this append may happen now, or wait for the worker's lock
    resume.set()
    worker.join(5)
    closer.join(5)
    assert [s.base_offset for s in progress.work[("t", 0)].closed] == [0, 10]
