"""The consumer protocol's embedded messages: the subscription a classic member joins with
and the assignment its leader hands out (ConsumerProtocolSubscription/Assignment), which
the broker otherwise relays as opaque bytes."""

from __future__ import annotations

from typing import Any

from ..errors import CorruptRequest
from .primitives import Reader
from .schema import load_message


def decode_subscription(data: bytes) -> Any:
    """A ConsumerProtocolSubscription (version first, as the clients write it); trailing
    bytes of newer versions are allowed, as Kafka's deserializer allows them."""
    return _decode_consumer_protocol("ConsumerProtocolSubscription", data)


def decode_assignment(data: bytes) -> Any:
    """A ConsumerProtocolAssignment (version first)."""
    return _decode_consumer_protocol("ConsumerProtocolAssignment", data)


def _decode_consumer_protocol(name: str, data: bytes) -> Any:
    spec = load_message(name)
    r = Reader(data)
    version = r.int16()
    if version < 0:
        raise CorruptRequest(f"{name} version {version}")
    return spec.decode(min(version, spec.valid[1]), r)
