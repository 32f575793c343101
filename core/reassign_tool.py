"""``brokkr reassign-partitions`` and ``brokkr leader-election``: Kafka's
kafka-reassign-partitions.sh and kafka-leader-election.sh for a running cluster, with
Kafka's options, JSON files and output.

reassign-partitions, over Metadata, AlterPartitionReassignments and ListPartitionReassignments:

``--generate --topics-to-move-json-file F --broker-list 1,2,3``
    prints the topics' current replicas and a proposal that spreads them over the brokers
    listed, placed as Kafka places a new topic's (rack aware unless ``--disable-rack-aware``).
    F is ``{"version": 1, "topics": [{"topic": "foo"}]}``.
``--execute --reassignment-json-file F``
    prints the current replicas (keep them: they are the rollback) and starts the moves of F,
    ``{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2]}]}``
    (``log_dirs``, if given, must be ``any``: brokkr moves no replica between log dirs).
    Refused while other moves are under way, unless ``--additional``.
``--verify --reassignment-json-file F``
    whether each move of F is complete, still in progress, or ended elsewhere.
``--cancel --reassignment-json-file F``
    cancels the moves of F under way (their partitions go back to their replicas before).
``--list``
    the moves under way, with the replicas being added and removed.

leader-election, over ElectLeaders: ``--election-type PREFERRED|UNCLEAN`` for
``--topic T --partition P``, ``--all-topic-partitions`` or ``--path-to-json-file F``
(``{"partitions": [{"topic": "foo", "partition": 1}]}``).

Replication throttles (``--throttle``) are not offered: brokkr has none.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter

from . import client_config
from .controller import place_replicas
from .errors import ErrorCode
from .protocol.frames import request_spec
from .tools import ToolError, _check, _metadata, connect, error_name

ELECT_LEADERS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 43, 45, 46
PREFERRED, UNCLEAN = 0, 1
TIMEOUT_MS = 30000
#: Kafka's reassignment and election files are small; larger ones are refused unread.
MAX_JSON_BYTES = 16 * 1024 * 1024
ANY_LOG_DIR = "any"
EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment."
)

TopicPartition = tuple[str, int]


def add_parser(sub) -> None:
    p = sub.add_parser("reassign-partitions", help="move partitions to other brokers (kafka-reassign-partitions.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the cluster")
    client_config.add_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--generate", action="store_true", help="propose moving the topics' partitions to --broker-list"
    )
    action.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    action.add_argument("--verify", action="store_true", help="whether the moves of --reassignment-json-file are done")
    action.add_argument("--cancel", action="store_true", help="cancel the moves of --reassignment-json-file under way")
    action.add_argument("--list", action="store_true", help="the moves under way")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='with --generate: {"topics": [{"topic": ...}]}')
    p.add_argument("--broker-list", metavar="1,2,3", help="with --generate: the brokers to move to")
    p.add_argument("--disable-rack-aware", action="store_true", help="with --generate: ignore broker.rack")
    p.add_argument(
        "--reassignment-json-file", metavar="FILE", help='{"partitions": [{"topic", "partition", "replicas"}]}'
    )
    p.add_argument("--additional", action="store_true", help="with --execute: even while other moves are under way")
    p.add_argument("--preserve-throttles", action="store_true", help="accepted for familiarity (brokkr has none)")
    p.set_defaults(func=reassign_partitions)

    e = sub.add_parser(
        "leader-election", help="elect partitions' preferred (or any live) leader (kafka-leader-election.sh)"
    )
    e.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker of the cluster")
    client_config.add_argument(e, "--admin.config")
    e.add_argument(
        "--election-type", required=True, type=str.upper, choices=("PREFERRED", "UNCLEAN"),
        help="PREFERRED: the first replica, where it is in sync; UNCLEAN: any live replica, where no leader is",
    )  # fmt: skip
    e.add_argument("--topic", help="the topic (with --partition)")
    e.add_argument("--partition", type=int, help="the partition of --topic")
    e.add_argument("--all-topic-partitions", action="store_true", help="every partition")
    e.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": ..., "partition": ...}]}')
    e.set_defaults(func=leader_election)


def reassign_partitions(args: argparse.Namespace) -> int:
    required = {
        "generate": ("topics_to_move_json_file", "broker_list"),
        "execute": ("reassignment_json_file",),
        "verify": ("reassignment_json_file",),
        "cancel": ("reassignment_json_file",),
        "list": (),
    }
    action = next(a for a in required if getattr(args, a))
    try:
        missing = [f"--{o.replace('_', '-')}" for o in required[action] if getattr(args, o) is None]
        if missing:
            raise ToolError(f"Missing required argument(s) for --{action}: {', '.join(missing)}")
        with connect(args, "reassign-partitions-tool") as client:
            if action == "generate":
                _generate(client, args)
            elif action == "list":
                _print_ongoing(client)
            else:
                targets = _partitions_file(args.reassignment_json_file)
                {"execute": _execute, "verify": _verify, "cancel": _cancel}[action](client, targets, args)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _read_json(path: str):
    with open(path, "rb") as f:
        data = f.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ToolError(f"{path} is larger than {MAX_JSON_BYTES} bytes")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ToolError(f"{path}: The input string is not a valid JSON: {exc}") from None


def _versioned(doc, path: str, key: str) -> list:
    if not isinstance(doc, dict):
        raise ToolError(f"{path}: expected a JSON object")
    version = doc.get("version", 1)
    if version != 1:
        raise ToolError(f"Not supported version field value {version}")
    items = doc.get(key, [])
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ToolError(f'{path}: "{key}" must be a list of objects')
    return items


def _field(item: dict, name: str, kind: type, path: str):
    value = item.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ToolError(f"{path}: {name} must be a {kind.__name__}, found {value!r}")
    return value


def _partitions_file(path: str) -> dict[TopicPartition, list[int]]:
    """A reassignment file, checked as Kafka's ``parseExecuteAssignmentArgs`` checks it."""
    out: dict[TopicPartition, list[int]] = {}
    repeated = []
    for item in _versioned(_read_json(path), path, "partitions"):
        tp = (_field(item, "topic", str, path), _field(item, "partition", int, path))
        replicas = _field(item, "replicas", list, path)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ToolError(f"{path}: replicas must be broker ids, found {replicas!r}")
        log_dirs = item.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or len(log_dirs) != len(replicas):
            raise ToolError(
                f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} for partition "
                f"{_tp(tp)}"
            )
        if any(d != ANY_LOG_DIR for d in log_dirs):
            raise ToolError(f'{_tp(tp)}: log_dirs other than "any": brokkr does not move replicas between log dirs')
        if tp in out:
            repeated.append(_tp(tp))
        out[tp] = replicas
    if not out:
        raise ToolError("Partition reassignment list cannot be empty")
    if any(not r for r in out.values()):
        raise ToolError("Partition replica list cannot be empty")
    if repeated:
        raise ToolError(f"Partition reassignment contains duplicate topic partitions: {','.join(repeated)}")
    twice = [
        f"{_tp(tp)} contains multiple entries for {','.join(str(b) for b, n in Counter(r).items() if n > 1)}"
        for tp, r in out.items()
        if len(set(r)) != len(r)
    ]
    if twice:
        raise ToolError(f"Partition replica lists may not contain duplicate entries: {'. '.join(twice)}")
    return out


