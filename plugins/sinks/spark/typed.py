"""Typed rows for lake tables (issue 37, "Typed rows"): a record's value, decoded with its
schema from the schema registry, as a row of Arrow columns.

:class:`ValueTyper` is what a table writer holds per topic (it is picklable, and Spark ships
it to the executors); it fetches schemas over the registry's REST API (Confluent's, which
brokkr serves), parses them with brokkr's own formats (``plugins/schema_registry``) and
decodes values. A value that cannot become a row gets a dead-letter reason, never an
exception (an id the registry answers 40403 for is such a value); a registry that cannot be
reached, refuses the credentials or answers anything else unexpected raises
:class:`RegistryUnavailable` (the task fails and is retried rather than sending good
records to the dead-letter table). HTTP basic credentials go in the URL
(``http://user:password@host:port``, percent-encoded).

:func:`evolve` merges a table's schema with a new schema's columns as Iceberg and Delta
can evolve a table (new columns appended as nullable, int/float/decimal widened, structs,
list items and map values merged); anything else raises :class:`IncompatibleSchema`.

Modes, with Redpanda's names:

- ``value_schema_id_prefix``: each value is framed as Confluent's serializers frame it
  (magic byte 0, a 4-byte schema id, for Protobuf the message indexes) and decoded with
  the schema of its id.
- ``value_schema_latest``: each value is the bare serialized datum (no framing, as
  Redpanda expects in this mode), decoded with the latest schema of the subject
  (``<topic>-value`` by default), looked up again every ``LATEST_TTL_S`` seconds.

Types (:meth:`ValueTyper.arrow_schema`): a record/message/object becomes the table's
columns (any other root one column ``value``); nested ones structs. Nullable is what may be
absent: Avro unions with null, JSON properties not required (or allowing null), Protobuf
fields with presence (messages, ``optional``, oneof members). Choices:

- Avro: int/long/float/double/boolean/string/bytes as themselves, enum -> string,
  fixed -> binary, array -> list, map -> map<string, ...>, record -> struct; logical types
  date -> date32, time-millis/micros -> time64[us], timestamp-millis/micros ->
  timestamp[us, UTC], local-timestamp-millis/micros -> timestamp[us], decimal ->
  decimal128 (38 digits at most), uuid -> string; others (duration, timestamp-nanos) as
  their underlying type. A union of null and one type is that type, nullable; a union of
  several types a struct of nullable fields ``member0``, ``member1``, ... (Spark's
  from_avro names), one per non-null branch, the one the datum holds set. A ``null``
  field is left out.
- JSON Schema: integer -> int64, number -> float64, boolean, string (format date-time ->
  timestamp[us, UTC], date -> date32), object with properties -> struct (only the declared
  properties: additionalProperties are not columns), object without properties but with an
  additionalProperties schema -> map<string, ...>, array -> list, ``$ref`` followed, a type
  or anyOf/oneOf of one type and null -> nullable; a subschema that is not one type
  (untyped, other combinations, tuples, objects without properties) -> a string column
  holding that part's JSON text.
- Protobuf: the table's message is the schema's first (Redpanda's default) or the one
  named by ``protobuf_name``; int32/sint32/sfixed32 -> int32, int64/sint64/sfixed64 ->
  int64, uint32/fixed32 -> int64, uint64/fixed64 -> decimal128(20, 0), float, double,
  bool, string, bytes -> binary, enum -> string (its name; an unknown number as digits),
  message -> struct, repeated -> list, map -> map, google.protobuf.Timestamp ->
  timestamp[us, UTC]. A framed record whose message indexes name another message is
  dead-lettered.

Refused for a table (:class:`IncompatibleSchema`; each record of such a schema
dead-lettered with the reason): recursive types, nesting deeper than ``MAX_DEPTH``,
decimals wider than 38 digits, records without columns, arrays of items that hold no data.

Bounds: at most ``MAX_CACHED`` schemas kept (the least recently used dropped), every HTTP
request bounded by ``TIMEOUT_S`` and ``MAX_RESPONSE_BYTES``, at most ``MAX_REFERENCES``
referenced schemas per schema; the decoders' work is bounded by the payload (the formats'
nesting limits, recursive schemas refused).
"""

from __future__ import annotations

import base64
import collections
import datetime
import decimal
import io
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from brokkr.core.errors import ConfigError
from brokkr.plugins.schema_registry import jsontext
from brokkr.plugins.schema_registry.formats import FORMATS, InvalidPayload, InvalidSchema, message_indexes
from brokkr.plugins.schema_registry.validation import FRAMING, MAGIC, message_name

__all__ = ["DLQ_SCHEMA", "IncompatibleSchema", "MODES", "RegistryUnavailable", "ValueTyper", "evolve"]

