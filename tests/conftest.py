"""Fixtures for brokkr's own tests (the broker fixtures come from brokkr.core.testing)."""

from __future__ import annotations

import pytest
from serve import Served


@pytest.fixture
def topic(brokkr_broker) -> str:
    brokkr_broker.call(brokkr_broker.broker.create_topic, "t")
    return "t"


@pytest.fixture
def served(tmp_path):
    """``brokkr serve`` on an ephemeral port, its log dir under ``tmp_path``; killed after."""
    broker = Served(
        "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}", cwd=tmp_path
    )
    yield broker
    broker.kill()