def _json(assignment: dict[TopicPartition, list[int]]) -> str:
    """Kafka's ``formatAsReassignmentJson``: version 1, sorted by topic and partition."""
    partitions = [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": [ANY_LOG_DIR] * len(r)}
        for (t, p), r in sorted(assignment.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _replicas(client, topics: list[str]) -> dict[TopicPartition, list[int]]:
    """Every partition of ``topics`` and its replicas (Metadata); a topic missing is an error."""
    out = {}
    for t in _metadata(client, sorted(set(topics))).topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ToolError(f"Topic {t.name} not found.")
        _check(t.error_code, None, f"describing topic {t.name}")
        out.update({(t.name, p.partition_index): list(p.replica_nodes) for p in t.partitions})
    return out


def _generate(client, args: argparse.Namespace) -> None:
    path = args.topics_to_move_json_file
    topics = [_field(item, "topic", str, path) for item in _versioned(_read_json(path), path, "topics")]
    try:
        brokers = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        raise ToolError(f"--broker-list {args.broker_list}: expected broker ids such as 1,2,3") from None
    for what, items in (("Broker list", brokers), ("List of topics to reassign", topics)):
        if twice := sorted(x for x, n in Counter(items).items() if n > 1):
            raise ToolError(f"{what} contains duplicate entries: {', '.join(map(str, twice))}")
    current = _replicas(client, topics)
    listed = set(brokers)
    racks = {b.node_id: b.rack for b in _metadata(client, []).brokers if b.node_id in listed}
    if args.disable_rack_aware:
        racks = dict.fromkeys(racks)
    elif 0 < sum(r is None for r in racks.values()) < len(racks):
        raise ToolError(
            "Not all brokers have rack information. Add --disable-rack-aware in command line to make replica "
            "assignment without rack information."
        )
    proposed = {}
    for topic in dict.fromkeys(topics):
        partitions = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, partitions[0])]) if partitions else 0
        if rf > len(racks):
            raise ToolError(f"Replication factor: {rf} larger than available brokers: {len(racks)}.")
        if partitions:
            n = len(racks)
            placed = place_replicas(racks, range(len(partitions)), rf, random.randrange(n), random.randrange(n))
            proposed.update({(topic, p): list(r) for p, r in placed.items()})
    print(f"Current partition replica assignment\n{_json(current)}\n")
    print(f"Proposed partition reassignment configuration\n{_json(proposed)}")


