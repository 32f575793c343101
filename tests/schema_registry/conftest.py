"""Fixtures of the schema registry's tests: a real broker serving the registry on an
ephemeral 127.0.0.1 port, and confluent-kafka's ``SchemaRegistryClient`` against it."""

from __future__ import annotations

import pytest
from brokkr.plugins.schema_registry import registry_of
from confluent_kafka.schema_registry import SchemaRegistryClient

LISTENER = {"brokkr.schema.registry.listeners": "http://127.0.0.1:0"}


def registry_url(broker_thread) -> str:
    """The URL the registry of a started broker (a BrokerThread) serves on: its first
    listener, with the port it bound (``RegistryServer.urls``)."""
    return registry_of(broker_thread.broker).server.urls[0]


@pytest.fixture
def registry_factory(brokkr_broker_factory):
    """``registry_factory(config)`` -> (broker, url): a started broker (a BrokerThread) with
    the settings ``config`` serving the registry at ``url`` (stopped after the test)."""

    def start(config: dict | None = None) -> tuple:
        broker = brokkr_broker_factory({**LISTENER, **(config or {})})
        return broker, registry_url(broker)

    return start


@pytest.fixture
def registry(registry_factory):
    """(broker, url): a started broker (a BrokerThread) serving the registry at ``url``."""
    return registry_factory()


@pytest.fixture
def client(registry):
    """confluent-kafka's SchemaRegistryClient of the ``registry`` fixture's broker."""
    sr = SchemaRegistryClient({"url": registry[1]})
    yield sr
    sr.close()
