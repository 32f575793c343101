"""``brokkr console-producer``: Kafka's kafka-console-producer.sh, with its options and
reader properties, on brokkr's own raw client (no Kafka client library needed).

Each line of standard input is one record's value. Kafka's LineMessageReader properties
(``--property``, or ``--reader-property`` as Kafka 4.1 names it) read keys and headers
from the line: with ``parse.key=true`` it is ``key<key.separator>value``; with
``parse.headers=true`` the headers come first, ``h1:v1,h2:v2<headers.delimiter>...``
(``headers.separator``, a regular expression, and ``headers.key.separator``). The
defaults are Kafka's: ``key.separator`` and ``headers.delimiter`` a tab,
``headers.separator`` ``,``, ``headers.key.separator`` ``:``; ``null.marker`` reads as a
null key, value or header value; ``ignore.error=true`` reads a line without a separator
as a value instead of stopping.

Records are produced in batches, one per partition (Produce v9, ``acks`` -1 unless
``--request-required-acks``), keyed records to the partition Kafka's default partitioner
picks (murmur2 of the key), the others to one partition per batch (its sticky
partitioner). A batch is sent when it reaches ``batch.size``, when its first record has
waited ``linger.ms`` (``--timeout``, 1000 ms), and at the end of input. A partition
without a leader, or one the broker did not write to (NOT_LEADER_OR_FOLLOWER, ...), is
retried after a metadata refresh (``retries``, ``retry.backoff.ms``); a request that may
have been written is not resent (no duplicates), its records are reported. Each failed
record is reported as Kafka's producer reports it, and the exit status is then 1.

Producer settings (``acks``, ``batch.size``, ``linger.ms``, ``compression.type``,
``max.request.size``, ..., and the security ones of :mod:`.client_config`) come from
``--producer.config`` (``--command-config`` since Kafka 4.1), then ``--producer-property``
(``--command-property``), then the options that set them.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import select
import sys
import time
from typing import Any

from . import client_config
from .client import Brokers
from .compression import COMPRESSION_TYPE_IDS, collect_codecs
from .config import read_properties
from .errors import ConfigError, ErrorCode
from .protocol.frames import request_spec
from .protocol.records import HEADER_SIZE, encode_batch, encode_record
from .tools import ToolError, _check

PRODUCE = 0
#: Errors that say the broker wrote nothing: the batch may be sent again.
RETRIABLE = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.NOT_ENOUGH_REPLICAS,
}
#: Command-line options that set a producer setting when given (Kafka's maybeMergeOptions),
#: with the console producer's defaults.
OPTIONS = {
    "request_required_acks": ("acks", "-1"),
    "request_timeout_ms": ("request.timeout.ms", "1500"),
    "batch_size": ("batch.size", "16384"),
    "timeout": ("linger.ms", "1000"),
    "max_block_ms": ("max.block.ms", "60000"),
    "message_send_max_retries": ("retries", "3"),
    "retry_backoff_ms": ("retry.backoff.ms", "100"),
    "compression_codec": ("compression.type", "none"),
}
READ_SIZE = 64 * 1024
IN_BATCH = "Failed to append record because it was part of a batch which had one more more invalid records"


def add_parser(sub) -> None:
    """``brokkr console-producer`` (called by ``brokkr.core.cli``)."""
    p = sub.add_parser(
        "console-producer", help="produce the lines of standard input to a topic (kafka-console-producer.sh)"
    )
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]", help="the brokers to talk to")
    p.add_argument("--topic", required=True, help="the topic to produce to")
    p.add_argument(
        "--property",
        "--reader-property",
        dest="property",
        action="append",
        metavar="KEY=VALUE",
        help="how lines are read: parse.key, key.separator, parse.headers, headers.delimiter, headers.separator, "
        "headers.key.separator, null.marker, ignore.error (repeatable)",
    )
    p.add_argument("--reader-config", metavar="FILE", help="reader properties (--property takes precedence)")
    p.add_argument(
        "--producer-property",
        "--command-property",
        dest="producer_property",
        action="append",
        metavar="KEY=VALUE",
        help="a producer setting; repeatable",
    )
    client_config.add_argument(p, "--producer.config")
    p.add_argument("--request-required-acks", metavar="ACKS", help="acks: -1 or all (default), 1, 0")
    p.add_argument("--request-timeout-ms", type=int, metavar="MS", help="the brokers' time to answer (default 1500)")
    p.add_argument(
        "--compression-codec", nargs="?", const="gzip", help="none (default), gzip (without a value), snappy, lz4, zstd"
    )
    p.add_argument("--batch-size", type=int, metavar="BYTES", help="batch.size (default 16384)")
    p.add_argument("--timeout", type=int, metavar="MS", help="linger.ms: the longest a record waits (default 1000)")
    p.add_argument("--sync", action="store_true", help="send each record on its own and wait for its answer")
    p.add_argument("--max-block-ms", type=int, metavar="MS", help="how long to wait for the topic (default 60000)")
    p.add_argument("--message-send-max-retries", type=int, metavar="N", help="retries (default 3)")
    p.add_argument("--retry-backoff-ms", type=int, metavar="MS", help="wait before a retry (default 100)")
    p.set_defaults(func=console_producer)


def console_producer(args: argparse.Namespace) -> int:
    given = {name: str(getattr(args, dest)) for dest, (name, _) in OPTIONS.items() if getattr(args, dest) is not None}
    config = client_config.of_args(args, {**client_config.key_values(args.producer_property), **given})
    reader_settings = read_properties(args.reader_config) if args.reader_config else {}
    reader = LineReader({**reader_settings, **client_config.key_values(args.property)})
    producer = _Producer(config, args.topic, args.sync)
    failed = 0
    with Brokers(
        args.bootstrap_server, config.get("client.id", "console-producer"), config, producer.socket_timeout
    ) as brokers:
        producer.brokers = brokers
        try:
            failed = producer.run(_Input(sys.stdin.fileno(), producer.max_request_size), reader)
        except ToolError as exc:
            failed = producer.flush() + 1
            print(exc, file=sys.stderr)
        except KeyboardInterrupt:  # Kafka's shutdown hook closes the producer: what was read is sent
            failed = producer.flush()
    return 1 if failed else 0


class LineReader:
    """Kafka's LineMessageReader: a line into (key, value, headers)."""

    def __init__(self, props: dict[str, str]):
        def flag(name: str) -> bool:
            return props.get(name, "false").strip().lower() == "true"

        self.parse_key, self.parse_headers = flag("parse.key"), flag("parse.headers")
        self.ignore_error = flag("ignore.error")
        self.key_separator = props.get("key.separator", "\t")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.null_marker = props.get("null.marker")
        pairs = [
            ("headers.delimiter", self.headers_delimiter, "headers.separator", self.headers_separator),
            ("headers.delimiter", self.headers_delimiter, "headers.key.separator", self.headers_key_separator),
            ("headers.separator", self.headers_separator, "headers.key.separator", self.headers_key_separator),
            ("null.marker", self.null_marker, "key.separator", self.key_separator),
            ("null.marker", self.null_marker, "headers.separator", self.headers_separator),
            ("null.marker", self.null_marker, "headers.delimiter", self.headers_delimiter),
            ("null.marker", self.null_marker, "headers.key.separator", self.headers_key_separator),
        ]
        for a, a_value, b, b_value in pairs:
            if a_value == b_value:
                raise ConfigError(f"{a} and {b} may not be equal")
        try:
            self._headers_pattern = re.compile(self.headers_separator)
        except re.error as exc:
            raise ConfigError(f"headers.separator {self.headers_separator!r}: {exc}") from None

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers = self._part(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number)
        at = 0 if headers is None else len(headers) + len(self.headers_delimiter)
        key = self._part(self.parse_key, line, at, self.key_separator, "key separator", number)
        value = line[at + (0 if key is None else len(key) + len(self.key_separator)) :]
        parsed = [] if headers is None or headers == self.null_marker else self._headers(headers, number)
        return self._bytes(key), self._bytes(value), parsed

    def _part(self, enabled: bool, line: str, start: int, separator: str, name: str, number: int) -> str | None:
        if not enabled:
            return None
        index = line.find(separator, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise ToolError(f"No {name} found on line number {number}: '{line}'")
        return line[start:index]

    def _headers(self, text: str, number: int) -> list[tuple[str, bytes | None]]:
        parts = self._headers_pattern.split(text)
        while len(parts) > 1 and parts[-1] == "":  # Java's String.split drops trailing empty strings
            parts.pop()
        out = []
        for pair in parts:
            key, sep, value = pair.partition(self.headers_key_separator)
            if not sep:
                if self.ignore_error:
                    out.append((pair, None))
                    continue
                raise ToolError(f"No header key separator found in pair '{pair}' on line number {number}")
            if key == self.null_marker:
                raise ToolError(
                    f"Header keys should not be equal to the null marker '{self.null_marker}' as they can't be null"
                )
            out.append((key, self._bytes(value)))
        return out

    def _bytes(self, text: str | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text.encode()


class _Input:
    """Standard input's lines, read as they come (so a pause can send what waits): each
    ``next_line(timeout)`` returns a line (its terminator dropped), TIMEOUT, EOF, or the
    length of a line over ``limit`` bytes, which is read past rather than held."""

    TIMEOUT, EOF = object(), object()

    def __init__(self, fd: int, limit: int):
        self.fd, self.limit = fd, limit
        self.buf = bytearray()
        self.dropping = -1  # bytes of an over-long line read so far, while reading past it
        self.eof = False
        self.prompt = os.isatty(fd) and sys.stdout.isatty()  # Kafka prompts on a console

    def next_line(self, timeout: float | None) -> Any:
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[: end + 1]
                if self.dropping >= 0:
                    length, self.dropping = self.dropping + end, -1
                    return length
                return line.removesuffix(b"\r")
            if self.dropping >= 0 or len(self.buf) > self.limit:
                self.dropping = max(self.dropping, 0) + len(self.buf)
                self.buf.clear()
            if self.eof:
                if self.dropping >= 0:
                    length, self.dropping = self.dropping, -1
                    return length
                if self.buf:
                    line = bytes(self.buf)
                    self.buf.clear()
                    return line.removesuffix(b"\r")
                return self.EOF
            if self.prompt and not self.buf:
                print(">", end="", flush=True)
            if not select.select([self.fd], [], [], timeout)[0]:
                return self.TIMEOUT
            chunk = os.read(self.fd, READ_SIZE)
            self.eof = not chunk
            self.buf += chunk


class _Producer:
    def __init__(self, config: client_config.ClientConfig, topic: str, sync: bool):
        self.topic, self.sync = topic, sync
        acks = config.get("acks", "-1").strip().lower()
        self.acks = -1 if acks == "all" else int(acks) if acks in ("-1", "0", "1") else None
        if self.acks is None:
            raise ConfigError(f"acks={acks}: expected all, -1, 0 or 1")
        self.timeout_ms = config.get_int("request.timeout.ms", 1500)
        self.socket_timeout = max(self.timeout_ms / 1000 + 5, 30.0)
        self.batch_size = config.get_int("batch.size", 16384)
        self.linger = config.get_int("linger.ms", 1000) / 1000
        self.max_block = config.get_int("max.block.ms", 60000)
        self.retries = config.get_int("retries", 3)
        self.backoff = config.get_int("retry.backoff.ms", 100) / 1000
        self.max_request_size = config.get_int("max.request.size", 1048576)
        self.max_age = config.get_int("metadata.max.age.ms", 300000) / 1000
        self.codec = _codec(config.get("compression.type", "none"))
        self.brokers: Brokers
        self.leaders: dict[int, int] = {}
        self.refreshed = 0.0
        self.pending: dict[int, list[tuple[bytes | None, bytes | None, list]]] = {}
        self.pending_bytes: dict[int, int] = {}
        self.first_pending = 0.0
        self.sticky: int | None = None
        self.failed = 0

    def run(self, stdin: _Input, reader: LineReader) -> int:
        number = 0
        while True:
            wait = None if not self.pending else max(0.0, self.first_pending + self.linger - time.monotonic())
            line = stdin.next_line(wait)
            if line is stdin.TIMEOUT:
                self.flush()
                continue
            if line is stdin.EOF:
                break
            number += 1
            if isinstance(line, int):
                self._failed(None, line, "RECORD_TOO_LARGE", self._too_large(line))
                continue
            self.add(*reader.parse(line.decode("utf-8", "replace"), number))
        return self.flush()

    def _too_large(self, size: int) -> str:
        return (
            f"The message is {size} bytes when serialized which is larger than {self.max_request_size}, which is "
            "the value of the max.request.size configuration."
        )

    def add(self, key: bytes | None, value: bytes | None, headers: list) -> None:
        size = HEADER_SIZE + len(encode_record(0, 0, key, value, headers))
        if size > self.max_request_size:
            self._failed(key, len(value or b""), "RECORD_TOO_LARGE", self._too_large(size))
            return
        if not self.leaders or time.monotonic() - self.refreshed > self.max_age:
            self.refresh()
        partition = self._partition(key)
        if self.pending.get(partition) and self.pending_bytes[partition] + size > self.batch_size:
            self.flush()
        if not self.pending:
            self.first_pending = time.monotonic()
        self.pending.setdefault(partition, []).append((key, value, headers))
        self.pending_bytes[partition] = self.pending_bytes.get(partition, 0) + size
        if self.sync or self.pending_bytes[partition] >= self.batch_size:
            self.flush()

    def _partition(self, key: bytes | None) -> int:
        count = len(self.leaders)
        if key is not None:  # Kafka's BuiltInPartitioner.partitionForKey
            return (murmur2(key) & 0x7FFFFFFF) % count
        if self.sticky is None or self.sticky >= count:
            available = [p for p, leader in self.leaders.items() if leader >= 0]
            self.sticky = random.choice(available or list(self.leaders))
        return self.sticky

    def refresh(self) -> None:
        """The topic's partitions and leaders (the topic created where the broker creates
        topics on first use), waiting up to max.block.ms for it."""
        deadline = time.monotonic() + self.max_block / 1000
        while True:
            [t] = self.brokers.metadata([self.topic], auto_create=True).topics
            if t.error_code == 0 and t.partitions:
                self.leaders = {p.partition_index: p.leader_id for p in t.partitions}
                self.refreshed = time.monotonic()
                return
            if t.error_code not in (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE):
                _check(t.error_code, None, f"looking up topic {self.topic}")
            if time.monotonic() >= deadline:
                raise ToolError(f"Error: Topic {self.topic} not present in metadata after {self.max_block} ms.")
            time.sleep(self.backoff)

    def flush(self) -> int:
        """Send every pending batch; the count of records that failed so far."""
        todo, self.pending, self.pending_bytes, self.sticky = self.pending, {}, {}, None
        for attempt in range(self.retries + 1):
            if not todo:
                break
            if attempt:
                time.sleep(self.backoff)
                self.refresh()
            todo = self._send(todo, last=attempt == self.retries)
        return self.failed

    def _send(self, batches: dict[int, list], last: bool) -> dict[int, list]:
        """One Produce per leader; the batches to send again."""
        by_leader: dict[int, dict[int, list]] = {}
        for partition, records in batches.items():
            by_leader.setdefault(self.leaders.get(partition, -1), {})[partition] = records
        again = {}
        for leader, parts in by_leader.items():
            if leader < 0 or leader not in self.brokers.addresses:
                errors = {p: (ErrorCode.LEADER_NOT_AVAILABLE, None, []) for p in parts}
            else:
                errors = self._produce(leader, parts)
            for partition, (code, message, record_errors) in errors.items():
                if code in RETRIABLE and not last:
                    again[partition] = parts[partition]
                elif code:
                    self._report(parts[partition], code, message, record_errors)
        return again

    def _produce(self, leader: int, parts: dict[int, list]) -> dict[int, tuple[int | str, str | None, list]]:
        """Each partition's error code (or the name of a client-side error), message and record errors."""
        spec = request_spec(PRODUCE)
        now = int(time.time() * 1000)
        data = [
            spec.struct("PartitionProduceData")(index=p, records=self._batch(records, now))
            for p, records in parts.items()
        ]
        body = spec.cls(
            transactional_id=None,
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            topic_data=[spec.struct("TopicProduceData")(name=self.topic, partition_data=data)],
        )
        client = self.brokers.node(leader)
        try:
            if self.acks == 0:  # no answer comes
                client.send(PRODUCE, 9, body)
                return {}
            response = client.request(PRODUCE, 9, body)
        except OSError as exc:  # written or not: not sent again
            self.brokers.drop(leader)
            return {p: ("NETWORK_EXCEPTION", str(exc), []) for p in parts}
        return {
            p.index: (p.error_code, p.error_message, p.record_errors or [])
            for t in response.responses
            for p in t.partition_responses
        }

    def _batch(self, records: list, now: int) -> bytes:
        section = b"".join(encode_record(i, 0, k, v, h) for i, (k, v, h) in enumerate(records))
        codec_id = 0
        if self.codec is not None:
            section, codec_id = self.codec.compress(section), self.codec.id
        return bytes(
            encode_batch(section, record_count=len(records), attributes=codec_id, base_timestamp=now, max_timestamp=now)
        )

    def _report(self, records: list, code: int | str, message: str | None, record_errors: list) -> None:
        if isinstance(code, str):
            name = code
        else:
            name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        at_fault = {e.batch_index: e.batch_index_error_message for e in record_errors}
        for i, (key, value, _) in enumerate(records):
            text = message or ""
            if record_errors:  # KIP-467: the records at fault, and the others of their batch
                text = (at_fault[i] or message or "") if i in at_fault else IN_BATCH
            self._failed(key, len(value) if value is not None else None, name, text)

    def _failed(self, key: bytes | None, value_size: int | None, name: str, message: str) -> None:
        self.failed += 1
        key_text = "null" if key is None else f"{len(key)} bytes"
        value_text = "null" if value_size is None else f"{value_size} bytes"
        print(
            f"Error when sending message to topic {self.topic} with key: {key_text}, value: {value_text} with error: "
            f"{name}{': ' + message if message else ''}",
            file=sys.stderr,
        )


def _codec(name: str):
    """The codec of ``compression.type`` (None for none), from the built-in codec plugins."""
    name = name.strip().lower()
    if name == "none":
        return None
    if name not in COMPRESSION_TYPE_IDS or name == "uncompressed":
        raise ConfigError(f"compression.type={name}: expected none, gzip, snappy, lz4 or zstd")
    from .plugins import create_plugin_manager

    codec = collect_codecs(create_plugin_manager(entry_points=False).hook, None).get(COMPRESSION_TYPE_IDS[name])
    if codec is None:
        raise ConfigError(f"compression.type={name}: no codec plugin provides it here")
    return codec


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (MurmurHash2, seed 0x9747b28c), as an unsigned 32-bit value."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h
