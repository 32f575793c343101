"""``brokkr consumer-groups``: Kafka's kafka-consumer-groups.sh for a running broker or
cluster, over the Kafka protocol: list groups, describe them (offsets and lag, members,
state), reset their offsets (a dry run unless ``--execute``), delete groups and offsets.
Requests for a group go to its coordinator (FindCoordinator); ListGroups to every broker."""

from __future__ import annotations

import argparse
import io
import os
import sys
from datetime import datetime

from . import client_config
from .client import RawClient
from .errors import ErrorCode
from .protocol.consumer_protocol import decode_assignment
from .protocol.frames import request_spec
from .tools import ToolError, _check, _metadata

OFFSET_COMMIT, OFFSET_FETCH, LIST_OFFSETS, FIND_COORDINATOR = 8, 9, 2, 10
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS, OFFSET_DELETE, CONSUMER_GROUP_DESCRIBE = 16, 15, 42, 47, 69
LATEST, EARLIEST = -1, -2


#: What a reset without --execute says first, as Kafka's tool does (on standard error).
DRY_RUN_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. Add --execute to commit the new offsets, "
    "or --dry-run to only show them without this warning."
)


def consumer_groups(args: argparse.Namespace) -> int:
    return run_group_tool(args, _Groups, "brokkr-consumer-groups")


def run_group_tool(args: argparse.Namespace, tool_class: type[_Groups], client_id: str) -> int:
    """``brokkr consumer-groups`` and ``brokkr share-groups``: the action asked, on each group."""
    if args.reset_offsets and not (args.execute or args.dry_run):
        print(DRY_RUN_WARNING, file=sys.stderr)
    if isinstance(sys.stdout, io.TextIOWrapper):  # each line written at once: a reader gone (head) is met below
        sys.stdout.reconfigure(line_buffering=True)
    try:
        config = client_config.of_args(args)
        with RawClient(args.bootstrap_server, client_id=client_id, config=config) as client:
            tool = tool_class(client, args.bootstrap_server, config)
            if args.list:
                return tool.list(args)
            groups = tool.group_ids(args)
            if args.describe:
                return max((tool.describe(g, args) for g in groups), default=0)
            if args.reset_offsets:
                return max((tool.reset(g, args) for g in groups), default=0)
            if args.delete_offsets:
                return tool.delete_offsets(groups, args)
            if args.delete:
                return tool.delete(groups)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    except BrokenPipeError:  # piped into head, which has read enough: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and the exit's flush fails no more
        return 1
    except OSError as exc:  # the client's errors name the broker's address
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 2


