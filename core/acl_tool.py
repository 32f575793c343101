"""``brokkr acls``: Kafka's kafka-acls.sh for a running broker, over CreateAcls,
DescribeAcls and DeleteAcls, with Kafka's options and output.

``--add`` creates, for every resource named (``--topic``, ``--group``, ``--cluster``,
``--transactional-id``; ``--resource-pattern-type`` literal or prefixed), an ACL per
principal, host and operation (``--allow-principal``/``--allow-host``,
``--deny-principal``/``--deny-host``, ``--operation``, default All). ``--producer`` and
``--consumer`` stand for the operations a producer (Write, Describe, Create on topics;
Write, Describe on transactional ids; IdempotentWrite on the cluster with ``--idempotent``)
or a consumer (Read, Describe on topics; Read on groups) needs. ``--remove`` deletes the
ACLs so described, or every ACL of a resource filter when no principal is given (pattern
types match and any select as DescribeAcls does), after a prompt unless ``--force``.
``--list`` shows the ACLs of the resources named, or all, per resource (``--principal``:
only theirs). Operations are named as Kafka names them (``Read``, ``IdempotentWrite``, or
in capitals).
"""

from __future__ import annotations

import argparse
import sys

from . import client_config
from .authorization import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from .protocol.frames import request_spec
from .tools import ToolError, _check, connect

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
Op = AclOperation
#: Kafka's ``AclEntry.supportedOperations``: what an ACL of each resource type may name (and All).
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.DESCRIBE_CONFIGS,
                         Op.ALTER_CONFIGS),
    ResourceType.GROUP: (Op.READ, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS,
                           Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE),
    ResourceType.TRANSACTIONAL_ID: (Op.WRITE, Op.DESCRIBE),
}  # fmt: skip
CLUSTER = (ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)
#: A resource pattern (type, name or None, pattern type) and an entry (principal, host,
#: operation, permission): together the fields of an :class:`AclBinding`, in its order.
Pattern = tuple[ResourceType, "str | None", PatternType]
Entry = tuple[str, str, AclOperation, AclPermissionType]
ANY_ENTRY: tuple = (None, None, Op.ANY, AclPermissionType.ANY)


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="add, remove or list the ACLs of a running broker (kafka-acls.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="the broker to talk to")
    client_config.add_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list the ACLs of the resources named (or all)")
    p.add_argument("--topic", action="append", help="a topic ('*': every topic); repeatable")
    p.add_argument("--group", action="append", help="a consumer group ('*': every group); repeatable")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--transactional-id", action="append", help="a transactional id ('*': all); repeatable")
    p.add_argument(
        "--resource-pattern-type",
        type=str.lower,
        choices=("literal", "prefixed", "match", "any"),
        default="literal",
        help="literal (the default) or prefixed; to list or remove, also match or any",
    )
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME", help="e.g. User:alice, User:*")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME", help="deny wins over allow")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="for --allow-principal (default *)")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="for --deny-principal (default *)")
    p.add_argument("--operation", action="append", help="Read, Write, Create, ..., All (the default); repeatable")
    p.add_argument("--producer", action="store_true", help="the ACLs a producer needs on --topic")
    p.add_argument("--consumer", action="store_true", help="the ACLs a consumer needs on --topic and --group")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    p.add_argument("--principal", action="append", metavar="TYPE:NAME", help="with --list: only this principal's")
    p.add_argument("--force", action="store_true", help="remove without asking")
    p.set_defaults(func=acls)


