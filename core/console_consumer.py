"""``brokkr console-consumer``: Kafka's kafka-console-consumer.sh, with its options and
formatter properties, on brokkr's own raw client (no Kafka client library needed).

Records are printed as Kafka's DefaultMessageFormatter prints them (``--property``, or
``--formatter-property`` as Kafka 4.1 names it): the value and a newline, preceded when
asked by ``print.timestamp`` (``CreateTime:<ms>`` or ``LogAppendTime:<ms>``),
``print.partition`` (``Partition:<n>``), ``print.offset`` (``Offset:<n>``),
``print.epoch`` (``Epoch:<n>``), ``print.headers`` (``k1:v1,k2:v2``, or ``NO_HEADERS``)
and ``print.key``, each followed by ``key.separator`` (a tab); ``print.value=false``
drops the value, ``line.separator``, ``headers.separator`` and ``null.literal`` (for a
null key, value or header value: ``null``) are Kafka's too.

What is read: every partition of ``--topic`` from its end, or its start with
``--from-beginning`` (``auto.offset.reset``); ``--partition`` alone, from ``--offset``
(a number, ``earliest`` or ``latest``); or, with ``--group``, the partitions the group's
coordinator assigns this member (the consumer group protocol of KIP-848, chosen over the
classic one for being one request with the assignor on the coordinator: no JoinGroup and
SyncGroup rounds, no client-side assignor, no initial rebalance delay), from the group's
committed offsets,
committed again every ``auto.commit.interval.ms`` and at the end (``enable.auto.commit``,
true): only what was printed is committed, so a second run continues where the first
stopped. Without ``--group`` no group is joined and nothing is committed (Kafka's tool
joins a random group it never commits for). ``--isolation-level read_committed`` hides
aborted transactions (the Fetch's aborted list, as Kafka's consumer reads it) and stops
at the last stable offset. It stops after ``--max-messages``, after ``--timeout-ms``
without a record, or at Ctrl-C or SIGTERM, and prints ``Processed a total of N
messages`` on standard error.

Consumer settings (``group.id``, ``auto.offset.reset``, ``isolation.level``,
``enable.auto.commit``, ``fetch.max.wait.ms``, ..., and the security ones of
:mod:`.client_config`) come from ``--consumer.config`` (``--command-config`` since Kafka
4.1), then ``--consumer-property`` (``--command-property``), then the options.
"""

from __future__ import annotations

import argparse
import base64
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, BinaryIO

from . import client_config
from .client import Brokers
from .config import read_properties
from .errors import ConfigError, CorruptRequest, ErrorCode
from .protocol.control import read_end_txn_marker
from .protocol.frames import request_spec
from .protocol.records import HEADER_SIZE, BatchHeader, Record, crc_ok, iter_batches_untrusted, iter_records
from .tools import ToolError, _check

FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, API_VERSIONS, HEARTBEAT = 1, 2, 8, 9, 10, 18, 68
EARLIEST, LATEST = -2, -1
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}
#: Partition errors after which the leader is looked up again and the fetch retried.
STALE_METADATA = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.OFFSET_NOT_AVAILABLE,
}
COORDINATOR_MOVED = {
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}
UNSTABLE_OFFSET_COMMIT = 88
BACKOFF = 0.1  # seconds before a retry (Kafka's retry.backoff.ms)


