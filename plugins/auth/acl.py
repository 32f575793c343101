"""The ACL authorizer: Kafka's ``StandardAuthorizer``, enabled by ``authorizer.class.name``.

``authorizer.class.name=acl`` (or Kafka's own
``org.apache.kafka.metadata.authorizer.StandardAuthorizer``) turns it on; left empty (the
default, as in Kafka) every action is allowed by the built-in allow-all plugin and the ACL
APIs answer SECURITY_DISABLED. Its decisions, per action:

1. A principal listed in ``super.users`` (``User:alice;User:bob``) may do anything.
2. The ACLs that apply to the resource are the LITERAL ones of its name, the LITERAL
   ``*`` of its type, and the PREFIXED ones whose prefix starts its name. Of those, an ACL
   counts when its principal is the request's or ``User:*`` and its host the client's
   address or ``*``.
3. A counting DENY for the operation (or for ALL) denies: deny wins. Otherwise a counting
   ALLOW for the operation, for ALL, or implying it, allows: READ, WRITE, DELETE and ALTER
   imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS (only ALLOW ACLs imply).
4. Otherwise: if the resource has no ACL at all (for anyone), ``allow.everyone.if.no.acl.found``
   decides (default false); else denied.

ACLs are kept in the shared document ``acls`` (JSON, :mod:`brokkr.core.shared_documents`):
alone the broker's storage's, on a cluster the cluster's, so an ACL created through one
broker is enforced by all. It is written before CreateAcls or DeleteAcls answers, and
parsed again only when it changed (another broker's write). A decision is a few
dictionary probes, never a scan of all ACLs: the resource's LITERAL name and ``*``, one
prefix per distinct PREFIXED length up to the name's length, and in each pattern found the
request's principal and ``User:*``.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict

from brokkr.core.authorization import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Action,
    AuthorizationResult,
    PatternType,
    ResourceType,
)
from brokkr.core.config import ConfigDef, ConfigType, one_of
from brokkr.core.context import RequestContext
from brokkr.core.plugins import hookimpl
from brokkr.core.shared_documents import FollowedDocument

log = logging.getLogger("brokkr.authorizer")

#: ``authorizer.class.name`` values that select this authorizer.
NAMES = ("acl", "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
STATE = "acls"
_ALLOWED, _DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED
_ALL = int(AclOperation.ALL)
#: Operations an ALLOW ACL for one of the set also allows (Kafka's IMPLIES_DESCRIBE and
#: IMPLIES_DESCRIBE_CONFIGS), as plain ints.
_IMPLIED_BY = {
    int(AclOperation.DESCRIBE): frozenset(
        int(op) for op in (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER)
    ),
    int(AclOperation.DESCRIBE_CONFIGS): frozenset({int(AclOperation.ALTER_CONFIGS)}),
}


#: One resource pattern's ACLs for the decision: principal -> ((host, operation, deny), ...)
#: with the operation a plain int, so that a decision compares ints and strings only.
Bucket = dict[str, tuple[tuple[str, int, bool], ...]]


class AclAuthorizer:
    """One broker's ACLs, indexed for authorization, and the store the ACL APIs manage;
    registered as a plugin of that broker only (``brokkr_broker_starting``)."""

    @hookimpl
    def brokkr_authorize(self, context, actions):
        return self.authorize(context, actions)

    @hookimpl(trylast=True)  # a built-in default: another plugin's store wins
    def brokkr_acl_store(self):
        return self

    def __init__(self, documents, super_users: frozenset[str], allow_if_no_acl: bool):
        """``documents``: where the ACLs are kept (``broker.shared_documents``, or a storage)."""
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: set[AclBinding] = set()
        self._literal: dict[tuple[int, str], Bucket] = {}
        self._prefixed: dict[int, dict[str, Bucket]] = {}
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}
        self.document = FollowedDocument(documents, STATE, self._load)
        self.document.follow()

    def _load(self, text: str | None) -> None:
        self._index({decode(entry) for entry in json.loads(text)["acls"]} if text else set())

    # -- authorization ------------------------------------------------------------------

    def authorize(self, context: RequestContext, actions: list[Action]) -> list[AuthorizationResult]:
        self.document.follow()
        principal = str(context.principal)
        if principal in self.super_users:
            return [_ALLOWED] * len(actions)
        host = context.client_host
        results = []
        for action in actions:
            result = self._decide(principal, host, action)
            if result is _DENIED and action.log_if_denied:
                log.info(
                    "Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                    principal,
                    action.operation.name,
                    host,
                    action.resource_type.name,
                    action.resource_name,
                )
            results.append(result)
        return results

    def _decide(self, principal: str, host: str, action: Action) -> AuthorizationResult:
        kind, name, operation = int(action.resource_type), action.resource_name, int(action.operation)
        buckets = [self._literal.get((kind, name)), self._literal.get((kind, WILDCARD))]
        prefixed = self._prefixed.get(kind)
        if prefixed:
            size = len(name)
            for n in self._prefix_lengths[kind]:  # ascending
                if n > size:
                    break
                buckets.append(prefixed.get(name[:n]))
        found = allowed = False
        implied = _IMPLIED_BY.get(operation, ())
        for bucket in buckets:
            if not bucket:
                continue
            found = True
            for who in (principal, WILDCARD_PRINCIPAL):
                for acl_host, op, deny in bucket.get(who, ()):
                    if acl_host != host and acl_host != WILDCARD:
                        continue
                    if deny:
                        if op == operation or op == _ALL:
                            return _DENIED
                    elif op == operation or op == _ALL or op in implied:
                        allowed = True
        if allowed:
            return _ALLOWED
        return _ALLOWED if not found and self.allow_if_no_acl else _DENIED

    # -- the AclStore -------------------------------------------------------------------

    def acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        self.document.follow()
        return sorted((acl for acl in self._acls if acl_filter.matches(acl)), key=_order)

    def create_acls(self, bindings: list[AclBinding]):
        """None once written (a storage), else (shared documents) an awaitable to await."""
        self.document.follow()
        acls = self._acls | set(bindings)
        return self._save(acls) if acls != self._acls else None

    def delete_acls(self, filters: list[AclBindingFilter]):
        """Per filter, the ACLs it matched; with shared documents, an awaitable of that."""
        matched = [self.acls(f) for f in filters]
        gone = {acl for acls in matched for acl in acls}
        pending = self._save(self._acls - gone) if gone else None
        if pending is None:
            return matched

        async def written() -> list[list[AclBinding]]:
            await pending
            return matched

        return written()

    def _save(self, acls: set[AclBinding]):
        """Write ``acls`` (indexed at once, so that a request meanwhile sees them; the document
        read again if the write fails): None once written, else an awaitable."""
        document = {"version": 1, "acls": [encode(acl) for acl in sorted(acls, key=_order)]}
        self._index(acls)
        return self.document.write(json.dumps(document, indent=1))

    def _index(self, acls: set[AclBinding]) -> None:
        literal: dict = defaultdict(lambda: defaultdict(list))
        prefixed: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
        for acl in acls:
            entry = (acl.host, int(acl.operation), acl.permission_type == AclPermissionType.DENY)
            if acl.pattern_type == PatternType.LITERAL:
                literal[int(acl.resource_type), acl.resource_name][acl.principal].append(entry)
            else:
                prefixed[int(acl.resource_type)][acl.resource_name][acl.principal].append(entry)

        def bucket(by_principal) -> Bucket:
            return {who: tuple(entries) for who, entries in by_principal.items()}

        self._acls = acls
        self._literal = {key: bucket(b) for key, b in literal.items()}
        self._prefixed = {kind: {p: bucket(b) for p, b in ps.items()} for kind, ps in prefixed.items()}
        self._prefix_lengths = {kind: tuple(sorted({len(p) for p in ps})) for kind, ps in prefixed.items()}


def _order(acl: AclBinding) -> tuple:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation)


def encode(acl: AclBinding) -> dict[str, str]:
    return {
        "resourceType": acl.resource_type.name,
        "name": acl.resource_name,
        "patternType": acl.pattern_type.name,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation.name,
        "permissionType": acl.permission_type.name,
    }


def decode(entry: dict[str, str]) -> AclBinding:
    return AclBinding(
        ResourceType[entry["resourceType"]],
        entry["name"],
        PatternType[entry["patternType"]],
        entry["principal"],
        entry["host"],
        AclOperation[entry["operation"]],
        AclPermissionType[entry["permissionType"]],
    )


# -- the plugin -------------------------------------------------------------------------


@hookimpl
def brokkr_config_definitions():
    return [
        ConfigDef(
            "authorizer.class.name",
            ConfigType.STRING,
            "",
            "The authorizer: empty allows everything; 'acl' (or Kafka's "
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer) enforces ACLs.",
            validator=one_of("", *NAMES),
        ),
        ConfigDef(
            "super.users",
            ConfigType.STRING,
            "",
            "Principals that may do anything, separated by semicolons: User:alice;User:bob.",
        ),
        ConfigDef(
            "allow.everyone.if.no.acl.found",
            ConfigType.BOOLEAN,
            False,
            "Whether a resource no ACL names is open to everyone (else only to super users).",
        ),
    ]


PLUGIN_NAME = "brokkr.plugins.auth.acl:authorizer"


@hookimpl
def brokkr_broker_starting(broker):
    """With ``authorizer.class.name`` selecting it, this broker gets its own authorizer,
    registered as a plugin; without, nothing is registered and requests pay nothing."""
    config = broker.config
    if config["authorizer.class.name"] in NAMES:
        super_users = frozenset(u.strip() for u in config["super.users"].split(";") if u.strip())
        authorizer = AclAuthorizer(broker.shared_documents, super_users, config["allow.everyone.if.no.acl.found"])
        broker.pm.register(authorizer, name=PLUGIN_NAME)
