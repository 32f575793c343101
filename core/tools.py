"""``brokkr topics`` and ``brokkr configs``: Kafka's kafka-topics.sh and kafka-configs.sh
for a running broker, over the Kafka protocol (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, IncrementalAlterConfigs; for ``--entity-type users``
and ``clients``, DescribeClientQuotas, AlterClientQuotas, DescribeUserScramCredentials,
AlterUserScramCredentials). Each function returns the
process's exit status and prints what Kafka's tools print; a broker's error is printed
as ``Error: <code name>: <message>`` with status 1."""

from __future__ import annotations

import argparse
import re
import secrets
import sys

from . import client_config
from .client import RawClient
from .config import ConfigSource, parse_overrides
from .errors import ErrorCode
from .protocol.frames import request_spec
from .quotas import CLIENT_ID, QUOTA_KEYS, USER
from .scram import DEFAULT_ITERATIONS, MIN_ITERATIONS, ScramMechanism

METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = (
    3,
    19,
    20,
    32,
    37,
    44,
)
TOPIC, BROKER, GROUP = 2, 4, 32
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    8: "GROUP_CONFIG",
}


class ToolError(Exception):
    """A broker's answer that ends the command with status 1."""


def connect(args: argparse.Namespace, client_id: str) -> RawClient:
    """The connection of ``brokkr topics``, ``configs``, ``acls``,
    ``reassign-partitions`` and ``leader-election``: ``--bootstrap-server``, with the
    security of ``--command-config``."""
    return RawClient(args.bootstrap_server, client_id=client_id, config=client_config.of_args(args))


def error_name(code: int) -> str:
    """Kafka's name of an error code (the number, for one brokkr does not know)."""
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        raise ToolError(f"Error while {what}: {error_name(code)}: {message or ''}".rstrip(": "))


def _metadata(client: RawClient, topics: list[str] | None):
    spec = request_spec(METADATA)
    wanted = None if topics is None else [spec.struct("MetadataRequestTopic")(name=t) for t in topics]
    return client.request(METADATA, 12, spec.cls(topics=wanted, allow_auto_topic_creation=False))


def _resource(resource_type: int, name: str) -> str:
    return {TOPIC: f"topic {name}", GROUP: f"group {name}"}.get(resource_type, f"broker {name or '<default>'}")


def _described_configs(client: RawClient, resource_type: int, name: str) -> list:
    """Every config of a topic, broker or group, with its synonyms (DescribeConfigs v4)."""
    spec = request_spec(DESCRIBE_CONFIGS)
    resource = spec.struct("DescribeConfigsResource")(
        resource_type=resource_type, resource_name=name, configuration_keys=None
    )
    [result] = client.request(DESCRIBE_CONFIGS, 4, spec.cls(resources=[resource], include_synonyms=True)).results
    what = _resource(resource_type, name)
    _check(result.error_code, result.error_message, f"describing the configs of {what}")
    return result.configs


def _topic_configs(client: RawClient, topic: str, include_defaults: bool) -> list:
    configs = _described_configs(client, TOPIC, topic)
    return [c for c in configs if include_defaults or c.config_source == ConfigSource.TOPIC_CONFIG]


def topics(args: argparse.Namespace) -> int:
    with connect(args, "brokkr-topics") as client:
        try:
            if args.create:
                return _create(client, args)
            if args.list:
                for t in sorted(t.name for t in _metadata(client, None).topics):
                    print(t)
                return 0
            if args.describe:
                return _describe(client, args)
            if args.alter:
                return _alter_partitions(client, args)
            if args.delete:
                return _delete(client, args)
        except ToolError as exc:
            print(exc, file=sys.stderr)
            return 1
    return 2


def _require_topic(args: argparse.Namespace) -> str:
    if not args.topic:
        raise ToolError("Missing required argument: --topic")
    return args.topic


def _create(client: RawClient, args: argparse.Namespace) -> int:
    spec = request_spec(CREATE_TOPICS)
    config = spec.struct("CreatableTopicConfig")
    topic = spec.struct("CreatableTopic")(
        name=_require_topic(args),
        num_partitions=args.partitions or -1,
        replication_factor=args.replication_factor or -1,
        configs=[config(name=k, value=v) for k, v in parse_overrides(args.config or []).items()],
    )
    [result] = client.request(CREATE_TOPICS, 7, spec.cls(topics=[topic], timeout_ms=30000)).topics
    _check(result.error_code, result.error_message, f"creating topic {topic.name}")
    print(f"Created topic {topic.name}.")
    return 0


