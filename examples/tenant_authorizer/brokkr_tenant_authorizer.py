"""An example authorizer, loaded through the ``brokkr`` entry point: multi-tenant topics.

Each principal ``User:<tenant>`` whose name is listed in ``tenant.names`` may use only the
topics, consumer groups and transactional ids named ``<tenant>.<anything>``, with every
operation (so it may also create them, automatically too), and may only DESCRIBE the
cluster or write to it idempotently. Any other principal is left to the next authorizer
(the ACL authorizer, or allow-all)::

    brokkr serve --override tenant.names=acme,globex

User:acme may then produce to ``acme.orders`` but gets TOPIC_AUTHORIZATION_FAILED for
``globex.orders``, and sees only ``acme.*`` topics in Metadata.
"""

from __future__ import annotations

from brokkr.core.authorization import AclOperation, AuthorizationResult, ResourceType
from brokkr.core.config import ConfigDef, ConfigType
from brokkr.core.plugins import hookimpl

CLUSTER_OPERATIONS = (AclOperation.DESCRIBE, AclOperation.IDEMPOTENT_WRITE)


@hookimpl
def brokkr_config_definitions():
    return [ConfigDef("tenant.names", ConfigType.LIST, [], "Users confined to the resources prefixed '<name>.'.")]


@hookimpl
def brokkr_authorize(context, actions, broker):
    principal = context.principal
    if principal.type != "User" or principal.name not in broker.config["tenant.names"]:
        return None  # not a tenant: the next authorizer decides
    prefix = principal.name + "."

    def allowed(action):
        if action.resource_type == ResourceType.CLUSTER:
            return action.operation in CLUSTER_OPERATIONS
        return action.resource_name.startswith(prefix)

    return [AuthorizationResult.ALLOWED if allowed(a) else AuthorizationResult.DENIED for a in actions]