MODES = ("value_schema_id_prefix", "value_schema_latest")
#: Schemas (by id) kept by one ValueTyper; the least recently used is dropped beyond.
MAX_CACHED = 256
#: Wall-clock bound of one request to the registry, and the largest answer read.
TIMEOUT_S = 10.0
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
#: Referenced schemas (transitively) one schema may need.
MAX_REFERENCES = 100
#: How long the subject's latest schema is used before it is looked up again
#: (Redpanda's iceberg_latest_schema_cache_ttl_ms is 5 minutes).
LATEST_TTL_S = 300.0
#: How long an id the registry does not know is remembered as unknown.
MISSING_TTL_S = 30.0
#: The longest part of a dead-letter reason quoted from a decoder's error.
MAX_REASON = 300
#: The deepest nesting of structs, lists and maps a table column may have.
MAX_DEPTH = 32

#: The dead-letter table's columns (the writer adds its ``kafka`` struct).
DLQ_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)

_UTC = datetime.UTC
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_INT64 = (-(1 << 63), (1 << 63) - 1)


class IncompatibleSchema(Exception):
    """A schema a table cannot take (or cannot evolve to): the message says why."""


class RegistryUnavailable(Exception):
    """The registry could not be asked (connection, timeout, 5xx): not the record's fault."""


Convert = Callable[[Any], Any] | None  # None: the decoded value is already the column's


def _field(name: str, type_: pa.DataType, nullable: bool) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


def _list(item: pa.DataType, nullable: bool) -> pa.DataType:
    return pa.list_(pa.field("element", item, nullable=nullable))


def _map(key: pa.DataType, value: pa.DataType, nullable: bool) -> pa.DataType:
    return pa.map_(pa.field("key", key, nullable=False), pa.field("value", value, nullable=nullable))


def _decimal(precision: Any, scale: Any, where: str) -> pa.DataType:
    if not isinstance(precision, int) or not isinstance(scale, int) or not 0 <= scale <= precision:
        raise IncompatibleSchema(f"{where}: decimal({precision}, {scale}) is not a valid decimal")
    if precision > 38:
        raise IncompatibleSchema(f"{where}: decimal({precision}, {scale}) is wider than a table's 38 digits")
    return pa.decimal128(precision, scale)


def _each(convert: Convert) -> Convert:
    if convert is None:
        return None
    return lambda items: None if items is None else [None if item is None else convert(item) for item in items]


def _values(convert: Convert) -> Convert:
    if convert is None:
        return None
    return lambda entries: (
        None if entries is None else {k: None if v is None else convert(v) for k, v in entries.items()}
    )


# -- Avro ----------------------------------------------------------------------------------

_AVRO_LOGICAL = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time64("us"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): _TIMESTAMP,
    ("long", "timestamp-micros"): _TIMESTAMP,
    ("long", "local-timestamp-millis"): pa.timestamp("us"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}
_AVRO_PRIMITIVES = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}  # fmt: skip