def _describe(client: RawClient, args: argparse.Namespace) -> int:
    response = _metadata(client, [args.topic] if args.topic else None)
    for t in sorted(response.topics, key=lambda t: t.name):
        _check(t.error_code, None, f"describing topic {t.name}")
        configs = ",".join(f"{c.name}={c.value}" for c in _topic_configs(client, t.name, False))
        rf = len(t.partitions[0].replica_nodes) if t.partitions else 0
        print(
            f"Topic: {t.name}\tTopicId: {_kafka_uuid(t.topic_id)}\tPartitionCount: {len(t.partitions)}\t"
            f"ReplicationFactor: {rf}\tConfigs: {configs}"
        )
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            print(
                f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {p.leader_id}\t"
                f"Replicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}"
            )
    return 0


def _kafka_uuid(value) -> str:
    import base64

    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def _alter_partitions(client: RawClient, args: argparse.Namespace) -> int:
    name = _require_topic(args)
    if not args.partitions:
        raise ToolError("--alter needs --partitions (the new total)")
    spec = request_spec(CREATE_PARTITIONS)
    topic = spec.struct("CreatePartitionsTopic")(name=name, count=args.partitions, assignments=None)
    [result] = client.request(CREATE_PARTITIONS, 3, spec.cls(topics=[topic], timeout_ms=30000)).results
    _check(result.error_code, result.error_message, f"adding partitions to topic {name}")
    return 0


def _delete(client: RawClient, args: argparse.Namespace) -> int:
    spec = request_spec(DELETE_TOPICS)
    name = _require_topic(args)
    body = spec.cls(topics=[spec.struct("DeleteTopicState")(name=name)], timeout_ms=30000)
    [result] = client.request(DELETE_TOPICS, 6, body).responses
    _check(result.error_code, result.error_message, f"deleting topic {name}")
    return 0


def configs(args: argparse.Namespace) -> int:
    kinds, names = args.entity_type, args.entity_names or []
    if {"users", "clients"} & set(kinds):
        return _user_and_client_configs(args)
    if len(kinds) > 1 or len(names) > 1:
        print("Only --entity-type users and clients may be given together, each once", file=sys.stderr)
        return 2
    resource_type = {"topics": TOPIC, "groups": GROUP}.get(kinds[0], BROKER)
    name = names[0] if names else ""  # "": --entity-default (brokers: also without a name)
    if resource_type != BROKER and not name:
        print("Missing required argument: --entity-name", file=sys.stderr)
        return 2
    with connect(args, "brokkr-configs") as client:
        try:
            if args.alter:
                return _alter_configs(client, resource_type, name, args)
            return _describe_configs(client, resource_type, name, args)
        except ToolError as exc:
            print(exc, file=sys.stderr)
            return 1


def _describe_configs(client: RawClient, resource_type: int, name: str, args: argparse.Namespace) -> int:
    if resource_type == TOPIC:
        entries = _topic_configs(client, name, args.all)
        print(f"{'All' if args.all else 'Dynamic'} configs for topic {name} are:")
    elif resource_type == GROUP:
        configs = _described_configs(client, GROUP, name)
        entries = [c for c in configs if args.all or c.config_source != ConfigSource.DEFAULT_CONFIG]
        print(f"{'All' if args.all else 'Dynamic'} configs for group {name} are:")
    else:
        configs = _described_configs(client, BROKER, name)
        entries = [c for c in configs if args.all or c.config_source != ConfigSource.DEFAULT_CONFIG]
        print(f"{'All' if args.all else 'Non-default'} configs for broker {name or '<default>'} are:")
    for c in entries:
        synonyms = ", ".join(f"{SOURCES.get(s.source, s.source)}:{s.name}={s.value}" for s in c.synonyms)
        print(f"  {c.name}={c.value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}")
    return 0


def _alter_configs(client: RawClient, resource_type: int, name: str, args: argparse.Namespace) -> int:
    spec = request_spec(INCREMENTAL_ALTER_CONFIGS)
    config = spec.struct("AlterableConfig")
    changes = [config(name=k, config_operation=0, value=v) for k, v in _pairs(args.add_config).items()]
    changes += [config(name=k.strip(), config_operation=1, value=None) for k in _names(args.delete_config)]
    if not changes:
        raise ToolError("--alter needs --add-config or --delete-config")
    resource = spec.struct("AlterConfigsResource")(resource_type=resource_type, resource_name=name, configs=changes)
    [result] = client.request(INCREMENTAL_ALTER_CONFIGS, 1, spec.cls(resources=[resource])).responses
    what = _resource(resource_type, name)
    _check(result.error_code, result.error_message, f"altering the configs of {what}")
    print(f"Completed updating config for {what}.")
    return 0


def _pairs(items: list[str] | None) -> dict[str, str]:
    """``--add-config k1=v1,k2=[a,b]`` (Kafka's syntax: brackets keep a list's commas)."""
    out: dict[str, str] = {}
    for item in items or []:
        depth, start = 0, 0
        for i, ch in enumerate(item + ","):
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                if item[start:i].strip():
                    key, sep, value = item[start:i].partition("=")
                    if not sep:
                        raise ToolError(f"--add-config expects key=value, found {item[start:i]!r}")
                    out[key.strip()] = value.strip().removeprefix("[").removesuffix("]")
                start = i + 1
    return out


