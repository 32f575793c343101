"""Authorization vocabulary with Kafka's numbers: operations, resource types, actions, ACLs.

API handlers build one :class:`Action` per resource they touch and ask the
``brokkr_authorize`` hook once per request (see :meth:`brokkr.core.broker.Broker.authorize`).

ACLs (:class:`AclBinding`, Kafka's ``AclBinding``/``StandardAcl``) and their filters
(:class:`AclBindingFilter`) are what CreateAcls, DescribeAcls and DeleteAcls carry; an
:class:`AclStore`, provided by the ``brokkr_acl_store`` hook, keeps them.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable
from typing import Protocol

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
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(enum.IntEnum):
    """How an ACL's resource name matches (KIP-290). ANY and MATCH appear only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


CLUSTER_NAME = "kafka-cluster"
#: A LITERAL resource name matching every resource of its type; also the host wildcard.
WILDCARD = "*"
#: The principal wildcard: an ACL for ``User:*`` applies to every principal.
WILDCARD_PRINCIPAL = "User:*"


@attrs.frozen
class Action:
    """One operation on one named resource (Kafka's ``Action``)."""

    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    log_if_allowed: bool = False
    log_if_denied: bool = True


def allows_everything(broker, authorize) -> bool:
    """Whether ``authorize``, the broker's resolved ``brokkr_authorize``
    (``broker.hot.brokkr_authorize``), is the built-in allow-all alone with no
    ``authorizer.class.name`` (a setting that never changes while the broker runs): then
    every action is allowed, and a request's actions need not be built nor the hook called.
    Worked out once per resolution of the hook (a plugin registered or removed resolves it
    again) and kept on the broker."""
    seen = broker.__dict__.get("_allows_everything")
    if seen is not None and seen[0] is authorize:
        return seen[1]
    impls = broker.pm.hook.brokkr_authorize.get_hookimpls()
    answer = (
        len(impls) == 1
        and getattr(impls[0].function, "allows_everything", False) is True
        and not broker.config.get("authorizer.class.name")
    )
    broker._allows_everything = (authorize, answer)
    return answer


def _enum(cls: type[enum.IntEnum], value: int) -> enum.IntEnum:
    """A wire code as its enum member; codes Kafka does not define are UNKNOWN, as in Kafka."""
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


@attrs.frozen
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's ``StandardAcl``).

    ``principal`` is ``Type:name`` (``User:alice``, or ``User:*`` for everyone) and ``host``
    an address or ``*``."""

    resource_type: ResourceType = attrs.field(converter=lambda v: _enum(ResourceType, v))
    resource_name: str
    pattern_type: PatternType = attrs.field(converter=lambda v: _enum(PatternType, v))
    principal: str
    host: str
    operation: AclOperation = attrs.field(converter=lambda v: _enum(AclOperation, v))
    permission_type: AclPermissionType = attrs.field(converter=lambda v: _enum(AclPermissionType, v))


@attrs.frozen
class AclBindingFilter:
    """Which ACLs a DescribeAcls or DeleteAcls filter selects (Kafka's ``AclBindingFilter``).

    ``None`` for a name, principal or host, and ANY for an enum, match everything. Pattern
    type MATCH selects the ACLs that would apply to the resource named: LITERAL ones of that
    name, the LITERAL ``*``, and PREFIXED ones whose prefix starts the name."""

    resource_type: ResourceType = attrs.field(converter=lambda v: _enum(ResourceType, v))
    resource_name: str | None
    pattern_type: PatternType = attrs.field(converter=lambda v: _enum(PatternType, v))
    principal: str | None
    host: str | None
    operation: AclOperation = attrs.field(converter=lambda v: _enum(AclOperation, v))
    permission_type: AclPermissionType = attrs.field(converter=lambda v: _enum(AclPermissionType, v))

    def is_unknown(self) -> bool:
        """Whether any part is UNKNOWN (a code Kafka does not define): such a filter is refused."""
        unknown = (self.resource_type, self.pattern_type, self.operation, self.permission_type)
        return any(v == 0 for v in unknown)

    def matches(self, acl: AclBinding) -> bool:
        """Kafka's ``AclBindingFilter.matches``: its ``ResourcePatternFilter`` and
        ``AccessControlEntryFilter`` both match."""
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH) and pattern != acl.pattern_type:
            return False
        if self.resource_name is not None:
            if pattern in (PatternType.ANY, acl.pattern_type):
                if self.resource_name != acl.resource_name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:  # MATCH against a LITERAL ACL
                if acl.resource_name not in (self.resource_name, WILDCARD):
                    return False
            elif not self.resource_name.startswith(acl.resource_name):  # MATCH against a PREFIXED ACL
                return False
        return (
            (self.principal is None or self.principal == acl.principal)
            and (self.host is None or self.host == acl.host)
            and (self.operation == AclOperation.ANY or self.operation == acl.operation)
            and (self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type)
        )


class AclStore(Protocol):
    """Where the ACLs of an ACL authorizer live: what CreateAcls, DescribeAcls and DeleteAcls
    manage (the ACL half of Kafka's ``Authorizer`` interface). The API handlers validate
    bindings and filters before they call it, and authorize the request (ALTER or DESCRIBE
    on the cluster). A write may answer an awaitable (the built-in store's, which writes the
    ACLs for the whole cluster: ``core/shared_documents.py``): the handlers await it before
    they answer; a synchronous store persists before returning."""

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every ACL the filter matches."""

    def create_acls(self, bindings: list[AclBinding]) -> Awaitable[None] | None:
        """Add ACLs (an ACL already present is left as it is) and persist them (before
        returning, or before the awaitable returned is done)."""

    def delete_acls(
        self, filters: list[AclBindingFilter]
    ) -> list[list[AclBinding]] | Awaitable[list[list[AclBinding]]]:
        """Remove every ACL any of the filters matches, persist, and return, per filter, the
        ACLs it matched (an ACL matched by two filters is listed under both), or an awaitable
        of that, done once persisted."""