class _AvroTable:
    """An AVRO schema (brokkr's parsed ``_Type`` graph) as Arrow columns, and fastavro's
    decoder of it with the logical types kept that the columns need."""

    def __init__(self, parsed) -> None:
        import fastavro
        from brokkr.plugins.schema_registry.avro import _DECODE_ERRORS

        self._fastavro, self._errors = fastavro, _DECODE_ERRORS
        self.names: dict[int, str] = {}  # a named type (by id) -> its name for fastavro
        self.named = self._has_choice(parsed.root, set())
        self.on_path: set[int] = set()
        root = parsed.root
        type_, nullable, convert = self.column(root, root.full, 0)
        if root.kind == "record":
            self.schema = pa.schema(list(type_))
            self.convert = convert
        else:
            if type_ is None:
                raise IncompatibleSchema("the schema is null: it has no column")
            self.schema = pa.schema([_field("value", type_, nullable)])
            self.convert = (lambda v: {"value": v}) if convert is None else (lambda v: {"value": convert(v)})
        self.decoder = fastavro.parse_schema(self.plain(root, set()))

    def _has_choice(self, node, seen: set[int]) -> bool:
        """Whether a union of several non-null types is anywhere: its branch is then needed,
        and fastavro is asked to name the named type a union's datum holds."""
        if id(node) in seen:
            return False
        seen.add(id(node))
        if node.kind == "union" and sum(b.kind != "null" for b in node.branches) > 1:
            return True
        children = [f.type for f in node.fields] + node.branches + ([node.items] if node.items is not None else [])
        return any(self._has_choice(child, seen) for child in children)

    def decode(self, payload: memoryview) -> dict:
        stream = io.BytesIO(payload)
        try:
            datum = self._fastavro.schemaless_reader(stream, self.decoder, None, return_named_type=self.named)
        except Exception as exc:  # what fastavro raises tells why (as the AVRO format words it)
            reason = self._errors.get(type(exc)) or f"{type(exc).__name__}: {exc}"
            raise InvalidPayload(f"not a datum of the AVRO schema: {reason}") from None
        left = len(payload) - stream.tell()
        if left:
            raise InvalidPayload(f"not a datum of the AVRO schema: {left} bytes left over after it")
        return datum if self.convert is None else self.convert(datum)

    # the columns

    def column(self, node, where: str, depth: int) -> tuple[Any, bool, Convert]:
        """(Arrow type, or None for a null; nullable; convert, or None where fastavro's datum fits)."""
        kind = node.kind
        if depth > MAX_DEPTH:
            raise IncompatibleSchema(f"{where}: nests deeper than {MAX_DEPTH} levels")
        if kind == "null":
            return None, True, None
        if kind == "union":
            return self.union(node, where, depth)
        logical = self.logical(node)
        if logical is not None:
            return logical, False, None
        if kind in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[kind], False, None
        if kind == "enum":
            return pa.string(), False, None
        if kind == "fixed":
            return pa.binary(), False, None
        if kind in ("array", "map"):
            item, nullable, convert = self.column(node.items, f"{where}[]", depth + 1)
            if item is None or (kind == "array" and self.holds_nothing(node.items)):
                raise IncompatibleSchema(f"{where}: an {kind} of items that hold no data")
            if kind == "array":
                return _list(item, nullable), False, _each(convert)
            return _map(pa.string(), item, nullable), False, _values(convert)
        return self.record(node, where, depth)

    def record(self, node, where: str, depth: int) -> tuple[Any, bool, Convert]:
        if id(node) in self.on_path:
            raise IncompatibleSchema(
                f"{where}: the record {node.full} contains itself (recursive types cannot be columns)"
            )
        self.on_path.add(id(node))
        fields, converts, nulls = [], [], []
        for field in node.fields:
            type_, nullable, convert = self.column(field.type, f"{where}.{field.name}", depth + 1)
            if type_ is None:
                nulls.append(field.name)  # a null field holds nothing: no column
                continue
            fields.append(_field(field.name, type_, nullable))
            if convert is not None:
                converts.append((field.name, convert))
        self.on_path.discard(id(node))
        if not fields:
            raise IncompatibleSchema(f"{where}: the record {node.full} has no field a table can hold")
        convert = None
        if converts or nulls:

            def convert(datum: dict, converts=tuple(converts), nulls=tuple(nulls)) -> dict:
                for name in nulls:
                    del datum[name]
                for name, one in converts:
                    value = datum[name]
                    if value is not None:
                        datum[name] = one(value)
                return datum

        return pa.struct(fields), False, convert

    def union(self, node, where: str, depth: int) -> tuple[Any, bool, Convert]:
        has_null = any(b.kind == "null" for b in node.branches)
        branches = [b for b in node.branches if b.kind != "null"]
        if not branches:
            return None, True, None
        if len(branches) == 1:
            type_, _, convert = self.column(branches[0], where, depth)
            if self.named and branches[0].name is not None:  # fastavro names it: (name, datum)
                inner = convert
                convert = (lambda v: v[1]) if inner is None else (lambda v: inner(v[1]))
            return type_, True, convert
        members = [self.column(b, f"{where}.member{i}", depth + 1) for i, b in enumerate(branches)]
        fields = [_field(f"member{i}", type_, True) for i, (type_, _, _) in enumerate(members)]
        names = [f"member{i}" for i in range(len(branches))]
        converts = [convert for _, _, convert in members]
        checks = [self.matcher(b) for b in branches]
        fastavro_names = {self.names_of(b): i for i, b in enumerate(branches) if b.name is not None}

        def choose(datum: Any) -> dict:
            if isinstance(datum, tuple):  # a named type, named by fastavro
                index = fastavro_names[datum[0]]
                datum = datum[1]
            else:
                index = next(i for i, check in enumerate(checks) if check is not None and check(datum))
            one = converts[index]
            row = dict.fromkeys(names)
            row[names[index]] = datum if one is None else one(datum)
            return row

        return pa.struct(fields), has_null, choose

    def names_of(self, node) -> str:
        return self.names.setdefault(id(node), f"t{len(self.names)}")

    @staticmethod
    def matcher(node) -> Callable[[Any], bool] | None:
        """Whether a decoded datum is of an unnamed branch of a union (None for a named
        type: fastavro names those). [int, long] or [float, double] cannot be told apart
        once decoded: a datum goes to the first branch that can hold it."""
        if node.name is not None:
            return None
        column = _AvroTable.logical(node)
        if column is not None:
            wanted = {pa.date32(): datetime.date, pa.time64("us"): datetime.time}.get(column, datetime.datetime)
            if pa.types.is_decimal(column):
                wanted = decimal.Decimal
            if wanted is datetime.date:
                return lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
            return lambda v: isinstance(v, wanted)
        if node.kind == "int":
            return lambda v: isinstance(v, int) and not isinstance(v, bool) and -(1 << 31) <= v < (1 << 31)
        if node.kind == "long":
            return lambda v: isinstance(v, int) and not isinstance(v, bool)
        wanted = {"boolean": bool, "float": float, "double": float, "bytes": bytes, "string": str}.get(node.kind)
        return lambda v: isinstance(v, wanted or (list if node.kind == "array" else dict))

    @staticmethod
    def logical(node) -> pa.DataType | None:
        """The column type of a logical type this module converts (None: the plain type)."""
        logical = node.props.get("logicalType")
        if not isinstance(logical, str):
            return None
        if logical == "decimal" and node.kind in ("bytes", "fixed"):
            precision, scale = node.props.get("precision"), node.props.get("scale", 0)
            if node.kind == "fixed" and isinstance(precision, int):
                most = len(str(2 ** (8 * node.size - 1) - 1)) - 1  # Avro's floor(log10(2^(8 size - 1) - 1))
                if precision > most:
                    return None  # does not fit the fixed: Avro ignores such a logical type
            return _decimal(precision, scale, node.full)
        return _AVRO_LOGICAL.get((node.kind, logical))

    def holds_nothing(self, node) -> bool:
        return node.kind == "null" or (node.kind == "record" and not node.fields)

    # fastavro's schema: every named type renamed (no namespaces), logical types kept
    # only where this module's columns take them

    def plain(self, node, written: set[int]) -> Any:
        kind = node.kind
        if kind == "union":
            return [self.plain(b, written) for b in node.branches]
        if kind in ("array", "map"):
            return {"type": kind, "items" if kind == "array" else "values": self.plain(node.items, written)}
        out: dict[str, Any] = {"type": kind}
        if node.name is not None:
            name = self.names_of(node)
            if id(node) in written:
                return name
            written.add(id(node))
            out["name"] = name
            if kind == "record":
                out["fields"] = [{"name": f.name, "type": self.plain(f.type, written)} for f in node.fields]
            elif kind == "enum":
                out["symbols"] = list(node.symbols)
            else:
                out["size"] = node.size
        if self.logical(node) is not None:
            out["logicalType"] = node.props["logicalType"]
            if out["logicalType"] == "decimal":
                out.update(precision=node.props["precision"], scale=node.props.get("scale", 0))
        return out if len(out) > 1 else kind