def add_parser(sub) -> None:
    """``brokkr console-consumer`` (called by ``brokkr.core.cli``)."""
    p = sub.add_parser("console-consumer", help="print the records of a topic (kafka-console-consumer.sh)")
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="the brokers to talk to")
    p.add_argument("--topic", required=True, help="the topic to read")
    p.add_argument("--group", help="the consumer group (its offsets: where to start, and committed)")
    p.add_argument("--from-beginning", action="store_true", help="without an offset to start from, the earliest")
    p.add_argument("--partition", type=int, help="only this partition (from its end unless --offset)")
    p.add_argument("--offset", help="with --partition: a non-negative offset, earliest or latest (default latest)")
    p.add_argument("--max-messages", type=int, metavar="N", help="stop after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="stop when no record came for MS milliseconds")
    p.add_argument("--isolation-level", choices=tuple(ISOLATION), help="read_committed hides aborted transactions")
    p.add_argument(
        "--property",
        "--formatter-property",
        dest="property",
        action="append",
        metavar="KEY=VALUE",
        help="print.key, print.timestamp, print.partition, print.offset, print.headers, print.value, key.separator, "
        "line.separator, headers.separator, null.literal (repeatable)",
    )
    p.add_argument("--formatter-config", metavar="FILE", help="formatter properties (--property takes precedence)")
    p.add_argument(
        "--consumer-property",
        "--command-property",
        dest="consumer_property",
        action="append",
        metavar="KEY=VALUE",
        help="a consumer setting; repeatable",
    )
    client_config.add_argument(p, "--consumer.config")
    p.add_argument("--skip-message-on-error", action="store_true", help="accepted for familiarity")
    p.set_defaults(func=console_consumer)


def console_consumer(args: argparse.Namespace) -> int:
    config = client_config.of_args(args, client_config.key_values(args.consumer_property))
    group = _group(args, config)
    reset = _offset_reset(args, config)
    formatter_settings = read_properties(args.formatter_config) if args.formatter_config else {}
    formatter = Formatter({**formatter_settings, **client_config.key_values(args.property)})
    start = _start_offset(args)
    consumer = _Consumer(args, config, group, reset, formatter)
    if threading.current_thread() is threading.main_thread():  # SIGTERM stops it as Ctrl-C does
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    timeout = config.get_int("request.timeout.ms", 30000) / 1000 + 5
    try:
        with Brokers(args.bootstrap_server, config.get("client.id", "console-consumer"), config, timeout) as brokers:
            consumer.brokers = brokers
            try:
                consumer.run(start)
            except KeyboardInterrupt:
                pass
            finally:
                consumer.close()
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    finally:
        print(f"Processed a total of {consumer.count} messages", file=sys.stderr)
    return 0


def _group(args: argparse.Namespace, config: client_config.ClientConfig) -> str | None:
    """The group id, given the same wherever it is given (Kafka's checkConsumerGroup)."""
    given = [g for g in (args.group, config.get("group.id")) if g is not None]
    if len(set(given)) > 1:
        detected = ", ".join(f"'{g}'" for g in dict.fromkeys(given))
        raise ConfigError(
            "The group ids provided in different places (directly using '--group', via '--consumer-property', or "
            f"via '--consumer.config') do not match. Detected group ids: {detected}"
        )
    if given and args.partition is not None:
        raise ConfigError("Options group and partition cannot be specified together.")
    return given[0] if given else None


def _offset_reset(args: argparse.Namespace, config: client_config.ClientConfig) -> str:
    reset = config.get("auto.offset.reset")
    if reset is not None and args.from_beginning and reset != "earliest":
        raise ConfigError(
            f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', please remove one option"
        )
    reset = reset or ("earliest" if args.from_beginning else "latest")
    if reset not in ("earliest", "latest", "none"):
        raise ConfigError(f"auto.offset.reset={reset}: expected earliest, latest or none")
    return reset


def _start_offset(args: argparse.Namespace) -> int | None:
    """Where ``--partition`` starts: an offset, EARLIEST or LATEST (None without --partition)."""
    if args.partition is None:
        if args.offset is not None:
            raise ConfigError("The partition is required when offset is specified.")
        return None
    if args.offset is not None and args.from_beginning:
        raise ConfigError("Options from-beginning and offset cannot be specified together.")
    if args.offset is None:
        return EARLIEST if args.from_beginning else LATEST
    named = {"earliest": EARLIEST, "latest": LATEST}.get(args.offset.lower())
    if named is not None:
        return named
    if not args.offset.isdigit():
        raise ConfigError(
            f"The provided offset value '{args.offset}' is incorrect. Valid values are 'earliest', 'latest', or a "
            "non-negative long."
        )
    return int(args.offset)


class Formatter:
    """Kafka's DefaultMessageFormatter."""

    def __init__(self, props: dict[str, str]):
        def flag(name: str, default: bool) -> bool:
            return props[name].strip().lower() == "true" if name in props else default

        self.fields = [
            name
            for name in ("timestamp", "partition", "offset", "epoch", "headers", "key")
            if flag(f"print.{name}", False)
        ]
        self.print_value = flag("print.value", True)
        self.key_separator = props.get("key.separator", "\t").encode()
        self.line_separator = props.get("line.separator", "\n").encode()
        self.headers_separator = props.get("headers.separator", ",").encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, record: Record, partition: int, header: BatchHeader) -> bytes:
        columns = [self._column(name, record, partition, header) for name in self.fields]
        if self.print_value:
            columns.append(self._or_null(record.value))
        return self.key_separator.join(columns) + self.line_separator if columns else b""

    def _column(self, name: str, record: Record, partition: int, header: BatchHeader) -> bytes:
        if name == "timestamp":
            kind = "LogAppendTime" if header.log_append_time else "CreateTime"
            return f"{kind}:{record.timestamp}".encode()
        if name == "partition":
            return f"Partition:{partition}".encode()
        if name == "offset":
            return f"Offset:{record.offset}".encode()
        if name == "epoch":
            return f"Epoch:{header.leader_epoch if header.leader_epoch >= 0 else 'NOT_PRESENT'}".encode()
        if name == "headers":
            if not record.headers:
                return b"NO_HEADERS"
            return self.headers_separator.join(k.encode() + b":" + self._or_null(v) for k, v in record.headers)
        return self._or_null(record.key)

    def _or_null(self, value: bytes | None) -> bytes:
        return self.null_literal if value is None else value


