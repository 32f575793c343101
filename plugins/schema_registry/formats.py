"""The contract between the registry and its schema formats (AVRO, JSON, PROTOBUF).

The registry (store.py, api.py, compatibility.py) knows schemas only through these
protocols; each format module (avro.py, json_schema.py, protobuf.py) exports one
`FORMAT` object implementing `SchemaFormat`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol

from brokkr.core.errors import ConfigError


class InvalidSchema(Exception):
    """A schema that does not parse: the registry answers 42201 "Invalid schema ..."
    with this message kept."""


class InvalidPayload(Exception):
    """A record's payload that does not decode against its schema."""


class ParsedSchema(Protocol):
    schema_type: str  # "AVRO" | "JSON" | "PROTOBUF"

    def canonical(self) -> str:
        """The string the registry stores and returns for this schema as registered
        (Confluent keeps the text as given for JSON/PROTOBUF and the parsed canonical
        form for AVRO: each format follows Confluent's behaviour)."""

    def normalized(self) -> str:
        """The normalised form (`normalize=true` of register/lookup): two schemas that
        normalise equal get the same id."""

    def validate(self, payload: memoryview) -> None:
        """Decode one record's payload after the 5-byte framing (magic 0 + 4-byte id);
        for PROTOBUF the payload starts with the message indexes (Confluent's format).
        Raises InvalidPayload(reason); bounded work.

        Optional: ``serialized() -> str``, what ``?format=serialized`` answers (PROTOBUF: the
        base64 FileDescriptorProto); a schema without it answers its stored text."""


class SchemaFormat(Protocol):
    schema_type: str

    def parse(self, schema: str, references: Mapping[str, str]) -> ParsedSchema:
        """`references`: import/ref name -> the referenced schema's text, resolved
        transitively by the registry. Raises InvalidSchema(message)."""

    def compatibility_errors(self, reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
        """[] when data written with `writer` can be read with `reader`; else
        Confluent-style messages. The registry maps levels onto it (BACKWARD:
        new=reader, old=writer; FORWARD: old=reader, new=writer; FULL: both;
        *_TRANSITIVE: against every earlier version, else only the latest)."""


class _Formats(Mapping[str, SchemaFormat]):
    """The formats by schema type, imported at their first use: their libraries (fastavro,
    jsonschema, protobuf) come with the ``schema-registry`` extra, and a broker that serves
    no registry and validates no payload must start without them."""

    def __init__(self) -> None:
        self._loaded: dict[str, SchemaFormat] | None = None

    def _formats(self) -> dict[str, SchemaFormat]:
        if self._loaded is None:
            loaded = {}
            for module in ("avro", "json_schema", "protobuf"):
                try:
                    fmt = importlib.import_module(f"{__package__}.{module}").FORMAT
                except ImportError as exc:
                    raise ConfigError(
                        f"the schema registry needs {exc.name}: pip install 'brokkr[schema-registry]'"
                    ) from None
                loaded[fmt.schema_type] = fmt
            self._loaded = loaded
        return self._loaded

    def __getitem__(self, schema_type: str) -> SchemaFormat:
        return self._formats()[schema_type]

    def __iter__(self):
        return iter(self._formats())

    def __len__(self) -> int:
        return len(self._formats())


#: AVRO, JSON and PROTOBUF, each module's ``FORMAT`` (stateless: shared by every broker).
FORMATS: Mapping[str, SchemaFormat] = _Formats()


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(offset, min(offset + 10, len(data))):
        value |= (data[i] & 0x7F) << shift
        shift += 7
        if not data[i] & 0x80:
            return value, i + 1
    if offset + 10 <= len(data):
        raise InvalidPayload("malformed message indexes: varint longer than 10 bytes")
    raise InvalidPayload("truncated message indexes")


def _zigzag(data: bytes, offset: int) -> tuple[int, int]:
    value, offset = _varint(data, offset)
    return (value >> 1) ^ -(value & 1), offset


def message_indexes(data: bytes) -> tuple[tuple[int, ...], int]:
    """Confluent's message indexes at the payload's start: a zigzag varint count, then that
    many zigzag varint indexes (a lone 0 stands for [0], the first message)."""
    count, offset = _zigzag(data, 0)
    if count == 0:
        return (0,), offset
    if count < 0 or count > len(data) - offset:
        raise InvalidPayload(f"malformed message indexes: count {count}")
    indexes = []
    for _ in range(count):
        index, offset = _zigzag(data, offset)
        if index < 0:
            raise InvalidPayload(f"malformed message indexes: index {index}")
        indexes.append(index)
    return tuple(indexes), offset