# -- JSON Schema -----------------------------------------------------------------------------


def _json_text(value: Any) -> str:
    return jsontext.dumps(value)


def _integer(value: Any) -> int:
    number = int(value)
    if not _INT64[0] <= number <= _INT64[1]:
        raise InvalidPayload(f"the integer {number} does not fit a 64-bit column")
    return number


def _date_time(value: str) -> datetime.datetime:
    try:
        parsed = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidPayload(f"{value[:64]!r} is not a date-time") from None
    if parsed.tzinfo is None:
        raise InvalidPayload(f"the date-time {value[:64]!r} has no time zone offset")
    return parsed.astimezone(_UTC)


def _date(value: str) -> datetime.date:
    try:
        return datetime.date.fromisoformat(value)
    except ValueError:
        raise InvalidPayload(f"{value[:64]!r} is not a date") from None


class _JsonTable:
    """A JSON schema (brokkr's parsed node graph) as Arrow columns."""

    def __init__(self, parsed) -> None:
        self.parsed = parsed
        self.on_path: set[int] = set()
        type_, nullable, convert = self.column(parsed.root, "$", 0)
        if type_ is None:
            raise IncompatibleSchema("the schema is null: it has no column")
        if isinstance(type_, pa.StructType) and not nullable:
            self.schema = pa.schema(list(type_))
            self.convert = convert
        else:
            self.schema = pa.schema([_field("value", type_, nullable)])
            self.convert = lambda v: {"value": None if v is None else convert(v)}

    def decode(self, payload: memoryview) -> dict:
        return self.convert(self.parsed.decode(payload))

    @staticmethod
    def target(node):
        for _ in range(64):  # the parse followed every $ref (json_schema._resolve_all)
            if node.kind != "ref":
                return node
            node = node.target
        raise IncompatibleSchema("a $ref chain longer than 64")

    def column(self, node, where: str, depth: int) -> tuple[pa.DataType | None, bool, Callable[[Any], Any]]:
        """(type, nullable, convert): convert turns a non-null JSON value into the column's."""
        if depth > MAX_DEPTH:
            raise IncompatibleSchema(f"{where}: nests deeper than {MAX_DEPTH} levels")
        node = self.target(node)
        if id(node) in self.on_path:
            raise IncompatibleSchema(f"{where}: the schema contains itself (recursive types cannot be columns)")
        self.on_path.add(id(node))
        try:
            return self._column(node, where, depth)
        finally:
            self.on_path.discard(id(node))

    def _column(self, node, where: str, depth: int) -> tuple[pa.DataType | None, bool, Callable[[Any], Any]]:
        kind = node.kind
        if kind == "null":
            return None, True, _json_text
        if kind == "boolean":
            return pa.bool_(), False, bool
        if kind == "number":
            return (pa.int64(), False, _integer) if node.integer else (pa.float64(), False, float)
        if kind == "string":
            fmt = node.raw.get("format")
            if fmt == "date-time":
                return _TIMESTAMP, False, _date_time
            if fmt == "date":
                return pa.date32(), False, _date
            return pa.string(), False, str
        if kind == "object":
            return self.object(node, where, depth)
        if kind == "array" and node.items is not None and node.tuple_items is None:
            item, nullable, convert = self.column(node.items, f"{where}[*]", depth + 1)
            if item is not None:
                return _list(item, nullable), False, lambda v: [None if x is None else convert(x) for x in v]
        if kind == "combined":
            return self.combined(node, where, depth)
        if kind == "enum" and node.raw and all(isinstance(v, str) for v in node.raw):
            return pa.string(), False, str
        return pa.string(), False, _json_text  # not one type: its JSON text

    def object(self, node, where: str, depth: int):
        properties = node.properties or {}
        if not properties:
            if node.additional is not None:
                value, nullable, convert = self.column(node.additional, f"{where}.*", depth + 1)
                if value is not None:
                    return (
                        _map(pa.string(), value, nullable),
                        False,
                        lambda v: {k: None if x is None else convert(x) for k, x in v.items()},
                    )
            return pa.string(), False, _json_text
        fields, converts = [], []
        for name, sub in properties.items():
            type_, nullable, convert = self.column(sub, f"{where}.{name}", depth + 1)
            if type_ is None:
                continue
            fields.append(_field(name, type_, nullable or name not in node.required))
            converts.append((name, convert))
        if not fields:
            return pa.string(), False, _json_text

        def convert(value: dict, converts=tuple(converts)) -> dict:
            row = {}
            for name, one in converts:
                item = value.get(name)
                row[name] = None if item is None else one(item)
            return row

        return pa.struct(fields), False, convert

    def combined(self, node, where: str, depth: int):
        parts = [self.target(part) for part in node.subschemas]
        if node.criterion == "allOf":  # keywords next to "type" (enum, const, not, ...): the typed part
            parts = [p for p in parts if p.kind not in ("enum", "const", "not", "empty", "true")]
            if len(parts) == 1:
                return self.column(parts[0], where, depth)
        else:
            typed = [p for p in parts if p.kind != "null"]
            if len(typed) == 1:
                type_, _, convert = self.column(typed[0], where, depth)
                return type_, len(typed) < len(parts), convert
        return pa.string(), False, _json_text