class _Consumer:
    def __init__(self, args: argparse.Namespace, config: client_config.ClientConfig, group, reset, formatter):
        self.topic, self.partition, self.group = args.topic, args.partition, group
        self.reset, self.formatter = reset, formatter
        self.max_messages = args.max_messages if args.max_messages is not None and args.max_messages >= 0 else None
        self.timeout = args.timeout_ms / 1000 if args.timeout_ms is not None and args.timeout_ms >= 0 else None
        isolation = args.isolation_level or config.get("isolation.level", "read_uncommitted")
        if isolation not in ISOLATION:
            raise ConfigError(f"isolation.level={isolation}: expected read_uncommitted or read_committed")
        self.isolation = ISOLATION[isolation]
        self.auto_commit = group is not None and config.get_bool("enable.auto.commit", True)
        self.commit_interval = config.get_int("auto.commit.interval.ms", 5000) / 1000
        self.max_wait_ms = config.get_int("fetch.max.wait.ms", 500)
        self.min_bytes = config.get_int("fetch.min.bytes", 1)
        self.max_bytes = config.get_int("fetch.max.bytes", 52428800)
        self.partition_max_bytes = config.get_int("max.partition.fetch.bytes", 1048576)
        self.auto_create = config.get_bool("allow.auto.create.topics", True)
        self.check_crcs = config.get_bool("check.crcs", True)
        self.rebalance_timeout_ms = config.get_int("max.poll.interval.ms", 300000)
        self.assignor = config.get("group.remote.assignor")
        self.brokers: Brokers
        self.out: BinaryIO = sys.stdout.buffer
        self.count = 0
        self.positions: dict[int, int] = {}  # partition -> the next offset to print
        self.leaders: dict[int, int] = {}
        self.topic_id: uuid.UUID | None = None
        self.member: _Member | None = None
        self.codecs: dict | None = None
        self.next_commit = 0.0
        self.committed: dict[int, int] = {}

    # -- the loop ------------------------------------------------------------------------

    def run(self, start: int | None) -> None:
        began = time.monotonic()
        while not self._refresh():  # the topic may be created meanwhile, as Kafka's consumer waits for it
            if self.timeout is not None and time.monotonic() - began >= self.timeout:
                return
            time.sleep(BACKOFF)
        if self.group is not None:
            self.member = _Member(self)
        else:
            partitions = [self.partition] if self.partition is not None else sorted(self.leaders)
            if self.partition is not None and self.partition not in self.leaders:
                raise ToolError(f"Error: partition {self.topic}-{self.partition} does not exist")
            where = {p: start if start is not None else self._reset_to() for p in partitions}
            self._start(where)
        last_record = time.monotonic()
        self.next_commit = time.monotonic() + self.commit_interval
        while self.max_messages is None or self.count < self.max_messages:
            if self.member is not None:
                self.member.poll()
            if self.auto_commit and time.monotonic() >= self.next_commit:
                self.commit(quiet=True)
            wait = self.max_wait_ms / 1000
            if self.timeout is not None:
                wait = min(wait, max(0.0, last_record + self.timeout - time.monotonic()))
            if self.member is not None:
                wait = min(wait, max(0.0, self.member.next_heartbeat - time.monotonic()))
            if self._fetch(wait):
                last_record = time.monotonic()
            elif self.timeout is not None and time.monotonic() - last_record >= self.timeout:
                return

    def close(self) -> None:
        if self.member is not None:
            try:
                if self.auto_commit:
                    self.commit(quiet=False)
                self.member.leave()
            except OSError:
                pass

    def _reset_to(self) -> int:
        if self.reset == "none":
            raise ToolError(f"Error: Undefined offset with no reset policy for partitions of topic {self.topic}")
        return EARLIEST if self.reset == "earliest" else LATEST

    def _refresh(self) -> bool:
        """Look the topic's partitions and leaders up; whether it exists."""
        [t] = self.brokers.metadata([self.topic], auto_create=self.auto_create).topics
        if t.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise ToolError(f"Error: Not authorized to access topics: [{self.topic}]")
        if t.error_code not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE):
            _check(t.error_code, None, f"looking up topic {self.topic}")
        if t.error_code or not t.partitions:
            return False
        self.leaders = {p.partition_index: p.leader_id for p in t.partitions}
        self.topic_id = t.topic_id
        return True

    def _start(self, where: dict[int, int]) -> None:
        """Start partitions at offsets, EARLIEST or LATEST (looked up with ListOffsets)."""
        self.positions.update({p: o for p, o in where.items() if o >= 0})
        todo = {p: o for p, o in where.items() if o < 0}
        while todo:
            by_leader: dict[int, dict[int, int]] = {}
            for p, stamp in todo.items():
                by_leader.setdefault(self.leaders.get(p, -1), {})[p] = stamp
            retry = {}
            for leader, parts in by_leader.items():
                found = self._list_offsets(leader, parts) if leader >= 0 else {}
                self.positions.update(found)
                retry.update({p: stamp for p, stamp in parts.items() if p not in found})
            todo = retry
            if todo:
                time.sleep(BACKOFF)
                self._refresh()

    def _list_offsets(self, leader: int, parts: dict[int, int]) -> dict[int, int]:
        spec = request_spec(LIST_OFFSETS)
        partitions = [
            spec.struct("ListOffsetsPartition")(partition_index=p, current_leader_epoch=-1, timestamp=stamp)
            for p, stamp in parts.items()
        ]
        body = spec.cls(
            replica_id=-1,
            isolation_level=self.isolation,
            topics=[spec.struct("ListOffsetsTopic")(name=self.topic, partitions=partitions)],
        )
        try:
            response = self.brokers.node(leader).request(LIST_OFFSETS, 7, body)
        except OSError:
            self.brokers.drop(leader)
            return {}
        found = {}
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == 0:
                    found[p.partition_index] = p.offset
                elif p.error_code not in STALE_METADATA:
                    _check(p.error_code, None, f"looking up the offsets of {self.topic}-{p.partition_index}")
        return found

    def _fetch(self, wait: float) -> bool:
        """One Fetch to each leader of a partition read; whether a record was printed."""
        by_leader: dict[int, list[int]] = {}
        for p in self.positions:
            by_leader.setdefault(self.leaders.get(p, -1), []).append(p)
        if not by_leader:
            time.sleep(wait)
            return False
        count = self.count
        stale = -1 in by_leader
        wait_ms = int(wait * 1000) // len(by_leader)
        for leader, partitions in by_leader.items():
            if leader < 0:
                continue
            try:
                response = self.brokers.node(leader).request(FETCH, 12, self._fetch_body(partitions, wait_ms))
            except OSError:
                self.brokers.drop(leader)
                stale = True
                continue
            _check(response.error_code, None, f"fetching from {self.topic}")
            for t in response.responses:
                for data in t.partitions:
                    if self.max_messages is not None and self.count >= self.max_messages:
                        break
                    stale |= self._partition_data(data)
            self._output(self.out.flush)
        if stale:
            time.sleep(BACKOFF)
            self._refresh()
        return self.count > count

    def _fetch_body(self, partitions: list[int], wait_ms: int) -> Any:
        spec = request_spec(FETCH)
        wanted = [
            spec.struct("FetchPartition")(
                partition=p,
                current_leader_epoch=-1,
                fetch_offset=self.positions[p],
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=self.partition_max_bytes,
            )
            for p in partitions
        ]
        return spec.cls(
            replica_id=-1,
            max_wait_ms=wait_ms,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            isolation_level=self.isolation,
            session_id=0,
            session_epoch=-1,  # no fetch session: every partition in every request
            topics=[spec.struct("FetchTopic")(topic=self.topic, partitions=wanted)],
            forgotten_topics_data=[],
            rack_id="",
        )

    def _partition_data(self, data: Any) -> bool:
        """Print a partition's fetched records; whether its leader must be looked up again."""
        p, code = data.partition_index, data.error_code
        if p not in self.positions:  # revoked meanwhile
            return False
        if code in STALE_METADATA:
            return True
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.reset == "none":
                raise ToolError(
                    f"Error: Offsets out of range with no configured reset policy for partitions: "
                    f"{{{self.topic}-{p}={self.positions[p]}}}"
                )
            del self.positions[p]
            self._start({p: self._reset_to()})
            return False
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            raise ToolError(f"Error: Not authorized to access topics: [{self.topic}]")
        _check(code, None, f"fetching {self.topic}-{p}")
        try:
            for record, header in self._records(p, data):
                if record is None:
                    self.positions[p] = header.last_offset + 1
                    continue
                self._output(self.out.write, self.formatter.format(record, p, header))
                self.positions[p] = record.offset + 1
                self.count += 1
                if self.max_messages is not None and self.count >= self.max_messages:
                    break
        except CorruptRequest as exc:
            raise ToolError(
                f"Error: the records of {self.topic}-{p} at offset {self.positions[p]} are corrupt: {exc}"
            ) from None
        return False

    def _output(self, write: Any, *data: bytes) -> None:
        try:
            write(*data)
        except BrokenPipeError:  # e.g. piped into head: stop, as Kafka's tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print("Unable to write to standard out, closing consumer.", file=sys.stderr)
            raise KeyboardInterrupt from None

    def _records(self, partition: int, data: Any) -> Iterator[tuple[Record | None, BatchHeader]]:
        """The records of a fetched partition from its position on, as Kafka's consumer
        yields them: control batches and (read_committed) aborted transactions left out.
        After each batch, (None, its header): the position moves past it."""
        buf = memoryview(data.records or b"")
        position = self.positions[partition]
        aborted = sorted((a.first_offset, a.producer_id) for a in (data.aborted_transactions or ()))
        aborted_ids: set[int] = set()
        next_aborted = 0
        for header in iter_batches_untrusted(buf):
            if header.last_offset < position:
                continue
            if self.check_crcs and not crc_ok(buf, header):
                raise ToolError(
                    f"Error: Record batch for partition {self.topic}-{partition} at offset {header.base_offset} is "
                    "invalid, cause: Record is corrupt (CRC mismatch)"
                )
            if self.isolation and header.producer_id >= 0:
                while next_aborted < len(aborted) and aborted[next_aborted][0] <= header.last_offset:
                    aborted_ids.add(aborted[next_aborted][1])
                    next_aborted += 1
                if header.is_control:
                    marker = read_end_txn_marker(buf, header)
                    if marker is not None and not marker.committed:
                        aborted_ids.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in aborted_ids:
                    yield None, header
                    continue
            if not header.is_control:
                for record in iter_records(header, self._payload(buf, header)):
                    if record.offset >= position:
                        yield record, header
            yield None, header

    def _payload(self, buf: memoryview, header: BatchHeader) -> bytes | memoryview:
        payload = buf[header.position + HEADER_SIZE : header.end]
        if not header.codec:
            return payload
        if self.codecs is None:
            from .compression import collect_codecs
            from .plugins import create_plugin_manager

            self.codecs = collect_codecs(create_plugin_manager(entry_points=False).hook, None)
        codec = self.codecs.get(header.codec)
        if codec is None:
            raise ToolError(f"Error: no codec for compression id {header.codec} (batch at {header.base_offset})")
        return codec.decompress(payload)  # a batch the broker validated and stored: no bound needed

    # -- the group's offsets -------------------------------------------------------------

    def commit(self, quiet: bool) -> None:
        """Commit the positions (what was printed) that moved since the last commit."""
        self.next_commit = time.monotonic() + self.commit_interval
        moved = {p: o for p, o in self.positions.items() if self.committed.get(p) != o}
        if moved and self.member is not None and self.member.epoch > 0:
            error = self.member.commit(moved)
            if error is None:
                self.committed.update(moved)
            elif not quiet:
                print(f"Error: committing the offsets of group {self.group} failed: {error}", file=sys.stderr)

    def assign(self, partitions: set[int]) -> None:
        """Take the partitions the coordinator assigned (KIP-848 reconciliation): commit and
        drop the ones taken away, start the new ones at the group's offsets."""
        revoked = set(self.positions) - partitions
        if revoked and self.auto_commit:
            self.commit(quiet=True)
        for p in revoked:
            del self.positions[p]
        added = partitions - set(self.positions)
        if added:
            assert self.member is not None
            committed = self.member.committed(added)
            self.committed.update(committed)
            self._start({p: committed.get(p, -1) if committed.get(p, -1) >= 0 else self._reset_to() for p in added})

    def drop_all(self) -> None:
        """Fenced: the partitions are no longer this member's (nothing is committed)."""
        self.positions.clear()
        self.committed.clear()


