"""Schema validation on produce (issue 36): Confluent Server's broker-side schema
validation, as a plugin of the validation stage (built-in plugin
``brokkr.plugins.schema_registry.validation``).

Topic settings, with Confluent's names (``ConfigDef.topic``: taken by CreateTopics and
AlterConfigs, shown by DescribeConfigs):

- ``confluent.key.schema.validation``, ``confluent.value.schema.validation`` (default
  false): check the records' keys, values;
- ``confluent.key.subject.name.strategy``, ``confluent.value.subject.name.strategy``: the
  subject a record's schema must be registered under. ``TopicNameStrategy`` (the default):
  ``<topic>-key`` / ``<topic>-value``; ``RecordNameStrategy``: the record's full name;
  ``TopicRecordNameStrategy``: ``<topic>-<record full name>``. Confluent's class names
  (``io.confluent.kafka.serializers.subject.TopicNameStrategy``) are taken too. The record
  name is the one Confluent's serializers use: an Avro named type's full name (a
  primitive: its type), a JSON schema's ``title``, the full name of the Protobuf message
  that the record's message indexes name.

and the broker setting ``brokkr.schema.validation.level``: ``id`` (the default: Confluent
Server's check) or ``payload`` (also decode each record against its schema, as Bufstream,
WarpStream and Tansu do).

With validation on, each key (value) of a batch must be null (a tombstone, or no key) or
carry Confluent's wire framing, magic byte 0 then a 4-byte big-endian schema id, of a
schema registered under the strategy's subject (a version not deleted); at ``payload``
level the bytes after the framing must decode against it (``formats.ParsedSchema.validate``).
A batch with any record that fails is refused whole, nothing of it stored: INVALID_RECORD
with KIP-467 record errors, one per failing record (batch index and why; Produce v8+).

Cost. Until a topic of the broker turns validation on, nothing of this plugin is on the
produce path: its validator joins the broker's plugins with the first such topic setting
it is told of (``BrokerConfig.topic_config_watchers``), and a hook with one implementation
is called directly (``HotHooks``). From then on every batch of that broker passes this
wrapper around the validation stage (a pluggy call, a few microseconds; a topic without
the settings then costs one cached lookup, ``TopicConfig.derived``). A validating topic's
batch is walked once, after the built-in validator accepted it (so the records are known
to be well formed), reading only each record's key and value (about 1 us a record); each
distinct schema id is looked up once per batch (the registry keeps its schemas in memory),
and a key or value framed like the previous one that passed needs no lookup at all. A
schema is parsed once per broker, on the registry's parsing threads (a Protobuf schema goes
through protoc), the walk waiting meanwhile (:class:`NeedsParsing`). The walk runs on the
event loop in slices of ``SLICE_S`` with the loop's other work between them, so a batch of
any size never holds the loop longer than a slice (or one record's decoding); a compressed
batch is decompressed first in a worker thread, with a codec of its own (codecs let go of
the GIL), at most ``broker.offload.workers`` at a time. Not in the broker's worker
processes: the schemas (and the Protobuf descriptors parsed from them) live in the
broker's process; nor in a worker thread: a walk in Python holds the GIL, which the loop
would then wait for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING

import attrs
from brokkr.core.compression import NONE_ID
from brokkr.core.config import ConfigDef, ConfigType, TopicConfig, one_of
from brokkr.core.errors import ErrorCode
from brokkr.core.plugins import hookimpl
from brokkr.core.protocol.primitives import decode_uvarint
from brokkr.core.protocol.records import HEADER_SIZE
from brokkr.core.record_checks import rejection_message
from brokkr.core.validation import RecordsError, ValidatedRecords

from .formats import InvalidPayload, InvalidSchema, message_indexes

if TYPE_CHECKING:
    from brokkr.core.broker import Broker
    from brokkr.core.partition import Partition

KEY_VALIDATION = "confluent.key.schema.validation"
VALUE_VALIDATION = "confluent.value.schema.validation"
KEY_STRATEGY = "confluent.key.subject.name.strategy"
VALUE_STRATEGY = "confluent.value.subject.name.strategy"
LEVEL = "brokkr.schema.validation.level"

TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME = "TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"
#: Where Confluent's serializers keep the strategies: their class names are taken as theirs.
CONFLUENT_PACKAGE = "io.confluent.kafka.serializers.subject."


def strategy_name(value: str) -> str:
    """The strategy a setting names: ``RecordNameStrategy`` from itself or from Confluent's class name."""
    return value.removeprefix(CONFLUENT_PACKAGE)