# -- Protobuf ----------------------------------------------------------------------------------


def _timestamp(message) -> datetime.datetime:
    try:
        return _EPOCH + datetime.timedelta(seconds=message.seconds, microseconds=message.nanos // 1000)
    except OverflowError:
        raise InvalidPayload(f"the Timestamp of {message.seconds} seconds is out of range") from None


class _ProtobufTable:
    """A PROTOBUF schema's table message as Arrow columns."""

    def __init__(self, parsed, protobuf_name: str | None) -> None:
        from google.protobuf import descriptor, message_factory

        self.fd = F = descriptor.FieldDescriptor
        self.scalars = {
            F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
            F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
            F.TYPE_UINT32: pa.int64(), F.TYPE_FIXED32: pa.int64(),
            F.TYPE_FLOAT: pa.float32(), F.TYPE_DOUBLE: pa.float64(), F.TYPE_BOOL: pa.bool_(),
            F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(),
        }  # fmt: skip
        self.parsed = parsed
        name = protobuf_name or message_name(parsed.file, (0,))
        try:
            message = parsed.pool.FindMessageTypeByName(name or "")
        except KeyError:
            raise IncompatibleSchema(f"the schema has no message {name!r}") from None
        self.name = message.full_name
        self.message_class = message_factory.GetMessageClass(message)
        self.on_path: set[str] = set()
        fields, self.convert = self.message(message, self.name, 0)
        self.schema = pa.schema(fields)

    def decode(self, payload: memoryview, framed: bool) -> dict:
        data = bytes(payload)
        offset = 0
        if framed:
            indexes, offset = message_indexes(data)
            name = message_name(self.parsed.file, indexes)
            if name != self.name:
                raise InvalidPayload(
                    f"its message indexes {list(indexes)} name {name}, not the table's message {self.name}"
                )
        try:
            message = self.message_class.FromString(data[offset:])
        except Exception as exc:  # DecodeError, RuntimeError (nesting), ValueError
            raise InvalidPayload(f"payload does not decode as {self.name}: {exc}") from None
        if not message.IsInitialized():
            missing = ", ".join(message.FindInitializationErrors()[:10])
            raise InvalidPayload(f"payload does not decode as {self.name}: missing required fields {missing}")
        return self.convert(message)

    def message(self, message, where: str, depth: int) -> tuple[list[pa.Field], Callable[[Any], dict]]:
        if depth > MAX_DEPTH:
            raise IncompatibleSchema(f"{where}: nests deeper than {MAX_DEPTH} levels")
        if message.full_name in self.on_path:
            raise IncompatibleSchema(
                f"{where}: the message {message.full_name} contains itself (recursive types cannot be columns)"
            )
        self.on_path.add(message.full_name)
        fields, plan = [], []
        for field in message.fields:
            type_, convert = self.field_type(field, f"{where}.{field.name}", depth + 1)
            repeated = field.is_repeated
            nullable = not repeated and field.has_presence and not field.is_required
            if repeated and not self.is_map(field):
                type_, convert = _list(type_, False), (list if convert is None else _each(convert))
            fields.append(_field(field.name, type_, nullable))
            plan.append((field.name, nullable, convert))
        self.on_path.discard(message.full_name)
        if not fields:
            raise IncompatibleSchema(f"{where}: the message {message.full_name} has no field a table can hold")

        def convert(msg, plan=tuple(plan)) -> dict:
            row = {}
            for name, nullable, one in plan:
                if nullable and not msg.HasField(name):
                    row[name] = None
                    continue
                value = getattr(msg, name)
                row[name] = value if one is None else one(value)
            return row

        return fields, convert

    def is_map(self, field) -> bool:
        return field.message_type is not None and field.message_type.GetOptions().map_entry

    def field_type(self, field, where: str, depth: int) -> tuple[pa.DataType, Convert]:
        fd, t = self.fd, field.type
        if self.is_map(field):
            entry = field.message_type
            key, key_convert = self.field_type(entry.fields_by_name["key"], where, depth)
            value, convert = self.field_type(entry.fields_by_name["value"], f"{where}[]", depth + 1)
            if key_convert is None and convert is None:
                return _map(key, value, False), dict
            keys, values = key_convert or (lambda k: k), convert or (lambda v: v)
            return _map(key, value, False), lambda entries: {keys(k): values(v) for k, v in entries.items()}
        if t == fd.TYPE_MESSAGE or t == fd.TYPE_GROUP:
            if field.message_type.full_name == "google.protobuf.Timestamp":
                return _TIMESTAMP, _timestamp
            fields, convert = self.message(field.message_type, where, depth)
            return pa.struct(fields), convert
        if t == fd.TYPE_ENUM:
            names = {v.number: v.name for v in field.enum_type.values}
            return pa.string(), lambda v: names.get(v) or str(v)
        if t in (fd.TYPE_UINT64, fd.TYPE_FIXED64):
            return pa.decimal128(20, 0), decimal.Decimal
        return self.scalars[t], None


# -- the typer -----------------------------------------------------------------------------------


class _Known:
    """One schema id, as the typer keeps it: its table (columns and decoder) or why it has none."""

    __slots__ = ("table", "reason", "expires")

    def __init__(self, table: Any = None, reason: str | None = None, expires: float = float("inf")) -> None:
        self.table, self.reason, self.expires = table, reason, expires


class ValueTyper:
    """Values of one topic as typed rows (see the module docstring). Picklable: it holds
    its settings and a cache rebuilt (empty) after unpickling. Thread-safe."""

    def __init__(
        self,
        registry_url: str,
        topic: str,
        mode: str,
        subject: str | None = None,
        *,
        protobuf_name: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
        self.registry_url = registry_url.rstrip("/")
        self.topic = topic
        self.mode = mode
        self.subject = subject or f"{topic}-value"
        self.protobuf_name = protobuf_name
        self._start()

    def _start(self) -> None:
        self._known: collections.OrderedDict[int, _Known] = collections.OrderedDict()
        self._latest: tuple[int | None, str | None, float] | None = None  # (id, reason, expires)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in ("registry_url", "topic", "mode", "subject", "protobuf_name")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._start()

    # the interface

    def decode(self, value: bytes | None) -> tuple[dict | None, int | None, str | None]:
        """(row, schema id, None), or (None, schema id or None, the dead-letter reason)."""
        if value is None:
            return None, None, "the value is null"
        view = memoryview(value)
        if self.mode == "value_schema_id_prefix":
            if len(view) < FRAMING:
                return None, None, f"the value is {len(view)} bytes, too short for the magic byte and a schema id"
            if view[0] != MAGIC:
                return None, None, f"the value does not start with the magic byte {MAGIC} (it starts with {view[0]})"
            schema_id, payload = int.from_bytes(view[1:FRAMING], "big"), view[FRAMING:]
        else:
            schema_id, reason = self._latest_id()
            if schema_id is None:
                return None, None, reason
            payload = view
        known = self._schema(schema_id)
        if known.table is None:
            return None, schema_id, known.reason
        try:
            if isinstance(known.table, _ProtobufTable):
                row = known.table.decode(payload, framed=self.mode == "value_schema_id_prefix")
            else:
                row = known.table.decode(payload)
        except Exception as exc:  # InvalidPayload, or a value the conversion did not expect: still the record's
            why = str(exc) if isinstance(exc, InvalidPayload) else f"{type(exc).__name__}: {exc}"
            return None, schema_id, f"the value does not decode against schema id {schema_id}: {why[:MAX_REASON]}"
        return row, schema_id, None

    def arrow_schema(self, schema_id: int) -> pa.Schema:
        """The columns of schema ``schema_id``'s rows; raises IncompatibleSchema when it
        cannot be a table's (or is not registered), RegistryUnavailable."""
        known = self._schema(schema_id)
        if known.table is None:
            raise IncompatibleSchema(known.reason)
        return known.table.schema

    # the registry

    def _schema(self, schema_id: int) -> _Known:
        with self._lock:
            known = self._known.get(schema_id)
            if known is not None and known.expires > time.monotonic():
                self._known.move_to_end(schema_id)
                return known
        known = self._build(schema_id)  # outside the lock: HTTP, maybe protoc
        with self._lock:
            self._known[schema_id] = known
            self._known.move_to_end(schema_id)
            while len(self._known) > MAX_CACHED:
                self._known.popitem(last=False)
        return known

    def _build(self, schema_id: int) -> _Known:
        entity = self._get(f"/schemas/ids/{schema_id}?format=serialized")
        if entity is None:
            return _Known(reason=f"schema id {schema_id} is not registered", expires=time.monotonic() + MISSING_TTL_S)
        schema_type = entity.get("schemaType", "AVRO")
        try:
            references = self._references(entity.get("references") or [])
            parsed = FORMATS[schema_type].parse(entity["schema"], references)
            if schema_type == "AVRO":
                table = _AvroTable(parsed)
            elif schema_type == "JSON":
                table = _JsonTable(parsed)
            else:
                table = _ProtobufTable(parsed, self.protobuf_name)
        except (RegistryUnavailable, ConfigError, ImportError):
            raise  # not the schema's fault: this machine lacks a format's library, or the registry
        except (IncompatibleSchema, InvalidSchema) as exc:
            return _Known(reason=f"schema id {schema_id} cannot be a table's: {exc}")
        except Exception as exc:  # a schema this module did not expect: still refused, with why
            return _Known(reason=f"schema id {schema_id} cannot be a table's: {type(exc).__name__}: {exc}")
        return _Known(table)

    def _references(self, references: list) -> dict[str, str]:
        """Each reference's text by its name, transitively, as the formats' parse takes them."""
        texts: dict[str, str] = {}
        pending = list(references)
        while pending:
            ref = pending.pop()
            if ref["name"] in texts:
                continue
            if len(texts) >= MAX_REFERENCES:
                raise IncompatibleSchema(f"it needs more than {MAX_REFERENCES} referenced schemas")
            subject = urllib.parse.quote(ref["subject"], safe="")
            entity = self._get(f"/subjects/{subject}/versions/{int(ref['version'])}?format=serialized")
            if entity is None:
                raise IncompatibleSchema(f"its reference {ref['name']} ({ref['subject']} v{ref['version']}) is missing")
            texts[ref["name"]] = entity["schema"]
            pending.extend(entity.get("references") or [])
        return texts

    def _latest_id(self) -> tuple[int | None, str | None]:
        with self._lock:
            latest = self._latest
        if latest is None or latest[2] <= time.monotonic():
            subject = urllib.parse.quote(self.subject, safe="")
            entity = self._get(f"/subjects/{subject}/versions/latest")
            now = time.monotonic()
            if entity is None:
                latest = (None, f"the subject {self.subject} has no schema", now + MISSING_TTL_S)
            else:
                latest = (int(entity["id"]), None, now + LATEST_TTL_S)
            with self._lock:
                self._latest = latest
        return latest[0], latest[1]

    def _get(self, path: str) -> dict | None:
        """The registry's JSON answer; None where it says the schema, subject or version is
        not there (Confluent's 40401, 40402, 40403); raises RegistryUnavailable otherwise."""
        parts = urllib.parse.urlsplit(self.registry_url)
        headers = {"Accept": "application/vnd.schemaregistry.v1+json"}
        if parts.username is not None:  # http://user:password@host: HTTP basic credentials
            user, password = urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or "")
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            parts = parts._replace(netloc=parts.netloc.rpartition("@")[2])
        request = urllib.request.Request(urllib.parse.urlunsplit(parts) + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and _error_code(exc) in (40401, 40402, 40403):
                return None
            raise RegistryUnavailable(f"the schema registry answered {exc.code} to GET {path}") from None
        except (OSError, ValueError) as exc:
            raise RegistryUnavailable(f"the schema registry at {parts.netloc} cannot be reached: {exc}") from None
        if len(body) > MAX_RESPONSE_BYTES:
            raise RegistryUnavailable(f"the schema registry's answer to GET {path} is over {MAX_RESPONSE_BYTES} bytes")
        try:
            return json.loads(body)
        except ValueError:
            raise RegistryUnavailable(f"the schema registry's answer to GET {path} is not JSON") from None


def _error_code(error: urllib.error.HTTPError) -> int | None:
    """The ``error_code`` of a registry's error answer (None for any other body)."""
    try:
        answer = json.loads(error.read(64 * 1024))
    except (OSError, ValueError):
        return None
    return answer.get("error_code") if isinstance(answer, dict) else None


# -- evolution -------------------------------------------------------------------------------------


def evolve(table_schema: pa.Schema, new: pa.Schema, widen: bool = True) -> pa.Schema:
    """The table's schema after rows of ``new`` join it, as Iceberg and Delta evolve a
    table: its columns kept in their order (one that ``new`` lacks, or allows null in,
    becomes nullable), ``new``'s other columns appended as nullable (rows already written
    have none), int32 -> int64, float32 -> float64 and decimal(P, S) -> decimal(P', S) with
    P' > P widened, structs merged field by field, list items and map values likewise.
    Raises IncompatibleSchema for any other type change (string -> int, a struct for a
    list, int64 -> int32 is kept as int64: the table's wider type stays). Without ``widen``
    (Delta: deltalake keeps a column's type and fails values that do not fit it) a widening
    raises IncompatibleSchema too."""
    return pa.schema(_merge_fields(list(table_schema), list(new), "", widen), metadata=table_schema.metadata)


def _merge_fields(old: list[pa.Field], new: list[pa.Field], where: str, widen: bool = True) -> list[pa.Field]:
    by_name = {field.name: field for field in new}
    merged = []
    for field in old:
        other = by_name.pop(field.name, None)
        if other is None:
            merged.append(field.with_nullable(True))
        else:
            type_ = _merge_type(field.type, other.type, where + field.name, widen)
            merged.append(field.with_type(type_).with_nullable(field.nullable or other.nullable))
    merged.extend(field.with_nullable(True) for field in new if field.name in by_name)
    return merged


_WIDER = {(pa.int32(), pa.int64()), (pa.float32(), pa.float64())}


def _merge_type(old: pa.DataType, new: pa.DataType, where: str, widen: bool = True) -> pa.DataType:
    if old == new:
        return old
    if (new, old) in _WIDER:  # the table's type is already the wider one
        return old
    decimals = pa.types.is_decimal(old) and pa.types.is_decimal(new) and old.scale == new.scale
    if not widen and ((old, new) in _WIDER or (decimals and new.precision > old.precision)):
        raise IncompatibleSchema(f"{where}: a column of {old} cannot become {new} (a Delta table's types stay)")
    if (old, new) in _WIDER:
        return new
    if decimals:
        return old if old.precision >= new.precision else new
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return pa.struct(_merge_fields(list(old), list(new), where + ".", widen))
    if pa.types.is_list(old) and pa.types.is_list(new):
        item = _merge_type(old.value_type, new.value_type, where + "[]", widen)
        nullable = old.value_field.nullable or new.value_field.nullable
        return pa.list_(old.value_field.with_type(item).with_nullable(nullable))
    if pa.types.is_map(old) and pa.types.is_map(new):
        if old.key_type != new.key_type:
            raise IncompatibleSchema(f"{where}: map keys of {old.key_type} cannot become {new.key_type}")
        value = _merge_type(old.item_type, new.item_type, where + "[]", widen)
        nullable = old.item_field.nullable or new.item_field.nullable
        return pa.map_(old.key_field, old.item_field.with_type(value).with_nullable(nullable))
    raise IncompatibleSchema(f"{where}: a column of {old} cannot become {new}")