def _names(items: list[str] | None) -> list[str]:
    return [n for item in items or [] for n in item.split(",") if n.strip()]


# -- users and clients: SCRAM credentials and client quotas ----------------------------------

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, DESCRIBE_SCRAM, ALTER_SCRAM = 48, 49, 50, 51
#: Each --entity-type of a quota, its entity type and Kafka's word for it in output.
QUOTA_ENTITIES = {"users": (USER, "user-principal"), "clients": (CLIENT_ID, "client-id")}
#: Kafka's quota keys for users and clients (the broker refuses those it does not enforce).
CLIENT_QUOTA_KEYS = (*QUOTA_KEYS, "controller_mutation_rate")
SCRAM_NAMES = tuple(m.mechanism_name for m in ScramMechanism)
#: A SCRAM config's value, Kafka's ``[iterations=8192,]password=...`` (brackets removed).
SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


def _user_and_client_configs(args: argparse.Namespace) -> int:
    """kafka-configs.sh's ``--entity-type users`` and ``clients`` (either, or a user and a
    client id together), Kafka's ConfigCommand with ``--bootstrap-server``: quotas through
    DescribeClientQuotas and AlterClientQuotas, a user's SCRAM credentials through
    DescribeUserScramCredentials and AlterUserScramCredentials. Each --entity-name or
    --entity-default goes with the --entity-type in the same position; without one, a
    --describe shows every entity of that type."""
    kinds, names = args.entity_type, args.entity_names or []
    try:
        if len(set(kinds)) != len(kinds) or not set(kinds) <= set(QUOTA_ENTITIES):
            raise ToolError("Only --entity-type users and clients may be given together, each once")
        if len(names) > len(kinds):
            raise ToolError("More entity names specified than entity types")
        if args.alter and len(names) != len(kinds):
            raise ToolError("--entity-name or --entity-default must be specified with each --entity-type for --alter")
        entity = list(zip(kinds, names + [None] * (len(kinds) - len(names))))  # None: every one
        with connect(args, "brokkr-configs") as client:
            if args.alter:
                _alter_user_or_client(client, entity, args)
                kind, name = entity[0]
                print(
                    f"Completed updating config for {kind[:-1]} {name}."
                    if name
                    else f"Completed updating default config for {kind} in the cluster."
                )
            else:
                for described, values in _quotas(client, entity):
                    shown = ", ".join(f"{k}={v}" for k, v in sorted(values.items()))
                    print(f"Quota configs for {_entity_text(described)} are {shown}")
                if "clients" not in kinds and "" not in names:
                    _describe_scram(client, [n for _, n in entity if n is not None])
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _alter_user_or_client(client: RawClient, entity: list, args: argparse.Namespace) -> None:
    added, deleted = _pairs(args.add_config), [n.strip() for n in _names(args.delete_config)]
    if not added and not deleted:
        raise ToolError("--alter needs --add-config or --delete-config")
    users_only = [k for k, _ in entity] == ["users"]
    allowed = (*CLIENT_QUOTA_KEYS, *SCRAM_NAMES) if users_only else CLIENT_QUOTA_KEYS
    for verb, keys in (("added", list(added)), ("deleted", deleted)):
        if unexpected := [k for k in keys if k not in allowed]:
            what = "quota and SCRAM credential configs" if users_only else "quota configs"
            raise ToolError(
                f"Only {what} can be {verb} for '{'users' if users_only else 'clients'}' using --bootstrap-server. "
                f"Unexpected config names: {', '.join(unexpected)}"
            )
    scram = [k for k in [*added, *deleted] if k in SCRAM_NAMES]
    if not scram:
        _alter_quotas(client, entity, added, deleted)
        return
    if entity[0][1] == "":
        raise ToolError(
            "The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials using "
            "--bootstrap-server."
        )
    if len(scram) != len(added) + len(deleted):
        raise ToolError(
            "Cannot alter both quota and SCRAM credential configs simultaneously for 'users' using --bootstrap-server."
        )
    _alter_scram(client, entity[0][1], added, deleted)


def _entity_text(entity: dict) -> str:
    """Kafka's words for a quota entity: ``user-principal 'alice', the default client-id``."""
    parts = []
    for kind, label in QUOTA_ENTITIES.values():
        if kind in entity:
            parts.append(f"the default {label}" if entity[kind] is None else f"{label} '{entity[kind]}'")
    return ", ".join(parts)