def acls(args: argparse.Namespace) -> int:
    try:
        _check_args(args)
        if args.add:
            pattern_type = PatternType[args.resource_pattern_type.upper()]
            if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise ToolError(
                    f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when adding acls."
                )
            planned = _resource_acls(args)
            if not all(planned.values()):
                raise ToolError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
            with connect(args, "brokkr-acls") as client:
                for pattern, entries in planned.items():
                    _print_block(f"Adding ACLs for resource `{_pattern_text(pattern)}`", entries)
                    _create(client, [AclBinding(*pattern, *entry) for entry in entries])
        elif args.remove:
            planned = _resource_acls(args)
            with connect(args, "brokkr-acls") as client:
                for pattern, entries in planned.items():
                    if _confirmed(args, pattern, entries):
                        _delete(client, [AclBindingFilter(*pattern, *e) for e in entries or [ANY_ENTRY]])
        else:
            with connect(args, "brokkr-acls") as client:
                _list(client, args)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _check_args(args: argparse.Namespace) -> None:
    """Kafka's ``AclCommandOptions.checkArgs``."""
    entry_options = ("producer", "consumer", "allow_host", "allow_principal", "deny_host", "deny_principal")
    if args.list and (used := [o for o in entry_options if getattr(args, o)]):
        raise ToolError(f"Option --list can't be used with option --{used[0].replace('_', '-')}")
    for role in ("producer", "consumer"):
        if getattr(args, role) and (
            used := [o for o in ("operation", "deny_principal", "deny_host") if getattr(args, o)]
        ):
            raise ToolError(f"Option --{role} can't be used with option --{used[0].replace('_', '-')}")
    if args.principal and not args.list:
        raise ToolError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise ToolError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise ToolError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic or not args.group or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise ToolError(
            "With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id "
            "option should be specified."
        )


def _patterns(args: argparse.Namespace, required: bool = True) -> list[Pattern]:
    """The resource patterns (or, to list and remove, pattern filters) named: Kafka's ``getResourceFilter``."""
    kind = PatternType[args.resource_pattern_type.upper()]
    out: list[Pattern] = [(ResourceType.TOPIC, t.strip(), kind) for t in args.topic or ()]
    if kind == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append(CLUSTER)
    out += [(ResourceType.GROUP, g.strip(), kind) for g in args.group or ()]
    out += [(ResourceType.TRANSACTIONAL_ID, t.strip(), kind) for t in args.transactional_id or ()]
    if not out and required:
        raise ToolError(
            "You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
            "--transactional-id <transactional-id>"
        )
    return list(dict.fromkeys(out))


def _resource_acls(args: argparse.Namespace) -> dict[Pattern, list[Entry]]:
    """Each resource named and the ACLs the options describe for it: Kafka's ``getResourceFilterToAcls``."""
    out: dict[Pattern, list[Entry]] = {}
    patterns = _patterns(args)
    if not args.producer and not args.consumer:
        operations = [_operation(name) for name in args.operation or ["All"]]
        out = {p: _entries(args, operations) for p in patterns}
    if args.producer:
        for p in patterns:
            if p[0] == ResourceType.TOPIC:
                out[p] = _entries(args, [Op.WRITE, Op.DESCRIBE, Op.CREATE])
            elif p[0] == ResourceType.TRANSACTIONAL_ID:
                out[p] = _entries(args, [Op.WRITE, Op.DESCRIBE])
        if args.idempotent:
            out[CLUSTER] = _entries(args, [Op.IDEMPOTENT_WRITE])
    if args.consumer:
        for p in patterns:
            if p[0] == ResourceType.TOPIC:
                out[p] = list(dict.fromkeys(out.get(p, []) + _entries(args, [Op.READ, Op.DESCRIBE])))
            elif p[0] == ResourceType.GROUP:
                out[p] = _entries(args, [Op.READ])
    for (kind, _, _), entries in out.items():
        valid = (*SUPPORTED_OPERATIONS[kind], Op.ALL)
        if any(e[2] not in valid for e in entries):
            names = ", ".join(_operation_name(op) for op in valid)
            raise ToolError(f"ResourceType {kind.name} only supports operations {names}")
    return out


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[Entry]:
    """Kafka's ``getAcl``: every allowed principal, host and operation, then every denied one."""
    out: list[Entry] = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        for principal in map(_principal, principals or ()):
            out += [(principal, h.strip(), op, permission) for op in operations for h in hosts or [WILDCARD]]
    return list(dict.fromkeys(out))