def _strategy(value: str) -> None:
    if strategy_name(value) not in (TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME):
        raise ValueError(
            f"must be one of {TOPIC_NAME}, {RECORD_NAME}, {TOPIC_RECORD_NAME} (or {CONFLUENT_PACKAGE}<name>)"
        )


CONFIGS = [
    ConfigDef(
        KEY_VALIDATION, ConfigType.BOOLEAN, False, "Check that record keys carry a registered schema id.", topic=True
    ),
    ConfigDef(
        VALUE_VALIDATION,
        ConfigType.BOOLEAN,
        False,
        "Check that record values carry a registered schema id.",
        topic=True,
    ),
    ConfigDef(
        KEY_STRATEGY,
        ConfigType.STRING,
        TOPIC_NAME,
        "The subject of record keys' schemas: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy.",
        validator=_strategy,
        topic=True,
    ),
    ConfigDef(
        VALUE_STRATEGY,
        ConfigType.STRING,
        TOPIC_NAME,
        "The subject of record values' schemas: TopicNameStrategy, RecordNameStrategy or TopicRecordNameStrategy.",
        validator=_strategy,
        topic=True,
    ),
    ConfigDef(
        LEVEL,
        ConfigType.STRING,
        "id",
        "What schema validation checks: id (a registered schema id, as Confluent Server) or payload (also decodes).",
        validator=one_of("id", "payload"),
    ),
]

#: The wire framing of Confluent's serializers: magic byte 0, then the schema id (int32, big-endian).
MAGIC, FRAMING = 0, 5
#: How long one slice of a batch's walk holds the event loop.
SLICE_S = 0.002
#: Records walked between two looks at the clock (at payload level: each is decoded).
RECORDS_PER_LOOK, PAYLOADS_PER_LOOK = 64, 4
#: The longest reason a record error quotes from a format's InvalidPayload.
MAX_REASON = 300
#: Record names, and parsed schemas, kept per broker (schema ids never change their
#: schema); emptied when full.
MAX_NAMES, MAX_PARSED = 10_000, 1000
PLUGIN_NAME = "brokkr.plugins.schema_registry.validation:validator"


@hookimpl
def brokkr_config_definitions() -> list[ConfigDef]:
    return CONFIGS


@attrs.frozen
class Side:
    """What a topic checks of one side of its records: ``field`` "key" or "value", under
    ``strategy`` (a strategy's short name)."""

    field: str
    strategy: str

    def subject(self, topic: str, record_name: str | None) -> str | None:
        """The subject the strategy names (None: a record name is needed and there is none)."""
        if self.strategy == TOPIC_NAME:
            return f"{topic}-{self.field}"
        if record_name is None:
            return None
        return record_name if self.strategy == RECORD_NAME else f"{topic}-{record_name}"


def topic_sides(config: TopicConfig) -> tuple[Side, ...]:
    """The sides a topic checks (key first; none: validation off), read once per change of
    its settings. Absent from a config made without this plugin's settings."""
    sides = config.derived.get(Side)
    if sides is None:
        sides = config.derived[Side] = tuple(
            Side(field, strategy_name(config[strategy]))
            for field, on, strategy in (
                ("key", KEY_VALIDATION, KEY_STRATEGY),
                ("value", VALUE_VALIDATION, VALUE_STRATEGY),
            )
            if config.get(on)
        )
    return sides


@hookimpl
def brokkr_broker_starting(broker: Broker) -> None:
    """Watch the topics' settings (once per broker, restarts included): the validator joins
    the broker's plugins with the first topic that turns validation on."""
    watchers = broker.config.topic_config_watchers
    if any(isinstance(getattr(w, "__self__", None), SchemaValidation) for w in watchers):
        return
    validation = SchemaValidation(broker)
    watchers.append(validation.watch)
    for topic in broker.topics.values():
        validation.watch(topic.config)


