"""The registry's state: what the records of ``_schemas`` say, replayed in offset order.

``_schemas`` is one compacted partition in Confluent's format (JSON keys and values, as
Confluent's Schema Registry and Karapace write them):

=============================================================  ==========================================
key                                                            value
=============================================================  ==========================================
``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``     ``{"subject","version","id","schema",
                                                               "schemaType" (not for AVRO),"references",
                                                               "metadata","ruleSet","deleted"}``; null:
                                                               the version is permanently deleted
``{"keytype":"CONFIG","subject":S|null,"magic":0}``            ``{"compatibilityLevel":L,...}``; null: unset
``{"keytype":"MODE","subject":S|null,"magic":0}``              ``{"mode":M}``; null: unset
``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``         ``{"subject":S,"version":V}``: versions up to V
                                                               are soft-deleted
``{"keytype":"NOOP","magic":0}`` and other key types           ignored
=============================================================  ==========================================

Every broker holding a replica of ``_schemas`` keeps a :class:`SchemaState` replayed from
its local replica up to the high watermark (:meth:`SchemaRegistry.sync`, called before
every read, so a follower answers what is committed). The leader of ``_schemas`` is the
only writer (:meth:`SchemaRegistry.append`: through the broker's append path, awaited as
acks=-1 waits, then replayed from the log like any other record); when a broker becomes
leader it reloads the whole partition (``PartitionedCoordinator``'s load) before it
writes. Ids are assigned by the leader from the largest id replayed, so they are unique
cluster-wide; one schema (type, text, references, metadata, rule set) has one id.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any

import attrs
from brokkr.core.errors import ErrorCode
from brokkr.core.internal_topics import InternalTopic
from brokkr.core.log import OffsetOutOfRange, batch_records
from brokkr.core.protocol.records import iter_batches_untrusted

from ..coordinator_partitions import LOAD_CHUNK_BYTES, PartitionedCoordinator
from .formats import FORMATS, InvalidSchema, ParsedSchema

log = logging.getLogger("brokkr.schema_registry")

#: The name the registry is registered under on its broker's plugin manager.
PLUGIN_NAME = "brokkr.schema_registry.store"
TOPIC_SETTING = "brokkr.schema.registry.kafkastore.topic"
DEFAULT_LEVEL_SETTING = "brokkr.schema.registry.schema.compatibility.level"
#: At most this many schemas are resolved for one schema's references (transitively).
MAX_REFERENCES = 1000


def registry_of(broker) -> SchemaRegistry | None:
    """The registry of ``broker`` (None when the plugin is blocked)."""
    return broker.pm.get_plugin(PLUGIN_NAME)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


# -- records -------------------------------------------------------------------------


def schema_key(subject: str, version: int) -> bytes:
    return _json({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1})


def subject_key(keytype: str, subject: str | None) -> bytes:
    """The key of a CONFIG, MODE or DELETE_SUBJECT record (subject None: the global one)."""
    return _json({"keytype": keytype, "subject": subject, "magic": 0})


@attrs.frozen
class Reference:
    """A schema's reference to another (Confluent's ``SchemaReference``)."""

    name: str
    subject: str
    version: int

    def to_json(self) -> dict:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@attrs.frozen
class Record:
    """One decoded record of ``_schemas``."""

    keytype: str
    subject: str | None
    version: int | None
    value: dict | None


def decode_record(key: bytes | memoryview | None, value: bytes | memoryview | None) -> Record:
    k = json.loads(bytes(key)) if key is not None else {}
    if not isinstance(k, dict):
        raise ValueError("a key that is not a JSON object")
    v = json.loads(bytes(value)) if value is not None else None
    if v is not None and not isinstance(v, dict):
        raise ValueError("a value that is not a JSON object")
    version = k.get("version")
    return Record(str(k.get("keytype")), k.get("subject"), int(version) if version is not None else None, v)


# -- the state -----------------------------------------------------------------------


@attrs.frozen(eq=False)
class RegisteredSchema:
    """One schema id's schema. ``parsed()`` parses it once (references resolved against
    the registry that replayed it) and keeps the result."""

    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    metadata: dict | None = None
    rule_set: dict | None = None
    _resolve: Callable[[tuple[Reference, ...]], dict[str, str]] | None = attrs.field(default=None, repr=False)
    _parsed: list = attrs.field(factory=list, repr=False)

    @property
    def identity(self) -> tuple:
        """What makes two registrations the same schema (Confluent's MD5 of a schema)."""
        return identity(self.schema_type, self.schema, self.references, self.metadata, self.rule_set)

    def parsed(self, references: dict[str, str] | None = None) -> ParsedSchema:
        """The parsed schema (raises InvalidSchema, e.g. for a type this broker has no
        format of). Its references are resolved here unless given (``references()``:
        resolve them on the event loop to parse on another thread)."""
        if not self._parsed:
            fmt = FORMATS.get(self.schema_type)
            if fmt is None:
                raise InvalidSchema(f"Invalid schema type {self.schema_type}")
            refs = self.resolved_references() if references is None else references
            self._parsed.append(fmt.parse(self.schema, refs))
        return self._parsed[0]

    def resolved_references(self) -> dict[str, str]:
        """Reference name -> text, transitively, as the registry holds them now."""
        return self._resolve(self.references) if self._resolve is not None and self.references else {}

    def to_json(self) -> dict:
        """Its fields as the REST API and ``_schemas`` spell them (schemaType left out for AVRO)."""
        out: dict[str, Any] = {}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.to_json() for r in self.references]
        if self.metadata is not None:
            out["metadata"] = self.metadata
        if self.rule_set is not None:
            out["ruleSet"] = self.rule_set
        out["schema"] = self.schema
        return out


