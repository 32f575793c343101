"""API handlers, one module per Kafka API, and the API table of a broker.

A broker serves and advertises in ApiVersions exactly the APIs that plugins contribute
through ``brokkr_apis`` (core's own come from :mod:`brokkr.core.apis.builtin`), collected
once per broker by :func:`collect_apis`; an API not in its table is answered as Kafka
answers an API it does not know (the connection is closed).

Each module defines ``API = Api(...)``: the key, the versions served, an async
``handle(broker, ctx, request)`` that returns the response body (or ``None`` for no
response), and ``error_response(request, code)`` that answers every element of a request
with one error (used for UNSUPPORTED_VERSION and whole-request failures).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs


@attrs.frozen
class Api:
    key: int
    min_version: int
    max_version: int
    handle: Callable[..., Awaitable[Any]]
    error_response: Callable[[Any, int], Any]
    #: The lowest version ApiVersions advertises, when lower than what is served
    #: (Produce: KAFKA-18659, librdkafka requires v0 to be listed).
    advertised_min_version: int | None = None


def collect_apis(hook, broker) -> dict[int, Api]:
    """One :class:`Api` per key from ``brokkr_apis``: the plugin registered last wins, so a
    plugin replaces a built-in API (pluggy lists the results of the plugins registered
    last first). Called once per broker; requests look their API up in the result."""
    apis: dict[int, Api] = {}
    for result in hook.brokkr_apis(broker=broker):
        for api in result:
            apis.setdefault(api.key, api)
    return apis
