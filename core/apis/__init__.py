"""API handlers, one module per Kafka API. :data:`APIS` is what the broker serves and
advertises in ApiVersions; an API not listed here is answered as Kafka answers an API
it does not know (the connection is closed).

Each module defines ``API = Api(...)``: the key, the versions served, an async
``handle(broker, ctx, request)`` that returns the response body (or ``None`` for no
response), and ``error_response(request, code)`` that answers every element of a request
with one error (used for UNSUPPORTED_VERSION and whole-request failures).
"""

from __future__ import annotations

import importlib
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


_MODULES = (
    "produce",
    "fetch",
    "list_offsets",
    "metadata",
    "api_versions",
    "create_topics",
    "delete_topics",
    "delete_records",
    "init_producer_id",
    "describe_configs",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "describe_client_quotas",
    "alter_client_quotas",
    "incremental_alter_configs",
    "alter_configs",
    "create_partitions",
    "describe_log_dirs",
    "describe_cluster",
    "describe_topic_partitions",
)

APIS: dict[int, Api] = {}
for _name in _MODULES:
    _api = importlib.import_module(f"{__name__}.{_name}").API
    APIS[_api.key] = _api