def identity(schema_type: str, schema: str, references, metadata, rule_set) -> tuple:
    dump = lambda v: None if v is None else json.dumps(v, sort_keys=True)  # noqa: E731
    return (schema_type, schema, tuple(references), dump(metadata), dump(rule_set))


@attrs.define
class SubjectVersion:
    subject: str
    version: int
    id: int
    deleted: bool = False


class SchemaState:
    """What the records replayed so far say."""

    def __init__(self, resolve: Callable[[tuple[Reference, ...]], dict[str, str]] | None = None):
        self._resolve = resolve
        self.subjects: dict[str, dict[int, SubjectVersion]] = {}
        self.schemas: dict[int, RegisteredSchema] = {}
        self.holders: dict[int, set[tuple[str, int]]] = {}  # id -> the subject versions that have it
        self.ids: dict[tuple, int] = {}  # identity -> id
        self.max_id = 0
        self.configs: dict[str | None, dict] = {}
        self.modes: dict[str | None, str] = {}

    def apply(self, record: Record) -> None:
        kind, subject, value = record.keytype, record.subject, record.value
        if kind == "SCHEMA":
            if subject is None or record.version is None:
                raise ValueError("a SCHEMA key without subject or version")
            if value is None:
                self._drop_version(subject, record.version)
            else:
                self._put_version(subject, record.version, value)
        elif kind == "DELETE_SUBJECT" and value is not None and subject is not None:
            upto = int(value.get("version", 0))
            for sv in self.subjects.get(subject, {}).values():
                if sv.version <= upto:
                    sv.deleted = True
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(subject, None)
            else:
                self.configs[subject] = {k: v for k, v in value.items() if k != "subject"}
        elif kind == "MODE":
            if value is None:
                self.modes.pop(subject, None)
            else:
                self.modes[subject] = str(value.get("mode"))

    def _put_version(self, subject: str, version: int, value: dict) -> None:
        schema_id = int(value["id"])
        refs = tuple(
            Reference(str(r["name"]), str(r["subject"]), int(r["version"])) for r in value.get("references") or ()
        )
        content = RegisteredSchema(
            schema_id,
            value.get("schemaType") or "AVRO",
            str(value["schema"]),
            refs,
            value.get("metadata"),
            value.get("ruleSet"),
            self._resolve,
        )
        existing = self.schemas.get(schema_id)
        if existing is not None and existing.identity != content.identity:
            log.error("_schemas: %s version %d reuses id %d for another schema; skipped", subject, version, schema_id)
            return
        self._drop_version(subject, version)  # the version's previous record (a soft delete replaces it)
        self.subjects.setdefault(subject, {})[version] = SubjectVersion(
            subject, version, schema_id, bool(value.get("deleted"))
        )
        if schema_id not in self.schemas:
            self.schemas[schema_id] = content
            self.ids.setdefault(content.identity, schema_id)
        self.holders.setdefault(schema_id, set()).add((subject, version))
        self.max_id = max(self.max_id, schema_id)

    def _drop_version(self, subject: str, version: int) -> None:
        versions = self.subjects.get(subject)
        sv = versions.pop(version, None) if versions is not None else None
        if sv is None:
            return
        if not versions:
            del self.subjects[subject]
        holders = self.holders.get(sv.id)
        if holders is not None:
            holders.discard((subject, version))
            if not holders:  # no version has it any more: the id is gone (a permanent delete)
                del self.holders[sv.id]
                content = self.schemas.pop(sv.id, None)
                if content is not None and self.ids.get(content.identity) == sv.id:
                    del self.ids[content.identity]

    # -- lookups --------------------------------------------------------------------

    def versions(self, subject: str, deleted: bool = False) -> list[SubjectVersion]:
        """The subject's versions, oldest first (soft-deleted ones too with ``deleted``)."""
        found = self.subjects.get(subject, {})
        return [found[v] for v in sorted(found) if deleted or not found[v].deleted]

    def version(self, subject: str, version: int, deleted: bool = False) -> SubjectVersion | None:
        """``version`` of the subject (-1: its latest)."""
        if version == -1:
            live = self.versions(subject, deleted)
            return live[-1] if live else None
        sv = self.subjects.get(subject, {}).get(version)
        return sv if sv is not None and (deleted or not sv.deleted) else None

    def referenced_by(self, subject: str, version: int, deleted: bool = False) -> list[SubjectVersion]:
        """The subject versions whose schema references ``subject`` ``version``."""
        found = []
        for versions in self.subjects.values():
            for sv in versions.values():
                if sv.deleted and not deleted:
                    continue
                refs = self.schemas[sv.id].references if sv.id in self.schemas else ()
                if any(r.subject == subject and r.version == version for r in refs):
                    found.append(sv)
        return found

    def resolve(self, references: Iterable[Reference]) -> dict[str, str]:
        """Reference name -> the referenced schema's text, transitively (Confluent's
        ``resolveReferences``); InvalidSchema for a reference to nothing."""
        resolved: dict[str, str] = {}
        seen: set[tuple[str, int]] = set()
        pending = list(references)
        while pending:
            ref = pending.pop()
            sv = self.version(ref.subject, ref.version, deleted=True)
            if sv is None or sv.id not in self.schemas:
                raise InvalidSchema(
                    f"Invalid reference {ref.to_json()}: subject {ref.subject} version {ref.version} not found"
                )
            if (sv.subject, sv.version) in seen:
                continue
            seen.add((sv.subject, sv.version))
            if len(seen) > MAX_REFERENCES:
                raise InvalidSchema(f"More than {MAX_REFERENCES} schemas referenced")
            content = self.schemas[sv.id]
            resolved.setdefault(ref.name, content.schema)
            pending.extend(content.references)
        return resolved


