"""``brokkr share-groups``: Kafka's kafka-share-groups.sh for a running broker or cluster,
over the Kafka protocol: list share groups, describe them (start offsets and lag, members,
state), reset their start offsets (a dry run unless ``--execute``; the group must be empty),
delete groups and their offsets. It shares :mod:`.group_tool`'s coordinator lookup, group
listing, offset lookups and table printing."""

from __future__ import annotations

import argparse
import sys

from . import client_config
from .client import RawClient
from .errors import ErrorCode
from .group_tool import DELETE_GROUPS, FIND_COORDINATOR, _Groups, _table, run_group_tool
from .protocol.frames import request_spec
from .tools import ToolError, _check

SHARE_GROUP_DESCRIBE, DESCRIBE_OFFSETS, ALTER_OFFSETS, DELETE_OFFSETS = 77, 90, 91, 92
MISSING = "-"


def share_groups(args: argparse.Namespace) -> int:
    return run_group_tool(args, _ShareGroups, "brokkr-share-groups")


class _ShareGroups(_Groups):
    def connect(self, address: str) -> RawClient:
        return RawClient(address, client_id="brokkr-share-groups", config=self.config)

    def group_ids(self, args) -> list[str]:
        if args.all_groups:
            return [g.group_id for g in self.listed(types=["share"])]
        return super().group_ids(args)

    # -- requests -----------------------------------------------------------------------

    def describe_share_group(self, group: str):
        spec = request_spec(SHARE_GROUP_DESCRIBE)
        body = spec.cls(group_ids=[group], include_authorized_operations=False)
        [described] = self.coordinator(group).request(SHARE_GROUP_DESCRIBE, 1, body).groups
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        _check(described.error_code, described.error_message, f"describing share group {group}")
        return described

    def start_offsets(self, group: str, topics: list[tuple[str, list[int]]] | None = None):
        """(topic, partition) -> (start offset, leader epoch, lag) of the group's share partitions
        (-1 each for a partition answered with an error: its leader did not answer)."""
        spec = request_spec(DESCRIBE_OFFSETS)
        topic = spec.struct("DescribeShareGroupOffsetsRequestTopic")
        wanted = None if topics is None else [topic(topic_name=t, partitions=ps) for t, ps in topics]
        body = spec.cls(groups=[spec.struct("DescribeShareGroupOffsetsRequestGroup")(group_id=group, topics=wanted)])
        [g] = self.coordinator(group).request(DESCRIBE_OFFSETS, 1, body).groups
        _check(g.error_code, g.error_message, f"describing the offsets of share group {group}")
        return {
            (t.topic_name, p.partition_index): (-1, -1, -1) if p.error_code else (p.start_offset, p.leader_epoch, p.lag)
            for t in g.topics
            for p in t.partitions
        }

    # -- commands -----------------------------------------------------------------------

    def list(self, args) -> int:
        states = [s for s in (args.state or "").split(",") if s] if args.state is not None else None
        groups = self.listed(states, ["share"])
        if states is None:
            for g in groups:
                print(g.group_id)
        else:
            _table([[g.group_id, g.group_state] for g in groups], ["GROUP", "STATE"])
        return 0

    def describe(self, group: str, args) -> int:
        described = self.describe_share_group(group)
        if described is None:
            print(f"\nError: Share group '{group}' does not exist.", file=sys.stderr)
            return 1
        if described.group_state == "Empty":
            print(f"\nShare group '{group}' has no active members.", file=sys.stderr)
        if args.state is not None:
            found = self.client.request(FIND_COORDINATOR, 3, request_spec(FIND_COORDINATOR).cls(key=group, key_type=0))
            coordinator = f"{found.host}:{found.port}  ({found.node_id})"
            row = [group, coordinator, described.group_state]
            header = ["GROUP", "COORDINATOR (ID)", "STATE"]
            if args.verbose:
                row += [described.group_epoch, described.assignment_epoch]
                header += ["GROUP-EPOCH", "ASSIGNMENT-EPOCH"]
            print()
            _table([row + [len(described.members)]], header + ["#MEMBERS"])
            return 0
        if args.members:
            if not described.members:
                return 0
            rows = []
            for m in sorted(described.members, key=lambda m: m.member_id):
                tps = m.assignment.topic_partitions
                assignment = ";".join(sorted(f"{t.topic_name}:{','.join(map(str, sorted(t.partitions)))}" for t in tps))
                count = sum(len(t.partitions) for t in tps)
                rows.append(
                    [group, m.member_id, m.client_host, m.client_id, count]
                    + ([m.member_epoch] if args.verbose else [])
                    + [assignment]
                )
            header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
            print()
            _table(rows, header + (["MEMBER-EPOCH"] if args.verbose else []) + ["ASSIGNMENT"])
            return 0
        offsets = self.start_offsets(group)
        if not offsets:
            print(f"\nShare group '{group}' has no offset information.")
            return 0
        rows = []
        for (t, p), (start, epoch, lag) in sorted(offsets.items()):
            shown = [start if start >= 0 else MISSING, lag if lag >= 0 else MISSING]
            rows.append([group, t, p] + ([epoch if start >= 0 else MISSING] if args.verbose else []) + shown)
        header = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + ["START-OFFSET", "LAG"]
        print()
        _table(rows, header)
        return 0

    def reset(self, group: str, args) -> int:
        described = self.describe_share_group(group)
        if described is not None and described.group_state not in ("Empty", "Dead"):
            raise ToolError(f"Error: Share group '{group}' is not empty.")
        if args.topic:
            partitions = self._partitions(group, args)
        else:  # --all-topics: the partitions the group has state for
            partitions = sorted(self.start_offsets(group))
        new = self.reset_offsets(partitions, args)
        if args.execute:
            self._alter(group, new)
        print()
        _table([[group, t, p, o] for (t, p), o in sorted(new.items())], ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"])
        return 0

    def _alter(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        spec = request_spec(ALTER_OFFSETS)
        topics: dict[str, list] = {}
        for (t, p), o in offsets.items():
            topics.setdefault(t, []).append(
                spec.struct("AlterShareGroupOffsetsRequestPartition")(partition_index=p, start_offset=o)
            )
        body = spec.cls(
            group_id=group,
            topics=[
                spec.struct("AlterShareGroupOffsetsRequestTopic")(topic_name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        response = self.coordinator(group).request(ALTER_OFFSETS, 0, body)
        _check(response.error_code, response.error_message, f"resetting the offsets of share group {group}")
        for t in response.responses:
            for p in t.partitions:
                _check(p.error_code, p.error_message, f"resetting the offset of {t.topic_name}-{p.partition_index}")

    def delete(self, groups: list[str]) -> int:
        """Kafka's deleteShareGroups: only listed share groups, and only empty ones, are asked
        to be deleted (DeleteGroups would delete a group of any type)."""
        states = {g.group_id: g.group_state for g in self.listed(types=["share"])}
        groups = list(dict.fromkeys(groups))
        failed = {}
        for group in groups:
            state = states.get(group)
            if state is None:
                failed[group] = f"Group '{group}' is not a share group."
            elif state == "Dead":
                failed[group] = f"Share group '{group}' group state is DEAD."
            elif state != "Empty":
                failed[group] = f"Share group '{group}' is not EMPTY."
            if group in failed:
                continue
            spec = request_spec(DELETE_GROUPS)
            [result] = self.coordinator(group).request(DELETE_GROUPS, 2, spec.cls(groups_names=[group])).results
            if result.error_code:
                failed[group] = ErrorCode(result.error_code).name
        ok = [g for g in groups if g not in failed]
        if not failed:
            print("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
            return 0
        print("\nError: Deletion of some share groups failed:", file=sys.stderr)
        for group, error in failed.items():
            print(f"* Group '{group}' could not be deleted due to: {error}")
        if ok:
            print("\nThese share groups were deleted successfully: " + ", ".join(f"'{g}'" for g in ok))
        return 1

    def delete_offsets(self, groups: list[str], args) -> int:
        return max((self._delete_offsets(g, args) for g in groups), default=0)

    def _delete_offsets(self, group: str, args) -> int:
        if not args.topic:
            raise ToolError("Option --delete-offsets takes --topic.")
        names = [t.partition(":")[0] for t in args.topic]
        spec = request_spec(DELETE_OFFSETS)
        topic = spec.struct("DeleteShareGroupOffsetsRequestTopic")
        body = spec.cls(group_id=group, topics=[topic(topic_name=t) for t in names])
        response = self.coordinator(group).request(DELETE_OFFSETS, 0, body)
        _check(response.error_code, response.error_message, f"deleting the offsets of share group {group}")
        rows = [
            [
                r.topic_name,
                "Successful" if not r.error_code else f"Error: {r.error_message or ErrorCode(r.error_code).name}",
            ]
            for r in sorted(response.responses, key=lambda r: r.topic_name)
        ]
        print()
        _table(rows, ["TOPIC", "STATUS"])
        return 1 if any(r[1] != "Successful" for r in rows) else 0


def add_parser(sub) -> None:
    """``brokkr share-groups`` (kafka-share-groups.sh)."""
    p = sub.add_parser(
        "share-groups", help="list, describe, reset offsets of or delete share groups (kafka-share-groups.sh)"
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT", help="a broker to talk to")
    client_config.add_argument(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="the share groups (with --state: and their states)")
    action.add_argument("--describe", action="store_true", help="start offsets and lag (or --members, --state)")
    action.add_argument(
        "--reset-offsets", action="store_true", help="set the start offsets (a dry run unless --execute)"
    )
    action.add_argument("--delete", action="store_true", help="delete the groups (they must be empty)")
    action.add_argument("--delete-offsets", action="store_true", help="delete the group's offsets of --topic")
    p.add_argument("--group", action="append", help="the group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="every share group")
    p.add_argument("--members", action="store_true", help="with --describe: the members")
    p.add_argument("--verbose", action="store_true", help="with --describe: epochs too")
    p.add_argument("--state", nargs="?", const="", help="with --describe: the state; with --list: filter (A,B)")
    p.add_argument("--topic", action="append", metavar="TOPIC[:P,P]", help="topic (and partitions) to reset or delete")
    p.add_argument("--all-topics", action="store_true", help="every partition the group has state for")
    to = p.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int)
    to.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    run.add_argument("--execute", action="store_true", help="alter the start offsets")
    p.set_defaults(func=share_groups)
