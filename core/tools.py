"""``brokkr topics`` and ``brokkr configs``: Kafka's kafka-topics.sh and kafka-configs.sh
for a running broker, over the Kafka protocol (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, IncrementalAlterConfigs). Each function returns the
process's exit status and prints what Kafka's tools print; a broker's error is printed
as ``Error: <code name>: <message>`` with status 1."""

from __future__ import annotations

import argparse
import sys

from .client import RawClient
from .config import ConfigSource, parse_overrides
from .errors import ErrorCode
from .protocol.frames import request_spec

METADATA, CREATE_TOPICS, DELETE_TOPICS, DESCRIBE_CONFIGS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS = (
    3,
    19,
    20,
    32,
    37,
    44,
)
TOPIC, BROKER = 2, 4
SOURCES = {
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
}


class ToolError(Exception):
    """A broker's answer that ends the command with status 1."""


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise ToolError(f"Error while {what}: {name}: {message or ''}".rstrip(": "))


def _metadata(client: RawClient, topics: list[str] | None):
    spec = request_spec(METADATA)
    wanted = None if topics is None else [spec.struct("MetadataRequestTopic")(name=t) for t in topics]
    return client.request(METADATA, 12, spec.cls(topics=wanted, allow_auto_topic_creation=False))


def _described_configs(client: RawClient, resource_type: int, name: str) -> list:
    """Every config of a topic or broker, with its synonyms (DescribeConfigs v4)."""
    spec = request_spec(DESCRIBE_CONFIGS)
    resource = spec.struct("DescribeConfigsResource")(
        resource_type=resource_type, resource_name=name, configuration_keys=None
    )
    [result] = client.request(DESCRIBE_CONFIGS, 4, spec.cls(resources=[resource], include_synonyms=True)).results
    what = f"topic {name}" if resource_type == TOPIC else f"broker {name or '<default>'}"
    _check(result.error_code, result.error_message, f"describing the configs of {what}")
    return result.configs


def _topic_configs(client: RawClient, topic: str, include_defaults: bool) -> list:
    configs = _described_configs(client, TOPIC, topic)
    return [c for c in configs if include_defaults or c.config_source == ConfigSource.TOPIC_CONFIG]


def topics(args: argparse.Namespace) -> int:
    with RawClient(args.bootstrap_server, client_id="brokkr-topics") as client:
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
    resource_type = TOPIC if args.entity_type == "topics" else BROKER
    name = "" if args.entity_default else (args.entity_name or "")
    if resource_type == TOPIC and not name:
        print("Missing required argument: --entity-name", file=sys.stderr)
        return 2
    with RawClient(args.bootstrap_server, client_id="brokkr-configs") as client:
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
    what = f"topic {name}" if resource_type == TOPIC else f"broker {name or '<default>'}"
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