class SchemaValidation:
    """One broker's schema validation: a wrapper of the validation stage, registered as a
    plugin of that broker once a topic needs it; the record names it has worked out and the
    schemas it has had parsed."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self._record_names: dict[int, str | None] = {}
        #: schema id -> (its RegisteredSchema, what parsing it gave: a ParsedSchema or InvalidSchema)
        self._parsed: dict[int, tuple[object, object]] = {}
        self._walks: asyncio.Semaphore | None = None  # decompressed batches held at once

    def watch(self, config: TopicConfig) -> None:
        if topic_sides(config) and self.broker.pm.get_plugin(PLUGIN_NAME) is None:
            self.broker.pm.register(self, name=PLUGIN_NAME)

    @hookimpl(wrapper=True)
    def brokkr_validate_records(self, partition: Partition):
        validated = yield  # the built-in validator's answer (or another plugin's)
        sides = topic_sides(partition.config)
        if not sides:
            return validated
        if isinstance(validated, ValidatedRecords) and validated.batches[0].codec == NONE_ID:
            header = validated.batches[0]
            check = self._check(partition, sides, validated.records, header.position + HEADER_SIZE, header)
            try:
                done = check.step()
            except NeedsParsing:  # _finish parses it and walks on
                done = False
            if done:  # walked within one slice: answered at once
                check.verdict()
                return validated
            return self._finish(check, validated)
        return self._check_later(partition, sides, validated)

    def _check(self, partition: Partition, sides, buf, start: int, header) -> BatchCheck:
        from .store import registry_of

        level = self.broker.config[LEVEL]
        return BatchCheck(self, registry_of(self.broker), partition.topic.name, sides, level, buf, start, header)

    async def _finish(self, check: BatchCheck, validated: ValidatedRecords) -> ValidatedRecords:
        while True:
            try:
                if check.step():
                    break
            except NeedsParsing as need:
                await self._parse(check.registry, need.registered)
                continue
            await asyncio.sleep(0)  # the loop's other work, between two slices
        check.verdict()
        return validated

    def parsed(self, registered):
        """``registered``'s parsed schema; raises NeedsParsing the first time (parsing, e.g.
        a Protobuf schema through protoc, may take long: not on the event loop), or the
        InvalidSchema that parsing raised."""
        known = self._parsed.get(registered.id)
        if known is None or known[0] is not registered:
            raise NeedsParsing(registered)
        if isinstance(known[1], InvalidSchema):
            raise known[1]
        return known[1]

    async def _parse(self, registry, registered) -> None:
        """Parse ``registered`` on the registry's parsing threads (its references resolved here)."""
        try:
            parsed = await registry.run(registered.parsed, registered.resolved_references())
        except InvalidSchema as exc:
            parsed = exc
        if len(self._parsed) >= MAX_PARSED:
            self._parsed.clear()
        self._parsed[registered.id] = (registered, parsed)

    async def _check_later(
        self, partition: Partition, sides, pending: ValidatedRecords | Awaitable[ValidatedRecords]
    ) -> ValidatedRecords:
        validated = pending if isinstance(pending, ValidatedRecords) else await pending
        header = validated.batches[0]
        if header.codec == NONE_ID:
            check = self._check(partition, sides, validated.records, header.position + HEADER_SIZE, header)
            return await self._finish(check, validated)
        if self._walks is None:
            self._walks = asyncio.Semaphore(self.broker.offload.workers if self.broker.offload else 1)
        async with self._walks:
            section = memoryview(validated.records)[header.position + HEADER_SIZE : header.end]
            bound = self.broker.config["socket.request.max.bytes"]  # the built-in validator's bound
            codec = self.broker.codecs[header.codec]
            try:  # a codec of its own: codecs keep contexts that two threads may not share
                codec = type(codec)()
            except Exception:  # one that cannot be built so (core/offload.py skips it too): here
                records = codec.decompress(section, bound)
            else:
                records = await asyncio.to_thread(codec.decompress, section, bound)
            check = self._check(partition, sides, records, 0, header)
            return await self._finish(check, validated)

    def record_name(self, registered) -> str | None:
        """The record name of a registered Avro or JSON schema (cached: a schema id keeps its schema)."""
        names = self._record_names
        if registered.id not in names:
            if len(names) >= MAX_NAMES:
                names.clear()
            names[registered.id] = record_name(registered.schema_type, registered.schema)
        return names[registered.id]


