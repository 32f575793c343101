"""Fixtures for brokkr's own tests (the broker fixtures come from brokkr.core.testing)."""

from __future__ import annotations

import pytest


@pytest.fixture
def topic(brokkr_broker) -> str:
    brokkr_broker.call(brokkr_broker.broker.create_topic, "t")
    return "t"