# -- the internal topic -------------------------------------------------------------


@attrs.frozen
class SchemasTopic(InternalTopic):
    """``_schemas``: always one partition, compacted (Confluent's KafkaStore creates it so)."""

    def partitions(self, config) -> int:
        return 1

    def configs(self, config, replicated: bool) -> dict[str, str]:
        return {"cleanup.policy": "compact"}


def schemas_topic(config) -> SchemasTopic:
    return SchemasTopic(
        config[TOPIC_SETTING],
        PLUGIN_NAME,
        num_partitions="",
        replication_factor="brokkr.schema.registry.kafkastore.topic.replication.factor",
        segment_bytes="",
    )


class SchemaRegistry(PartitionedCoordinator):
    """The registry of one broker: the replayed state, the leader's writes. Registered on
    the broker's plugin manager as ``brokkr.schema_registry.store`` (:func:`registry_of`)."""

    write_timeout = "brokkr.schema.registry.kafkastore.timeout.ms"

    def __init__(self, broker):
        self.internal = schemas_topic(broker.config)
        super().__init__(broker)
        self.state = SchemaState(self._resolve)
        self.applied_to = 0  # the next offset of the local replica to replay
        self._followed = None  # the partition replayed (another one: the topic was recreated)
        self._rebuild: SchemaState | None = None  # the leader's reload, while it runs
        self._rebuild_to = 0
        self.write_lock = asyncio.Lock()  # the leader's writes, one at a time
        self.executor = None  # parsing threads (started on first use)
        self.server = None  # its HTTP listeners (server.RegistryServer), where configured

    # -- what R4 (validation) and the API read ------------------------------------------

    def schema_by_id(self, schema_id: int) -> RegisteredSchema | None:
        self.sync()
        return self.state.schemas.get(schema_id)

    def subject_has_id(self, subject: str, schema_id: int) -> bool:
        self.sync()
        return any(sv.id == schema_id for sv in self.state.versions(subject))

    def latest(self, subject: str) -> RegisteredSchema | None:
        self.sync()
        sv = self.state.version(subject, -1)
        return None if sv is None else self.state.schemas.get(sv.id)

    def _resolve(self, references: tuple[Reference, ...]) -> dict[str, str]:
        return self.state.resolve(references)

    # -- replaying the local replica ---------------------------------------------------

    def local_partition(self):
        topic = self.broker.topics.get(self.topic)
        if topic is None or not topic.partitions:
            return None
        return topic.partitions[0]

    def sync(self, max_bytes: int = LOAD_CHUNK_BYTES) -> bool:
        """Replay what the local replica holds below its high watermark, at most about
        ``max_bytes`` of it; whether the state is caught up."""
        if self._rebuild is not None:  # the leader is reloading: its old state serves meanwhile
            return False
        partition = self.local_partition()
        if partition is None:
            return True
        if partition is not self._followed:
            self._followed, self.state, self.applied_to = partition, SchemaState(self._resolve), 0
        read = 0
        while self.applied_to < partition.high_watermark and read < max_bytes:
            start = max(self.applied_to, partition.log.log_start_offset)
            try:
                data = partition.log.read(start, LOAD_CHUNK_BYTES, partition.high_watermark, True)
            except OffsetOutOfRange:
                self.applied_to = partition.log.log_start_offset
                continue
            if not data:
                break
            read += len(data)
            self.applied_to = self._replay_chunk(partition, data, start, self.state)
        return self.applied_to >= partition.high_watermark

    def _replay_chunk(self, partition, data, offset: int, state: SchemaState) -> int:
        for header in iter_batches_untrusted(data):
            if header.last_offset < offset:
                continue
            offset = header.last_offset + 1
            if header.is_control or header.is_transactional:
                continue
            for record in batch_records(data, header, self.broker.codecs):
                try:
                    state.apply(decode_record(record.key, record.value))
                except Exception as exc:
                    log.warning("%s: skipping a record that does not load: %s", partition.name, exc)
        return offset

    async def caught_up(self) -> None:
        """Wait for a reload under way, then replay the local replica up to its high
        watermark (a megabyte at a time, other work running in between)."""
        await self.wait_loaded()
        while not self.sync():
            if self._rebuild is not None:
                await self.wait_loaded()
            await asyncio.sleep(0)

    # -- PartitionedCoordinator: the leader reloads the partition -------------------------

    def became_leader(self, index: int, epoch: int) -> None:
        current = self.owned.get(index)
        partition = self.local_partition()
        if partition is not None and (current is None or current[1] < epoch):
            self._rebuild, self._rebuild_to = SchemaState(self._resolve), partition.high_watermark
        super().became_leader(index, epoch)

    def decode(self, key, value) -> Record:
        return decode_record(key, value)

    def replay(self, record: Record) -> None:
        (self._rebuild if self._rebuild is not None else self.state).apply(record)

    def loaded(self, index: int) -> None:
        if self._rebuild is not None:
            self.state, self.applied_to, self._rebuild = self._rebuild, self._rebuild_to, None
            self._followed = self.local_partition()
        # What the load read past _rebuild_to is replayed again, in order: replaying a
        # suffix of the log again leaves every key where the log leaves it.
        self.sync(max_bytes=1 << 62)

    def unloaded(self, index: int) -> None:
        self._rebuild = None  # a reload cut short; the followed state stays

    # -- the leader -----------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self.check_coordinator("") == ErrorCode.NONE

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Write ``records`` as one batch (the leader only), wait as acks=-1 does, then
        replay them (and anything before them) from the log."""
        error = await self.write("", records, replay=False)
        if not error:
            self.sync(max_bytes=1 << 62)
        return error

    def stop(self) -> None:
        super().stop()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn, *args):
        """``fn(*args)`` on the registry's parsing threads (schemas can be slow to parse)."""
        if self.executor is None:
            from concurrent.futures import ThreadPoolExecutor

            self.executor = ThreadPoolExecutor(2, thread_name_prefix="brokkr-schemas")
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)
