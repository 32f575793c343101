"""A bounded fuzz run (tests/fuzz.py): mutated frames of every served API, compressed
batches with extreme record counts among them, against ``brokkr serve``; the broker stays
up, logs no unexpected error, keeps answering a real client at its normal latency and
returns to its memory baseline. A longer run: ``python tests/fuzz.py --frames 200000``."""

from __future__ import annotations

import fuzz


def test_mutated_frames_of_every_api_neither_crash_stall_nor_grow_the_broker():
    report = fuzz.run(frames=2500, seed=20261124)
    assert report.alive
    assert report.tracebacks == 0
    assert report.answered > 200 and report.reconnects > 100, "the mutations reached the handlers and the closes"
    assert report.max_latency < max(1.0, 20 * report.baseline_latency)
    assert report.end_rss_mb - report.baseline_rss_mb < 100
