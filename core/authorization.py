"""Authorization vocabulary with Kafka's numbers: operations, resource types, actions.

API handlers build one :class:`Action` per resource they touch and ask the
``brokkr_authorize`` hook once per request (see :meth:`brokkr.core.broker.Broker.authorize`).
"""

from __future__ import annotations

import enum

import attrs


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


CLUSTER_NAME = "kafka-cluster"


@attrs.frozen
class Action:
    """One operation on one named resource (Kafka's ``Action``)."""

    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    log_if_allowed: bool = False
    log_if_denied: bool = True