def _principal(text: str) -> str:
    text = text.strip()
    kind, sep, _ = text.partition(":")
    if not kind or not sep:
        raise ToolError(f"expected a string in format principalType:principalName but got {text}")
    return text


def _operation(name: str) -> AclOperation:
    """Kafka's ``SecurityUtils.operation``: ``IdempotentWrite`` or ``IDEMPOTENTWRITE`` (UNKNOWN if neither)."""
    key = name.strip().upper().replace("_", "")
    return next((op for op in AclOperation if op.name.replace("_", "") == key), AclOperation.UNKNOWN)


def _operation_name(op: AclOperation) -> str:
    return op.name.title().replace("_", "")


def _pattern_text(pattern: Pattern) -> str:
    kind, name, pattern_type = pattern
    name = "<any>" if name is None else name
    return f"ResourcePattern(resourceType={kind.name}, name={name}, patternType={pattern_type.name})"


def _entry_text(entry: Entry) -> str:
    principal, host, operation, permission = entry
    return f"(principal={principal}, host={host}, operation={operation.name}, permissionType={permission.name})"


def _print_block(title: str, entries) -> None:
    print(f"{title}: \n " + "\n".join("\t" + _entry_text(e) for e in entries) + " \n")


def _confirmed(args: argparse.Namespace, pattern: Pattern, entries: list[Entry]) -> bool:
    if args.force:
        return True
    where = f"resource filter `{_pattern_text(pattern)}`"
    if entries:
        listed = "\n".join("\t" + _entry_text(e) for e in entries)
        print(f"Are you sure you want to remove ACLs: \n {listed} \n from {where}? (y/n)")
    else:
        print(f"Are you sure you want to delete all ACLs for {where}? (y/n)")
    return sys.stdin.readline().strip().lower() == "y"


def _create(client, bindings: list[AclBinding]) -> None:
    spec = request_spec(CREATE_ACLS)
    creation = spec.struct("AclCreation")
    creations = [
        creation(
            resource_type=b.resource_type,
            resource_name=b.resource_name,
            resource_pattern_type=b.pattern_type,
            principal=b.principal,
            host=b.host,
            operation=b.operation,
            permission_type=b.permission_type,
        )
        for b in bindings
    ]
    for result in client.request(CREATE_ACLS, 3, spec.cls(creations=creations)).results:
        _check(result.error_code, result.error_message, "creating ACLs")


def _delete(client, filters: list[AclBindingFilter]) -> None:
    spec = request_spec(DELETE_ACLS)
    wire = spec.struct("DeleteAclsFilter")
    body = spec.cls(filters=[wire(**_filter_fields(f)) for f in filters])
    for result in client.request(DELETE_ACLS, 3, body).filter_results:
        _check(result.error_code, result.error_message, "deleting ACLs")


def _filter_fields(f: AclBindingFilter) -> dict:
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission_type,
    }


def _list(client, args: argparse.Namespace) -> None:
    """Kafka's ``listAcls``: the ACLs of each resource filter named (all when none is), per resource."""
    filters = _patterns(args, required=False) or [(ResourceType.ANY, None, PatternType.ANY)]
    found: dict[Pattern, set[Entry]] = {}
    for pattern in filters:
        response = client.request(DESCRIBE_ACLS, 3, request_spec(DESCRIBE_ACLS).cls(
            **_filter_fields(AclBindingFilter(*pattern, *ANY_ENTRY))
        ))  # fmt: skip
        _check(response.error_code, response.error_message, "describing ACLs")
        for r in response.resources:
            key = (ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type))
            found.setdefault(key, set()).update(
                (a.principal, a.host, AclOperation(a.operation), AclPermissionType(a.permission_type)) for a in r.acls
            )
    for principal in [_principal(p) for p in args.principal] if args.principal else [None]:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for pattern in sorted(found, key=lambda p: (p[0], p[1], p[2])):
            entries = sorted(e for e in found[pattern] if principal is None or e[0] == principal)
            if entries:
                _print_block(f"Current ACLs for resource `{_pattern_text(pattern)}`", entries)