def _ongoing(client, partitions: list[TopicPartition] | None = None) -> dict[TopicPartition, tuple]:
    """The moves under way (of ``partitions``, or all): replicas, adding, removing."""
    spec = request_spec(LIST_REASSIGNMENTS)
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        wanted = spec.struct("ListPartitionReassignmentsTopics")
        topics = [wanted(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
    response = client.request(LIST_REASSIGNMENTS, 0, spec.cls(timeout_ms=TIMEOUT_MS, topics=topics))
    _check(response.error_code, response.error_message, "listing partition reassignments")
    return {
        (t.name, p.partition_index): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
        for t in response.topics
        for p in t.partitions
    }


def _print_ongoing(client) -> None:
    ongoing = _ongoing(client)
    if not ongoing:
        print("No partition reassignments found.")
        return
    print("Current partition reassignments:")
    for tp, (replicas, adding, removing) in sorted(ongoing.items()):
        line = f"{_tp(tp)}: replicas: {','.join(map(str, replicas))}."
        line += f" adding: {','.join(map(str, adding))}." if adding else ""
        line += f" removing: {','.join(map(str, removing))}." if removing else ""
        print(line)


def _alter(client, moves: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, str]:
    """AlterPartitionReassignments; the partitions refused, with the broker's error."""
    spec = request_spec(ALTER_REASSIGNMENTS)
    partition, topic = spec.struct("ReassignablePartition"), spec.struct("ReassignableTopic")
    by_topic: dict[str, list] = {}
    for (t, p), replicas in sorted(moves.items()):
        by_topic.setdefault(t, []).append(partition(partition_index=p, replicas=replicas))
    body = spec.cls(timeout_ms=TIMEOUT_MS, topics=[topic(name=t, partitions=ps) for t, ps in by_topic.items()])
    response = client.request(ALTER_REASSIGNMENTS, 0, body)
    errors = {}
    for t in response.responses:
        for p in t.partitions:
            code = p.error_code or response.error_code
            if code:
                message = p.error_message or response.error_message or ""
                errors[(t.name, p.partition_index)] = f"{error_name(code)}: {message}".rstrip(": ")
    return errors


def _execute(client, targets: dict[TopicPartition, list[int]], args: argparse.Namespace) -> None:
    if not args.additional and _ongoing(client):
        raise ToolError(EXISTING)
    live = {b.node_id for b in _metadata(client, []).brokers}
    unknown = next((b for r in targets.values() for b in r if b not in live), None)
    if unknown is not None:
        raise ToolError(f"Unknown broker id {unknown}")
    current = _replicas(client, [t for t, _ in targets])
    if missing := [_tp(tp) for tp in sorted(targets) if tp not in current]:
        raise ToolError(f"Unable to find partition: {', '.join(missing)}")
    print("Current partition replica assignment\n")
    print(_json({tp: current[tp] for tp in targets}))
    print("\nSave this to use as the --reassignment-json-file option during rollback")
    errors = _alter(client, targets)
    if errors:
        raise ToolError(
            "Error reassigning partition(s):\n" + "\n".join(f"{_tp(tp)}: {e}" for tp, e in sorted(errors.items()))
        )
    s = "" if len(targets) == 1 else "s"
    print(f"Successfully started partition reassignment{s} for {','.join(_tp(tp) for tp in sorted(targets))}")


def _verify(client, targets: dict[TopicPartition, list[int]], args: argparse.Namespace) -> None:
    ongoing = _ongoing(client)
    topics = {t for t, p in targets if (t, p) not in ongoing}
    current = {}
    for t in _metadata(client, sorted(topics)).topics if topics else ():
        current.update({(t.name, p.partition_index): list(p.replica_nodes) for p in t.partitions})
    print("Status of partition reassignment:")
    for tp, target in sorted(targets.items()):
        if tp in ongoing:
            print(f"Reassignment of partition {_tp(tp)} is still in progress.")
        elif current.get(tp, []) == target:
            print(f"Reassignment of partition {_tp(tp)} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {_tp(tp)}, but replica set is "
                f"{','.join(map(str, current.get(tp, [])))} rather than {','.join(map(str, target))}."
            )


def _cancel(client, targets: dict[TopicPartition, list[int]], args: argparse.Namespace) -> None:
    moving = sorted(_ongoing(client, list(targets)))
    if not moving:
        print("None of the specified partition reassignments are active.")
        return
    errors = _alter(client, dict.fromkeys(moving))
    s = "" if len(errors if errors else moving) == 1 else "s"
    if errors:
        listed = "\n".join(f"{_tp(tp)}: {e}" for tp, e in sorted(errors.items()))
        raise ToolError(f"Error cancelling partition reassignment{s} for:\n{listed}")
    print(f"Successfully cancelled partition reassignment{s} for: {','.join(_tp(tp) for tp in moving)}")


# -- leader-election ----------------------------------------------------------------------


def leader_election(args: argparse.Namespace) -> int:
    try:
        chosen = [o for o in ("topic", "all_topic_partitions", "path_to_json_file") if getattr(args, o)]
        if len(chosen) != 1:
            raise ToolError(
                "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"
            )
        if args.topic and args.partition is None:
            raise ToolError("Missing required option(s): partition")
        if args.partition is not None and not args.topic:
            raise ToolError("Option partition is only allowed if topic is used")
        partitions = None
        if args.topic:
            partitions = [(args.topic, args.partition)]
        elif args.path_to_json_file:
            partitions = _election_file(args.path_to_json_file)
        with connect(args, "brokkr-leader-election") as client:
            return _elect(client, args.election_type, partitions)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1


def _election_file(path: str) -> list[TopicPartition]:
    doc = _read_json(path)
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise ToolError('Replica election data is missing "partitions" field')
    items = _versioned({"partitions": doc["partitions"]}, path, "partitions")
    partitions = [(_field(i, "topic", str, path), _field(i, "partition", int, path)) for i in items]
    if twice := sorted(tp for tp, n in Counter(partitions).items() if n > 1):
        raise ToolError(f"Replica election data contains duplicate partitions: {', '.join(map(_tp, twice))}")
    return partitions


def _elect(client, election_type: str, partitions: list[TopicPartition] | None) -> int:
    spec = request_spec(ELECT_LEADERS)
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        topics = [spec.struct("TopicPartitions")(topic=t, partitions=ps) for t, ps in by_topic.items()]
    kind = PREFERRED if election_type == "PREFERRED" else UNCLEAN
    response = client.request(
        ELECT_LEADERS, 2, spec.cls(election_type=kind, topic_partitions=topics, timeout_ms=TIMEOUT_MS)
    )
    if response.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        raise ToolError("Not authorized to perform leader election")
    _check(response.error_code, None, "electing leaders")
    done, noop, failed = [], [], []
    for r in response.replica_election_results:
        for p in r.partition_result:
            tp = _tp((r.topic, p.partition_id))
            if p.error_code == ErrorCode.NONE:
                done.append(tp)
            elif p.error_code == ErrorCode.ELECTION_NOT_NEEDED:
                noop.append(tp)
            else:
                failed.append((tp, f"{error_name(p.error_code)}: {p.error_message or ''}".rstrip(": ")))
    if done:
        print(f"Successfully completed leader election ({election_type}) for partitions {', '.join(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {', '.join(noop)}")
    for tp, error in failed:
        print(f"Error completing leader election ({election_type}) for partition: {tp}: {error}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0