def _quotas(client: RawClient, entity: list) -> list[tuple[dict, dict]]:
    """The quotas of entities of exactly these types: of the name given, the default ("")
    or any (None); sorted, the defaults first."""
    spec = request_spec(DESCRIBE_CLIENT_QUOTAS)
    component = spec.struct("ComponentData")
    components = []
    for kind, name in entity:
        match_type = 2 if name is None else 1 if name == "" else 0  # any, the default, exact
        components.append(component(entity_type=QUOTA_ENTITIES[kind][0], match_type=match_type, match=name or None))
    response = client.request(DESCRIBE_CLIENT_QUOTAS, 1, spec.cls(components=components, strict=True))
    _check(response.error_code, response.error_message, "describing client quotas")
    found = [
        ({e.entity_type: e.entity_name for e in entry.entity}, {v.key: v.value for v in entry.values})
        for entry in response.entries
    ]
    return sorted(found, key=lambda f: sorted((k, v is not None, v or "") for k, v in f[0].items()))


def _alter_quotas(client: RawClient, entity: list, added: dict[str, str], deleted: list[str]) -> None:
    current = next((values for _, values in _quotas(client, entity)), {})
    if invalid := [k for k in deleted if k not in current]:
        raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    spec = request_spec(ALTER_CLIENT_QUOTAS)
    op = spec.struct("OpData")
    ops = []
    for key, value in added.items():
        try:
            ops.append(op(key=key, value=float(value), remove=False))
        except ValueError:
            raise ToolError(f"Cannot parse quota configuration value for {key}: {value}") from None
    ops += [op(key=key, value=0.0, remove=True) for key in deleted]
    entity_data = spec.struct("EntityData")
    entry = spec.struct("EntryData")(
        entity=[entity_data(entity_type=QUOTA_ENTITIES[kind][0], entity_name=name or None) for kind, name in entity],
        ops=ops,
    )
    [result] = client.request(ALTER_CLIENT_QUOTAS, 1, spec.cls(entries=[entry], validate_only=False)).entries
    described = _entity_text({QUOTA_ENTITIES[kind][0]: name or None for kind, name in entity})
    _check(result.error_code, result.error_message, f"altering the quotas of {described}")


def _alter_scram(client: RawClient, user: str, added: dict[str, str], deleted: list[str]) -> None:
    """AlterUserScramCredentials, one request per mechanism (a request naming a user twice
    is refused, DUPLICATE_RESOURCE, as by Kafka's controller): the password is salted here
    with a fresh salt, never sent."""
    spec = request_spec(ALTER_SCRAM)
    deletion, upsertion = spec.struct("ScramCredentialDeletion"), spec.struct("ScramCredentialUpsertion")
    deletions = [deletion(name=user, mechanism=ScramMechanism.from_name(m).type_id) for m in deleted]
    upsertions = []
    for name, value in added.items():
        mechanism = ScramMechanism.from_name(name)
        match = SCRAM_VALUE.fullmatch(value)
        if match is None or match[1] == "":
            raise ToolError(f"Invalid credential property {name}: expected {name}=[iterations=N,password=...]")
        iterations = DEFAULT_ITERATIONS if match[1] in (None, "-1") else int(match[1])
        if iterations < MIN_ITERATIONS:
            raise ToolError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {name}")
        salt = secrets.token_bytes(32)
        salted = mechanism.salted_password(match[2].encode(), salt, iterations)
        upsertions.append(
            upsertion(name=user, mechanism=mechanism.type_id, iterations=iterations, salt=salt, salted_password=salted)
        )
    changes = [spec.cls(deletions=[d], upsertions=[]) for d in deletions]
    changes += [spec.cls(deletions=[], upsertions=[u]) for u in upsertions]
    for change in changes:
        for r in client.request(ALTER_SCRAM, 0, change).results:
            _check(r.error_code, r.error_message, f"altering the SCRAM credentials of user {r.user}")


def _describe_scram(client: RawClient, users: list[str]) -> None:
    """Each user's SCRAM mechanisms and iterations (every user's, when none is named)."""
    spec = request_spec(DESCRIBE_SCRAM)
    named = [spec.struct("UserName")(name=u) for u in users] if users else None
    response = client.request(DESCRIBE_SCRAM, 0, spec.cls(users=named))
    _check(response.error_code, response.error_message, "describing SCRAM credentials")
    for r in response.results:
        if r.error_code:
            print(
                f"Error retrieving SCRAM credential configs for user-principal '{r.user}': "
                f"{error_name(r.error_code)}: {r.error_message or ''}".rstrip(": ")
            )
            continue
        described = ", ".join(
            f"{getattr(ScramMechanism.from_type(i.mechanism), 'mechanism_name', i.mechanism)}=iterations={i.iterations}"
            for i in r.credential_infos
        )
        print(f"SCRAM credential configs for user-principal '{r.user}' are {described}")
