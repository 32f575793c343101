"""brokkr's pytest plugin (entry point ``pytest11``): brokers for your tests.

Fixtures:

``brokkr_broker``
    A broker with the embedded defaults, on an ephemeral 127.0.0.1 port, started in a
    background thread for the test and stopped after it. ``brokkr_broker.bootstrap_servers``
    is what clients connect to.

``brokkr_broker_factory``
    ``brokkr_broker_factory(config=None, plugins=())`` starts further brokers with your
    settings and plugins (all stopped after the test).

Mark a test ``@pytest.mark.brokkr_config(key=value, ...)`` to pass settings to
``brokkr_broker`` (dots are written as underscores: ``num_partitions=3``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from .broker import BrokerThread
from .client import RawClient

__all__ = ["RawClient", "brokkr_broker", "brokkr_broker_factory"]

EPHEMERAL = "PLAINTEXT://127.0.0.1:0"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokkr_config(**settings): settings for the brokkr_broker fixture")


@pytest.fixture
def brokkr_broker_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    started: list[BrokerThread] = []

    def start(config: Mapping[str, Any] | None = None, plugins: tuple = (), **kwargs: Any) -> BrokerThread:
        values = {"listeners": EPHEMERAL, "log.dirs": str(tmp_path_factory.mktemp("brokkr-data"))}
        values.update(config or {})
        broker = BrokerThread(values, plugins, **kwargs).start()
        started.append(broker)
        return broker

    yield start
    for broker in reversed(started):
        broker.stop()


@pytest.fixture
def brokkr_broker(request: pytest.FixtureRequest, brokkr_broker_factory: Any) -> BrokerThread:
    marker = request.node.get_closest_marker("brokkr_config")
    config = {k.replace("_", "."): v for k, v in (marker.kwargs if marker else {}).items()}
    return brokkr_broker_factory(config)