class _Member:
    """This consumer as a member of its group, in the consumer group protocol (KIP-848):
    ConsumerGroupHeartbeat v1 (the member id is the client's, KIP-1082), each heartbeat
    a full one (subscription and owned partitions), every interval the coordinator sets."""

    def __init__(self, consumer: _Consumer):
        self.consumer, self.brokers, self.group = consumer, consumer.brokers, consumer.group
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        self.epoch = 0
        self.coordinator: int | None = None
        self.next_heartbeat = 0.0
        versions = self._coordinator().request(
            API_VERSIONS, 3, request_spec(API_VERSIONS).cls(client_software_name="brokkr", client_software_version="0")
        )
        if not any(k.api_key == HEARTBEAT and k.max_version >= 1 for k in versions.api_keys):
            raise ToolError(
                "Error: the group coordinator does not serve the consumer group protocol (KIP-848, "
                "ConsumerGroupHeartbeat v1) that --group uses: group.coordinator.rebalance.protocols=classic,consumer"
            )

    def _coordinator(self) -> Any:
        while self.coordinator is None:
            spec = request_spec(FIND_COORDINATOR)
            found = self.brokers.bootstrap.request(FIND_COORDINATOR, 3, spec.cls(key=self.group, key_type=0))
            if found.error_code in COORDINATOR_MOVED:
                time.sleep(BACKOFF)
                continue
            _check(found.error_code, found.error_message, f"finding the coordinator of group {self.group}")
            self.brokers.addresses[found.node_id] = f"{found.host}:{found.port}"
            self.coordinator = found.node_id
        return self.brokers.node(self.coordinator)

    def _request(self, key: int, version: int, body: Any) -> Any:
        try:
            return self._coordinator().request(key, version, body)
        except OSError:
            if self.coordinator is not None:
                self.brokers.drop(self.coordinator)
            self.coordinator = None
            return None

    def poll(self) -> None:
        """Heartbeat when due; apply what the answer says."""
        if time.monotonic() < self.next_heartbeat:
            return
        spec = request_spec(HEARTBEAT)
        owned = sorted(self.consumer.positions)
        topic_id = self.consumer.topic_id
        topics = [spec.struct("TopicPartitions")(topic_id=topic_id, partitions=owned)] if owned and topic_id else []
        body = spec.cls(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout_ms=self.consumer.rebalance_timeout_ms,
            subscribed_topic_names=[self.consumer.topic],
            server_assignor=self.consumer.assignor,
            topic_partitions=topics,
        )
        answer = self._request(HEARTBEAT, 1, body)
        self.next_heartbeat = time.monotonic() + BACKOFF
        if answer is None:
            return
        if answer.error_code in COORDINATOR_MOVED:
            self.coordinator = None
            return
        if answer.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self.epoch = 0  # rejoin at once, owning nothing
            self.consumer.drop_all()
            return
        _check(answer.error_code, answer.error_message, f"heartbeating in group {self.group}")
        self.epoch = answer.member_epoch
        self.next_heartbeat = time.monotonic() + answer.heartbeat_interval_ms / 1000
        if answer.assignment is not None:
            if self.consumer.topic_id is None or any(
                t.topic_id != self.consumer.topic_id for t in answer.assignment.topic_partitions
            ):
                self.consumer._refresh()
            assigned = {
                p
                for t in answer.assignment.topic_partitions
                if t.topic_id == self.consumer.topic_id
                for p in t.partitions
            }
            if assigned != set(self.consumer.positions):
                self.consumer.assign(assigned)
                self.next_heartbeat = 0.0  # tell the coordinator at once what is owned now

    def committed(self, partitions: set[int]) -> dict[int, int]:
        """The group's committed offsets of ``partitions`` (-1: none)."""
        spec = request_spec(OFFSET_FETCH)
        topic = spec.struct("OffsetFetchRequestTopics")(name=self.consumer.topic, partition_indexes=sorted(partitions))
        body = spec.cls(
            groups=[spec.struct("OffsetFetchRequestGroup")(group_id=self.group, topics=[topic])], require_stable=True
        )
        while True:
            answer = self._request(OFFSET_FETCH, 8, body)
            if answer is None or answer.groups[0].error_code in COORDINATOR_MOVED:
                self.coordinator = None
                time.sleep(BACKOFF)
                continue
            [g] = answer.groups
            codes = {p.error_code for t in g.topics for p in t.partitions}
            if g.error_code == UNSTABLE_OFFSET_COMMIT or UNSTABLE_OFFSET_COMMIT in codes:
                time.sleep(BACKOFF)  # a transaction's offsets not yet decided
                continue
            _check(g.error_code, None, f"fetching the offsets of group {self.group}")
            return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}

    def commit(self, offsets: dict[int, int]) -> str | None:
        """Commit ``offsets``; None, or the error."""
        spec = request_spec(OFFSET_COMMIT)
        partitions = [
            spec.struct("OffsetCommitRequestPartition")(
                partition_index=p, committed_offset=o, committed_leader_epoch=-1, committed_metadata=""
            )
            for p, o in sorted(offsets.items())
        ]
        body = spec.cls(
            group_id=self.group,
            generation_id_or_member_epoch=self.epoch,
            member_id=self.member_id,
            group_instance_id=None,
            topics=[spec.struct("OffsetCommitRequestTopic")(name=self.consumer.topic, partitions=partitions)],
        )
        answer = self._request(OFFSET_COMMIT, 9, body)
        if answer is None:
            return "the coordinator could not be reached"
        codes = {p.error_code for t in answer.topics for p in t.partitions} - {0}
        if codes:
            code = codes.pop()
            return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        return None

    def leave(self) -> None:
        if self.epoch <= 0 or self.coordinator is None:
            return
        spec = request_spec(HEARTBEAT)
        self._request(HEARTBEAT, 1, spec.cls(group_id=self.group, member_id=self.member_id, member_epoch=-1))
