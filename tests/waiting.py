"""Waiting for a condition in tests that drive brokers from outside their event loop."""

from __future__ import annotations

import time

DEADLINE_S = 30.0


def wait_for(what: str, check, timeout: float = DEADLINE_S):
    """Call ``check`` every 50 ms until it returns something true, and return that; fail
    (naming ``what``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value