class BatchCheck:
    """One batch's records against the registry: walked in slices (:meth:`step`), each
    record's key and value read where they lie (no object per record; a batch in a
    memoryview is copied to bytes once), each distinct schema id of a side judged once
    (:meth:`_judge`)."""

    def __init__(self, validation, registry, topic: str, sides, level: str, buf, start: int, header):
        self.validation, self.registry, self.topic = validation, registry, topic
        self.key = next((s for s in sides if s.field == "key"), None)
        self.value = next((s for s in sides if s.field == "value"), None)
        self.payload = level == "payload"
        self.buf = bytes(buf) if isinstance(buf, memoryview) else buf  # indexed faster, and has startswith
        self.pos, self.index, self.count = start, 0, header.record_count
        self.errors: dict[int, str] = {}  # batch index -> why (the first failing side)
        self._judged: dict[tuple, tuple[str | None, object]] = {}
        #: Per field, the framing (magic byte and schema id) of the last key or value that
        #: passed on its id alone (id level, not a Protobuf record under a record name).
        self.passed: dict[str, bytes | None] = {"key": None, "value": None}

    def step(self) -> bool:
        """Walk the records for a slice of time (``SLICE_S``); True once all are walked."""
        deadline = time.perf_counter() + SLICE_S
        while self.index < self.count:
            self._walk(min(self.count, self.index + (PAYLOADS_PER_LOOK if self.payload else RECORDS_PER_LOOK)))
            if time.perf_counter() > deadline:
                break
        return self.index >= self.count

    def verdict(self) -> None:
        """Raise RecordsError (INVALID_RECORD, KIP-467 record errors) if any record failed."""
        if self.errors:
            record_errors = sorted(self.errors.items())
            raise RecordsError(ErrorCode.INVALID_RECORD, rejection_message(record_errors), record_errors)

    def _walk(self, stop: int) -> None:
        """Records ``index`` to ``stop``: each one's fields skipped to its key and value
        (the built-in validator has walked them already: they are well formed). A key or
        value framed like the last one that passed on its id alone passes at a glance. On
        NeedsParsing the walk stops at the start of the record that needs it."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        key, value, key_ok, value_ok = self.key, self.value, self.passed["key"], self.passed["value"]
        index = start = 0
        try:
            for index in range(self.index, stop):
                start = pos
                b = buf[pos]
                length, pos = _zigzag(buf, pos, end) if b & 0x80 else (b >> 1, pos + 1)
                after = pos + length
                pos += 1  # the attributes
                while buf[pos] & 0x80:  # the timestamp delta
                    pos += 1
                pos += 1
                while buf[pos] & 0x80:  # the offset delta
                    pos += 1
                b = buf[pos + 1]
                size, pos = _zigzag(buf, pos + 1, end) if b & 0x80 else ((b >> 1) ^ -(b & 1), pos + 2)
                if size >= 0:
                    if key is not None and not (size >= FRAMING and key_ok and buf.startswith(key_ok, pos)):
                        self._field(index, key, pos, size)
                        key_ok = self.passed["key"]
                    pos += size
                if value is not None:
                    b = buf[pos]
                    size, pos = _zigzag(buf, pos, end) if b & 0x80 else ((b >> 1) ^ -(b & 1), pos + 1)
                    if size >= 0 and not (size >= FRAMING and value_ok and buf.startswith(value_ok, pos)):
                        self._field(index, value, pos, size)
                        value_ok = self.passed["value"]
                pos = after
        except NeedsParsing:
            self.pos, self.index = start, index
            raise
        self.pos, self.index = pos, stop

    def _field(self, index: int, side: Side, at: int, size: int) -> None:
        """One record's (non-null) key or value, ``size`` bytes at ``at``."""
        buf = self.buf
        if size < FRAMING or buf[at] != MAGIC:
            if index not in self.errors:
                self.errors[index] = _unframed(side, buf[at] if size else None, size)
            return
        schema_id = int.from_bytes(buf[at + 1 : at + FRAMING], "big")
        judged = self._judged.get((side.field, schema_id))
        if judged is None:
            judged = self._judged[(side.field, schema_id)] = self._judge(side, schema_id)
        if judged is BY_MESSAGE:
            judged = self._judge_message(side, schema_id, memoryview(buf)[at + FRAMING : at + size])
        elif judged == (None, None):
            self.passed[side.field] = bytes(buf[at : at + FRAMING])
        error, parsed = judged
        if error is None and parsed is not None:  # payload level
            try:
                parsed.validate(memoryview(buf)[at + FRAMING : at + size])
            except InvalidPayload as exc:
                error = f"The {side.field} does not decode against schema id {schema_id}: {str(exc)[:MAX_REASON]}"
        if error is not None and index not in self.errors:
            self.errors[index] = error

    def _judge(self, side: Side, schema_id: int):
        """What a record framed with this id gets: (why it fails, or None; the schema to
        decode it with at payload level, else None), or BY_MESSAGE: a Protobuf schema under
        a record name strategy, whose subject is the message the record's payload names."""
        registered = self.registry.schema_by_id(schema_id) if self.registry is not None else None
        if registered is None:
            return f"The {side.field} has schema id {schema_id}, which is not registered", None
        if side.strategy == TOPIC_NAME:
            return self._under(side, registered, side.subject(self.topic, None))
        if registered.schema_type == "PROTOBUF":
            return BY_MESSAGE
        return self._under(side, registered, side.subject(self.topic, self.validation.record_name(registered)))

    def _judge_message(self, side: Side, schema_id: int, payload: memoryview) -> tuple[str | None, object]:
        """:meth:`_judge` for a Protobuf record under a record name strategy: its message
        indexes (Confluent's, before the message) name the message, and so the subject."""
        try:
            indexes, _ = message_indexes(bytes(payload))
        except InvalidPayload as exc:
            return f"The {side.field} does not decode against schema id {schema_id}: {exc}", None
        judged = self._judged.get((side.field, schema_id, indexes))
        if judged is None:
            registered = self.registry.schema_by_id(schema_id)
            try:
                name = message_name(self.validation.parsed(registered).file, indexes)
            except InvalidSchema as exc:
                return _unreadable(side, schema_id, exc), None
            if name is None:
                judged = f"The {side.field} has schema id {schema_id}, which has no message {list(indexes)}", None
            else:
                judged = self._under(side, registered, side.subject(self.topic, name))
            self._judged[(side.field, schema_id, indexes)] = judged
        return judged

    def _under(self, side: Side, registered, subject: str | None) -> tuple[str | None, object]:
        """Records framed with ``registered``'s id must find it under ``subject``."""
        if subject is None:
            return f"The {side.field} has schema id {registered.id}, which has no record name for {side.strategy}", None
        if not self.registry.subject_has_id(subject, registered.id):
            return (
                f"The {side.field} has schema id {registered.id}, which is not registered under subject {subject}",
                None,
            )
        if not self.payload:
            return None, None
        try:
            return None, self.validation.parsed(registered)
        except InvalidSchema as exc:  # e.g. a schema type this broker has no format of
            return _unreadable(side, registered.id, exc), None


