"""A bounded fuzz run (tests/fuzz.py): mutated frames of every served API, compressed
batches with extreme record counts among them, batches lying about their records under a
valid CRC, decompression bombs of every codec and appends to internal topics, against
``brokkr serve``; the broker stays up, logs no unexpected error, keeps answering a real
client at its normal latency, returns to its memory baseline, refuses every append to an
internal topic and stores only batches holding exactly the records they count. A longer
run: ``python tests/fuzz.py --frames 200000``."""

from __future__ import annotations

import fuzz


def test_mutated_frames_of_every_api_neither_crash_stall_nor_grow_the_broker():
    report = fuzz.run(frames=2500, seed=20261124)
    assert report.alive
    assert report.tracebacks == 0
    assert report.answered > 200 and report.reconnects > 100, "the mutations reached the handlers and the closes"
    assert report.max_latency < max(1.0, 20 * report.baseline_latency)
    assert report.log_problems == [], "the fuzzed topic holds batches that lie about their records"
    assert report.end_rss_mb - report.baseline_rss_mb < 100  # decompression bombs among the frames
    assert report.internal_appends == 0, "Produce appended to __consumer_offsets or __transaction_state"