def _table(rows: list[list], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print(" ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


class _Groups:
    def __init__(self, client: RawClient, bootstrap: str, config: client_config.ClientConfig):
        self.client, self.bootstrap, self.config = client, bootstrap, config
        self._coordinators: dict[str, RawClient] = {}

    def connect(self, address: str) -> RawClient:
        return RawClient(address, client_id="brokkr-consumer-groups", config=self.config)

    # -- requests -----------------------------------------------------------------------

    def coordinator(self, group: str) -> RawClient:
        found = self.client.request(FIND_COORDINATOR, 3, request_spec(FIND_COORDINATOR).cls(key=group, key_type=0))
        _check(found.error_code, found.error_message, f"finding the coordinator of group {group}")
        address = f"{found.host}:{found.port}"
        if address not in self._coordinators:
            self._coordinators[address] = self.connect(address)
        return self._coordinators[address]

    def listed(self, states: list[str] | None = None, types: list[str] | None = None) -> list:
        spec = request_spec(LIST_GROUPS)
        out = {}
        for b in _metadata(self.client, []).brokers:
            with self.connect(f"{b.host}:{b.port}") as c:
                # Share groups are kafka-share-groups.sh's (brokkr share-groups): not listed here, as in Kafka.
                body = spec.cls(states_filter=states or [], types_filter=types or ["classic", "consumer"])
                response = c.request(LIST_GROUPS, 5, body)
            _check(response.error_code, None, "listing groups")
            out.update({g.group_id: g for g in response.groups})
        return [out[k] for k in sorted(out)]

    def group_ids(self, args) -> list[str]:
        if args.all_groups:
            return [g.group_id for g in self.listed()]
        if not args.group:
            raise ToolError("Option --group or --all-groups is required")
        return args.group

    def describe_group(self, group: str):
        spec = request_spec(DESCRIBE_GROUPS)
        [described] = self.coordinator(group).request(DESCRIBE_GROUPS, 5, spec.cls(groups=[group])).groups
        _check(described.error_code, None, f"describing group {group}")
        return described

    def members(self, group: str, described) -> list[tuple[str, str, str, list[tuple[str, int]]]]:
        """(member id, host, client id, [(topic, partition)]) of each member."""
        if (
            described.protocol_type == "consumer"
            and not described.members
            and described.group_state
            not in (
                "Dead",
                "Empty",
            )
        ):
            return self._consumer_protocol_members(group)
        out = []
        for m in described.members:
            tps: list[tuple[str, int]] = []
            if m.member_assignment:
                try:
                    for t in decode_assignment(bytes(m.member_assignment)).assigned_partitions:
                        tps.extend((t.topic, p) for p in t.partitions)
                except Exception:  # another protocol's assignment: shown without partitions
                    pass
            out.append((m.member_id, m.client_host, m.client_id, tps))
        return out

    def _consumer_protocol_members(self, group: str):
        spec = request_spec(CONSUMER_GROUP_DESCRIBE)
        [g] = self.coordinator(group).request(CONSUMER_GROUP_DESCRIBE, 0, spec.cls(group_ids=[group])).groups
        _check(g.error_code, g.error_message, f"describing group {group}")
        names = {t.topic_id: t.name for t in _metadata(self.client, None).topics}
        return [
            (
                m.member_id,
                m.client_host,
                m.client_id,
                [
                    (names.get(t.topic_id, str(t.topic_id)), p)
                    for t in m.assignment.topic_partitions
                    for p in t.partitions
                ],
            )
            for m in g.members
        ]

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        spec = request_spec(OFFSET_FETCH)
        body = spec.cls(groups=[spec.struct("OffsetFetchRequestGroup")(group_id=group, topics=None)])
        [g] = self.coordinator(group).request(OFFSET_FETCH, 8, body).groups
        _check(g.error_code, None, f"fetching the offsets of group {group}")
        return {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}

    def offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets for each partition (LATEST, EARLIEST or a time), from its leader."""
        md = _metadata(self.client, sorted({t for t, _ in partitions}))
        brokers = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
        leaders = {(t.name, p.partition_index): p.leader_id for t in md.topics for p in t.partitions}
        spec = request_spec(LIST_OFFSETS)
        out = {}
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp in partitions:
            by_leader.setdefault(leaders.get(tp, -1), []).append(tp)
        for leader, tps in by_leader.items():
            if leader not in brokers:
                continue
            topics: dict[str, list] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(
                    spec.struct("ListOffsetsPartition")(partition_index=p, timestamp=timestamp)
                )
            body = spec.cls(
                replica_id=-1,
                isolation_level=0,
                topics=[spec.struct("ListOffsetsTopic")(name=t, partitions=ps) for t, ps in topics.items()],
            )
            with self.connect(brokers[leader]) as c:
                response = c.request(LIST_OFFSETS, 7, body)
            for t in response.topics:
                for p in t.partitions:
                    if not p.error_code:
                        out[(t.name, p.partition_index)] = p.offset
        return out

    # -- commands -----------------------------------------------------------------------

    def list(self, args) -> int:
        states = [s for s in (args.state or "").split(",") if s] if args.state is not None else None
        types = [t for t in (args.type or "").split(",") if t] if args.type is not None else None
        groups = self.listed(states, types)
        if states is None and types is None:
            for g in groups:
                print(g.group_id)
        else:
            header = ["GROUP"] + (["STATE"] if states is not None else []) + (["TYPE"] if types is not None else [])
            rows = [
                [g.group_id]
                + ([g.group_state] if states is not None else [])
                + ([g.group_type.capitalize()] if types is not None else [])
                for g in groups
            ]
            _table(rows, header)
        return 0

    def describe(self, group: str, args) -> int:
        described = self.describe_group(group)
        committed = self.committed(group)
        if described.group_state == "Dead" and not committed:
            print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
            return 1
        members = self.members(group, described)
        if args.state is not None:
            coordinator = self.client.request(
                FIND_COORDINATOR, 3, request_spec(FIND_COORDINATOR).cls(key=group, key_type=0)
            )
            print()
            _table(
                [
                    [
                        group,
                        f"{coordinator.host}:{coordinator.port} ({coordinator.node_id})",
                        described.protocol_data,
                        described.group_state,
                        len(members),
                    ]
                ],
                ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            )
            return 0
        if not members:
            print(f"\nConsumer group '{group}' has no active members.")
        if args.members:
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            rows = []
            for member_id, host, client_id, tps in members:
                row = [group, member_id, f"/{host}", client_id, len(tps)]
                if args.verbose:
                    row.append(",".join(f"{t}({p})" for t, p in sorted(tps)) or "-")
                rows.append(row)
            if rows:
                print()
                _table(rows, header + (["ASSIGNMENT"] if args.verbose else []))
            return 0
        owner = {tp: (m, h, c) for m, h, c, tps in members for tp in tps}
        partitions = sorted(set(committed) | set(owner))
        ends = self.offsets(partitions, LATEST)
        rows = []
        for tp in partitions:
            current = committed.get(tp, -1)
            end = ends.get(tp)
            lag = end - current if end is not None and current >= 0 else "-"
            m, h, c = owner.get(tp, ("-", None, "-"))
            rows.append(
                [group, tp[0], tp[1], current if current >= 0 else "-", end if end is not None else "-", lag, m]
                + [f"/{h}" if h else "-", c]
            )
        print()
        header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"]
        _table(rows, header + ["HOST", "CLIENT-ID"])
        return 0

    def _partitions(self, group: str, args) -> list[tuple[str, int]]:
        if args.all_topics:
            return sorted(self.committed(group))
        if not args.topic:
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
        out = []
        for spec in args.topic:
            name, _, parts = spec.partition(":")
            if parts:
                out.extend((name, int(p)) for p in parts.split(","))
            else:
                [t] = _metadata(self.client, [name]).topics
                _check(t.error_code, None, f"looking up topic {name}")
                out.extend((name, p.partition_index) for p in t.partitions)
        return sorted(out)

    def reset(self, group: str, args) -> int:
        described = self.describe_group(group)
        if described.group_state not in ("Empty", "Dead"):
            raise ToolError(
                f"Error: Assignments can only be reset if the group '{group}' is inactive, but the current state "
                f"is {described.group_state}."
            )
        partitions = self._partitions(group, args)
        new = self.reset_offsets(partitions, args, lambda: self.committed(group))
        if args.execute:
            self._commit(group, new)
        print()
        _table([[group, t, p, o] for (t, p), o in sorted(new.items())], ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
        return 0

    def reset_offsets(self, partitions: list, args, current=None) -> dict[tuple[str, int], int]:
        """The offsets a reset specification gives ``partitions``, clamped into [earliest,
        latest] as Kafka's tool clamps them; ``current()`` gives the offsets --shift-by
        moves (a tool without --shift-by passes none)."""
        earliest, latest = self.offsets(partitions, EARLIEST), self.offsets(partitions, LATEST)
        if args.to_datetime:
            stamp = int(datetime.fromisoformat(args.to_datetime).timestamp() * 1000)
            at = self.offsets(partitions, stamp)
            wanted = {tp: at.get(tp, latest.get(tp, 0)) for tp in partitions}
        elif args.to_earliest:
            wanted = dict(earliest)
        elif args.to_latest:
            wanted = dict(latest)
        elif args.to_offset is not None:
            wanted = dict.fromkeys(partitions, args.to_offset)
        elif current is not None and args.shift_by is not None:
            offsets = current()
            wanted = {tp: offsets.get(tp, latest.get(tp, 0)) + args.shift_by for tp in partitions}
        else:
            raise ToolError(
                "One of the reset specifications should be defined: --to-datetime, --to-earliest, --to-latest, "
                "--to-offset" + (", --shift-by." if current is not None else ".")
            )
        return {tp: min(max(o, earliest.get(tp, 0)), latest.get(tp, o)) for tp, o in wanted.items() if tp in latest}

    def _commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        spec = request_spec(OFFSET_COMMIT)
        topics: dict[str, list] = {}
        for (t, p), o in offsets.items():
            part = spec.struct("OffsetCommitRequestPartition")(
                partition_index=p, committed_offset=o, committed_metadata=""
            )
            topics.setdefault(t, []).append(part)
        body = spec.cls(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[spec.struct("OffsetCommitRequestTopic")(name=t, partitions=ps) for t, ps in topics.items()],
        )
        response = self.coordinator(group).request(OFFSET_COMMIT, 8, body)
        for t in response.topics:
            for p in t.partitions:
                _check(p.error_code, None, f"committing the offset of {t.name}-{p.partition_index}")

    def delete(self, groups: list[str]) -> int:
        failed = {}
        for group in groups:
            spec = request_spec(DELETE_GROUPS)
            [result] = self.coordinator(group).request(DELETE_GROUPS, 2, spec.cls(groups_names=[group])).results
            if result.error_code:
                failed[group] = ErrorCode(result.error_code).name
        ok = [g for g in groups if g not in failed]
        if ok:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
        if failed:
            print("Deletion of some consumer groups failed:", file=sys.stderr)
            for group, error in failed.items():
                print(f"* Group '{group}' could not be deleted due to: {error}", file=sys.stderr)
            return 1
        return 0

    def delete_offsets(self, groups: list[str], args) -> int:
        [group] = groups
        partitions = self._partitions(group, args)
        spec = request_spec(OFFSET_DELETE)
        topics: dict[str, list] = {}
        for t, p in partitions:
            topics.setdefault(t, []).append(spec.struct("OffsetDeleteRequestPartition")(partition_index=p))
        body = spec.cls(
            group_id=group,
            topics=[spec.struct("OffsetDeleteRequestTopic")(name=t, partitions=ps) for t, ps in topics.items()],
        )
        response = self.coordinator(group).request(OFFSET_DELETE, 0, body)
        _check(response.error_code, None, f"deleting offsets of group {group}")
        rows = [
            [t.name, p.partition_index, "Successful" if not p.error_code else f"Error: {ErrorCode(p.error_code).name}"]
            for t in response.topics
            for p in t.partitions
        ]
        print()
        _table(rows, ["TOPIC", "PARTITION", "STATUS"])
        return 1 if any(r[2] != "Successful" for r in rows) else 0