#: What :meth:`BatchCheck._judge` answers for a Protobuf schema under a record name strategy.
BY_MESSAGE = object()


class NeedsParsing(Exception):
    """A schema the walk needs parsed, which it has not been yet: parsed off the event loop
    (:meth:`SchemaValidation._parse`), then the walk goes on from the record that needed it."""

    def __init__(self, registered):
        super().__init__(registered.id)
        self.registered = registered


def _unreadable(side: Side, schema_id: int, exc: Exception) -> str:
    return f"The {side.field} has schema id {schema_id}, which cannot be read: {str(exc)[:MAX_REASON]}"


def _zigzag(buf, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint of two or more bytes at ``pos`` (the walk reads one-byte ones itself)."""
    b = buf[pos + 1]
    if b < 0x80:
        value, pos = (buf[pos] & 0x7F) | (b << 7), pos + 2
    else:
        value, pos = decode_uvarint(buf, pos, end, 5)
    return (value >> 1) ^ -(value & 1), pos


def _unframed(side: Side, first: int | None, size: int) -> str:
    if size < FRAMING:
        return f"The {side.field} is {size} bytes, too short for the magic byte and a schema id"
    return f"The {side.field} does not start with the magic byte {MAGIC} (it starts with {first})"


# -- record names, as Confluent's serializers name a schema ---------------------------------


def record_name(schema_type: str, schema: str) -> str | None:
    """An Avro or JSON schema's record name, as RecordNameStrategy names its subject: an Avro
    named type's full name (a primitive: its type name; a union: "union"), a JSON schema's
    ``title`` (a Protobuf record's is its message's: :func:`message_name`). None where there is none."""
    try:
        parsed = json.loads(schema)
    except ValueError:
        return None
    if schema_type == "JSON":
        title = parsed.get("title") if isinstance(parsed, dict) else None
        return title if isinstance(title, str) else None
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, list):
        return "union"
    if not isinstance(parsed, dict):
        return None
    if parsed.get("type") in ("record", "enum", "fixed", "error") and isinstance(parsed.get("name"), str):
        name, namespace = parsed["name"], parsed.get("namespace")
        return name if "." in name or not namespace else f"{namespace}.{name}"
    kind = parsed.get("type")
    return kind if isinstance(kind, str) else None


def message_name(file, indexes: tuple[int, ...]) -> str | None:
    """The full name of the message that Confluent's message ``indexes`` name in a Protobuf
    file (a ``FileDescriptorProto``): the index of a top-level message, then of a message
    nested in it, and so on. None when there is no such message."""
    messages, name = file.message_type, file.package
    for index in indexes:
        if index >= len(messages):
            return None
        name = f"{name}.{messages[index].name}" if name else messages[index].name
        messages = messages[index].nested_type
    return name
