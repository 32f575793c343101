"""The PROTOBUF schema format, as Confluent Schema Registry handles it.

A schema arrives in one of two forms, both accepted as Confluent does:
- ``.proto`` text, compiled by protoc (grpcio-tools) in a subprocess: the schema and its
  references are written, under their import names, to a temporary directory, and protoc
  emits a FileDescriptorSet. The subprocess keeps protoc's error output, aborts and import
  hooks out of the broker and bounds the work with a timeout; parsing therefore blocks the
  calling thread (tens of milliseconds): call it off the event loop.
- a base64-encoded serialized FileDescriptorProto (what confluent-kafka's ProtobufSerializer
  registers), checked by building it into a DescriptorPool with its references.

Imports of the well-known types (``google/protobuf/*``, and ``google/type/*`` and
``confluent/*`` where their Python modules are installed) resolve without references, as
in Confluent.

The text the registry stores (``canonical``) is Confluent's rendering of the parsed file
(ProtobufSchemaUtils' layout: comments and formatting dropped, type names as written for
.proto text, fully qualified for a descriptor); ``normalized`` is Confluent's normalised
form; ``serialized`` the base64 FileDescriptorProto that ``?format=serialized`` returns.
Compatibility follows Confluent's ProtobufSchema diff (io.confluent...protobuf.diff).
"""

from __future__ import annotations

import base64
import binascii
import importlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.message import DecodeError, Message

from .formats import InvalidPayload, InvalidSchema, message_indexes

SCHEMA_TYPE = "PROTOBUF"

# protoc's wall-clock bound: a schema of the registry's maximum request size compiles in
# well under a second; anything slower is refused rather than left holding a thread.
PROTOC_TIMEOUT_S = 20.0
# The main schema's file name, as confluent-kafka names a schema it resolves ("default").
MAIN_FILE = "default"

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    _FDP.TYPE_DOUBLE: "double",
    _FDP.TYPE_FLOAT: "float",
    _FDP.TYPE_INT64: "int64",
    _FDP.TYPE_UINT64: "uint64",
    _FDP.TYPE_INT32: "int32",
    _FDP.TYPE_FIXED64: "fixed64",
    _FDP.TYPE_FIXED32: "fixed32",
    _FDP.TYPE_BOOL: "bool",
    _FDP.TYPE_STRING: "string",
    _FDP.TYPE_BYTES: "bytes",
    _FDP.TYPE_UINT32: "uint32",
    _FDP.TYPE_SFIXED32: "sfixed32",
    _FDP.TYPE_SFIXED64: "sfixed64",
    _FDP.TYPE_SINT32: "sint32",
    _FDP.TYPE_SINT64: "sint64",
}
_MAX_FIELD_NUMBER = 536870911
_BASE64 = re.compile(r"\s*[A-Za-z0-9+/]+={0,2}\s*")


# --- the well-known files, resolved without references --------------------------------------

_BUILTIN_MODULES = {
    "google/protobuf/": [
        f"google.protobuf.{m}_pb2"
        for m in (
            "any",
            "api",
            "descriptor",
            "duration",
            "empty",
            "field_mask",
            "source_context",
            "struct",
            "timestamp",
            "type",
            "wrappers",
        )
    ],
    "google/type/": [
        f"google.type.{m}_pb2"
        for m in (
            "calendar_period",
            "color",
            "date",
            "datetime",
            "dayofweek",
            "expr",
            "fraction",
            "latlng",
            "money",
            "month",
            "postal_address",
            "quaternion",
            "timeofday",
        )
    ],
    "confluent/": [
        "confluent_kafka.schema_registry.confluent.meta_pb2",
        "confluent_kafka.schema_registry.confluent.type.decimal_pb2",
    ],
}


def _builtin_files(prefixes: Iterable[str]) -> dict[str, descriptor_pb2.FileDescriptorProto]:
    """The well-known files under `prefixes` (with what they import) that this Python has."""
    files: dict[str, descriptor_pb2.FileDescriptorProto] = {}

    def add(file_descriptor) -> None:
        if file_descriptor.name in files:
            return
        for dependency in file_descriptor.dependencies:
            add(dependency)
        files[file_descriptor.name] = descriptor_pb2.FileDescriptorProto.FromString(file_descriptor.serialized_pb)

    for prefix in prefixes:
        for module in _BUILTIN_MODULES[prefix]:
            try:
                add(importlib.import_module(module).DESCRIPTOR)
            except ImportError:
                continue
    return files


# --- parsing ---------------------------------------------------------------------------------


def _decode_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """`text` as a base64 FileDescriptorProto, or None when it is not one (then it is .proto
    text: a .proto file always has characters outside the base64 alphabet)."""
    if not _BASE64.fullmatch(text):
        return None
    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode("".join(text.split()), validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None


def _check_file_name(name: str) -> None:
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidSchema(f"Invalid reference name {name!r}: an import path is expected")


def _protoc(
    sources: dict[str, str],
    given: dict[str, descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    """Compile the .proto `sources` (import name -> text) with protoc, `given` descriptors
    and the well-known files available to their imports; every file, imports first."""
    imports = [d for f in given.values() for d in f.dependency]
    prefixes = [
        p
        for p in _BUILTIN_MODULES
        if p != "google/protobuf/"  # protoc ships those
        and (any(p in text for text in sources.values()) or any(d.startswith(p) for d in imports))
    ]
    known = _builtin_files(prefixes)
    known.update(given)
    with tempfile.TemporaryDirectory(prefix="brokkr-protoc-") as tmp:
        src = os.path.join(tmp, "src")
        for name, text in sources.items():
            path = os.path.join(src, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        out = os.path.join(tmp, "out.pb")
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            "--include_imports",
            "--include_source_info",
            f"--descriptor_set_out={out}",
        ]
        if known:
            with open(os.path.join(tmp, "known.pb"), "wb") as f:
                f.write(descriptor_pb2.FileDescriptorSet(file=known.values()).SerializeToString())
            command.append(f"--descriptor_set_in={os.path.join(tmp, 'known.pb')}")
        try:
            done = subprocess.run(
                command + list(sources),
                cwd=src,
                capture_output=True,
                timeout=PROTOC_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise InvalidSchema(f"Could not parse Protobuf - protoc took over {PROTOC_TIMEOUT_S:g}s") from None
        if done.returncode != 0:
            raise InvalidSchema(f"Could not parse Protobuf - {_protoc_errors(done)}")
        with open(out, "rb") as f:
            return list(descriptor_pb2.FileDescriptorSet.FromString(f.read()).file)


def _protoc_errors(done: subprocess.CompletedProcess) -> str:
    """protoc's error lines, without its logging library's warnings."""
    lines = [
        line
        for line in done.stderr.decode("utf-8", "replace").splitlines()
        if line.strip() and not _ABSL_LOG.match(line)
    ]
    if any("No module named grpc_tools" in line for line in lines):
        return "parsing .proto text needs grpcio-tools installed"
    return "\n".join(lines) or f"protoc exited with {done.returncode}"


_ABSL_LOG = re.compile(r"WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d")


def _ordered(
    main: str,
    files: Mapping[str, descriptor_pb2.FileDescriptorProto],
) -> list[descriptor_pb2.FileDescriptorProto]:
    """`main` and everything it imports, imports first; a missing import is an error."""
    ordered: list[descriptor_pb2.FileDescriptorProto] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done
    stack: list[tuple[str, int]] = [(main, 0)]
    while stack:  # iterative: an import chain's depth is the schema's to choose
        name, index = stack.pop()
        if index == 0:
            if state.get(name) == 2:
                continue
            if state.get(name) == 1:
                raise InvalidSchema(f"Could not parse Protobuf - import cycle through {name!r}")
            if name not in files:
                raise InvalidSchema(f"Could not parse Protobuf - import {name!r} has no reference of that name")
            state[name] = 1
        dependencies = files[name].dependency
        if index < len(dependencies):
            stack.append((name, index + 1))
            if state.get(dependencies[index]) != 2:
                stack.append((dependencies[index], 0))
        else:
            state[name] = 2
            ordered.append(files[name])
    return ordered


class ProtobufFormat:
    schema_type = SCHEMA_TYPE

    def parse(self, schema: str, references: Mapping[str, str]) -> ProtobufSchema:
        if not isinstance(schema, str) or not schema.strip():
            raise InvalidSchema("Could not parse Protobuf - empty schema")
        files: dict[str, descriptor_pb2.FileDescriptorProto] = {}
        sources: dict[str, str] = {}
        for name, text in references.items():
            _check_file_name(name)
            decoded = _decode_descriptor(text)
            if decoded is None:
                sources[name] = text
            else:
                decoded.name = name  # as confluent-kafka does: a reference is its import name
                files[name] = decoded
        main = _decode_descriptor(schema)
        main_name = main.name if main is not None and main.name else MAIN_FILE
        while main_name in references:
            main_name += "_"
        if main is None:
            sources[main_name] = schema
        else:
            main.name = main_name
        if sources:
            for compiled in _protoc(sources, files):
                files.setdefault(compiled.name, compiled)
        if main is not None:
            files[main_name] = main
        missing = {d for f in files.values() for d in f.dependency if d not in files}
        files.update(_builtin_files(p for p in _BUILTIN_MODULES if any(d.startswith(p) for d in missing)))
        return ProtobufSchema(_ordered(main_name, files), as_written=main is None, text=schema)

    def compatibility_errors(self, reader, writer) -> list[str]:
        if not isinstance(reader, ProtobufSchema) or not isinstance(writer, ProtobufSchema):
            return ["Incompatible because of different schema type"]
        return _Diff(original=writer, update=reader).messages()


# --- the parsed schema ------------------------------------------------------------------------


class _TypeInfo:
    __slots__ = ("proto", "package", "is_enum")

    def __init__(self, proto, package: str, is_enum: bool):
        self.proto = proto
        self.package = package
        self.is_enum = is_enum

    @property
    def is_map(self) -> bool:
        return not self.is_enum and self.proto.options.map_entry


class ProtobufSchema:
    """A parsed PROTOBUF schema: its file and every file it imports, built into a pool."""

    schema_type = SCHEMA_TYPE

    def __init__(self, files: list[descriptor_pb2.FileDescriptorProto], as_written: bool, text: str):
        self._source_file = files[-1]  # the main file, with protoc's source locations if any
        self._text = text if as_written else None
        self.file = descriptor_pb2.FileDescriptorProto()
        self.file.CopyFrom(self._source_file)
        self.file.ClearField("source_code_info")
        self.pool = descriptor_pool.DescriptorPool()
        for f in files:
            added = f
            if f.HasField("source_code_info"):
                added = descriptor_pb2.FileDescriptorProto()
                added.CopyFrom(f)
                added.ClearField("source_code_info")
            try:
                self.pool.Add(added)
            except Exception as exc:  # the pool's checks: unresolved or duplicate names, ...
                raise InvalidSchema(f"Could not parse Protobuf - {f.name}: {exc}") from None
        self.types: dict[str, _TypeInfo] = {}
        for f in files:
            self._collect(f.package, f.message_type, f.enum_type)
        self._classes: dict[tuple[int, ...], type] = {}
        self._rendered: dict[bool, str] = {}

    def _collect(self, package: str, messages, enums) -> None:
        stack = [(package, messages, enums)]
        while stack:  # iterative: nesting depth is the schema's to choose
            scope, messages, enums = stack.pop()
            for enum in enums:
                self.types[_join(scope, enum.name)] = _TypeInfo(enum, package, True)
            for message in messages:
                full = _join(scope, message.name)
                self.types[full] = _TypeInfo(message, package, False)
                stack.append((full, message.nested_type, message.enum_type))

    def field_type(self, message: str, field: descriptor_pb2.FieldDescriptorProto) -> str:
        """The full name (no leading dot) of a message/enum field's type."""
        if not field.type_name.startswith("."):  # a relative name, as a hand-built descriptor may have
            try:
                descriptor = self.pool.FindMessageTypeByName(message).fields_by_number[field.number]
                return (descriptor.message_type or descriptor.enum_type).full_name
            except (KeyError, AttributeError):
                pass
        return field.type_name.lstrip(".")

    # the registry's strings

    def canonical(self) -> str:
        if False not in self._rendered:
            self._rendered[False] = _Renderer(self, normalize=False).file_text()
        return self._rendered[False]

    def normalized(self) -> str:
        if True not in self._rendered:
            self._rendered[True] = _Renderer(self, normalize=True).file_text()
        return self._rendered[True]

    def serialized(self) -> str:
        """The base64 serialized FileDescriptorProto (``GET ...?format=serialized``)."""
        return base64.b64encode(self.file.SerializeToString()).decode("ascii")

    # payloads

    def validate(self, payload: memoryview) -> None:
        data = bytes(payload)
        indexes, offset = message_indexes(data)
        message_class = self._class(indexes)
        name = message_class.DESCRIPTOR.full_name
        try:
            message = message_class.FromString(data[offset:])
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise InvalidPayload(f"payload does not decode as {name}: {exc}") from None
        if not message.IsInitialized():  # proto2 required fields, as Java's parser checks
            missing = ", ".join(message.FindInitializationErrors()[:10])
            raise InvalidPayload(f"payload does not decode as {name}: missing required fields {missing}")

    def _class(self, indexes: tuple[int, ...]) -> type:
        cached = self._classes.get(indexes)
        if cached is not None:
            return cached
        messages, scope = self.file.message_type, self.file.package
        for depth, index in enumerate(indexes):
            if index >= len(messages):
                where = "the schema" if depth == 0 else scope
                raise InvalidPayload(f"message index {index} out of range: {where} has {len(messages)} message(s)")
            message = messages[index]
            scope = f"{scope}.{message.name}" if scope else message.name
            messages = message.nested_type
        cls = message_factory.GetMessageClass(self.pool.FindMessageTypeByName(scope))
        self._classes[indexes] = cls
        return cls

    def __repr__(self) -> str:
        return f"ProtobufSchema({self.file.name!r})"


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


# --- rendering .proto text (Confluent's ProtobufSchemaUtils layout) ----------------------------

_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    "'": "\\'",
    '"': '\\"',
}


def _quote(value: str) -> str:
    return (
        '"'
        + "".join(_ESCAPES.get(c) or (f"\\{ord(c):03o}" if ord(c) < 0x20 or ord(c) == 0x7F else c) for c in value)
        + '"'
    )


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.rstrip("\n").split("\n"))


def _default_json_name(name: str) -> str:
    """protoc's ToJsonName: underscores dropped, the letter after each upper-cased."""
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def _range(start: int, end_inclusive: int) -> str:
    if start == end_inclusive:
        return str(start)
    return f"{start} to {end_inclusive if end_inclusive < _MAX_FIELD_NUMBER else 'max'}"


class _Renderer:
    """One file as .proto text. ``normalize`` gives Confluent's normalised form: type names
    fully qualified, fields, oneofs, enum values, reserved ranges and imports sorted."""

    def __init__(self, schema: ProtobufSchema, normalize: bool):
        self.schema = schema
        self.file = schema._source_file
        self.normalize = normalize
        self.as_written = schema._text is not None and not normalize
        self.spans: dict[tuple[int, ...], list[int]] = {}
        if self.as_written:
            self.lines = schema._text.split("\n")
            self.spans = {tuple(loc.path): list(loc.span) for loc in self.file.source_code_info.location}
        self.editions = self.file.syntax == "editions"
        self.proto3 = self.file.syntax == "proto3"
        self._option_classes: dict[str, type] = {}

    # the source text, for type names as the schema wrote them

    def _source(self, path: tuple[int, ...]) -> str | None:
        span = self.spans.get(path)
        if span is None:
            return None
        if len(span) == 3:
            span = [span[0], span[1], span[0], span[2]]
        start_line, start_col, end_line, end_col = span
        if not 0 <= start_line <= end_line < len(self.lines):
            return None

        # protoc counts columns in bytes, a tab advancing to the next multiple of 8
        def at(line: int, column: int) -> int:
            data, col = self.lines[line].encode("utf-8"), 0
            for i, b in enumerate(data):
                if col >= column:
                    return i
                col += 8 - col % 8 if b == 9 else 1
            return len(data)

        chunks = [self.lines[n].encode("utf-8") for n in range(start_line, end_line + 1)]
        chunks[-1] = chunks[-1][: at(end_line, end_col)]
        chunks[0] = chunks[0][at(start_line, start_col) :]
        return b"\n".join(chunks).decode("utf-8", "replace")

    def _type(self, scope: str, field: descriptor_pb2.FieldDescriptorProto, path: tuple[int, ...]) -> str:
        if field.type in _SCALARS:
            return _SCALARS[field.type]
        full = self.schema.field_type(scope, field)
        info = self.schema.types.get(full)
        if info is not None and info.is_map and field.label == _FDP.LABEL_REPEATED:
            written = self._source(path + (6,)) if self.as_written else None
            if written is not None:
                key, _, value = "".join(written.split())[4:-1].partition(",")
            else:
                key, value = (self._type(full, f, ()) for f in info.proto.field[:2])
            return f"map<{key}, {value}>"
        written = self._source(path + (6,)) if self.as_written else None
        return "".join(written.split()) if written else f".{full}"

    # options

    def _options(self, options: Message) -> list[str]:
        """`options` as `name = value` strings, custom options (extensions) included."""
        if not options.ByteSize():
            return []
        name = options.DESCRIPTOR.full_name
        cls = self._option_classes.get(name)
        if cls is None:
            try:  # the schema's own pool knows its custom options' extensions
                cls = message_factory.GetMessageClass(self.schema.pool.FindMessageTypeByName(name))
            except KeyError:
                cls = type(options)
            self._option_classes[name] = cls
        parsed = cls.FromString(options.SerializeToString())
        out = []
        for field, value in parsed.ListFields():
            if field.name in ("map_entry", "uninterpreted_option") and not field.is_extension:
                continue
            label = f"({field.full_name})" if field.is_extension else field.name
            for item in value if field.is_repeated else [value]:
                out.append(f"{label} = {self._value(field, item)}")
        return out

    @staticmethod
    def _value(field, value) -> str:
        if field.message_type is not None:
            return "{ " + text_format.MessageToString(value, as_one_line=True) + " }"
        if field.enum_type is not None:
            known = field.enum_type.values_by_number.get(value)
            return known.name if known is not None else str(value)
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return _quote(value)
        if isinstance(value, bytes):
            return '"' + text_format.CEscape(value, as_utf8=False) + '"'
        return repr(value) if isinstance(value, float) else str(value)

    @staticmethod
    def _bracketed(options: list[str]) -> str:
        if not options:
            return ""
        if len(options) == 1:
            return f" [{options[0]}]"
        return " [\n" + _indent(",\n".join(options)) + "]"

    def _field_options(self, field: descriptor_pb2.FieldDescriptorProto) -> str:
        options = self._options(field.options)
        if field.HasField("default_value") and not self.proto3:
            value = field.default_value
            if field.type == _FDP.TYPE_STRING:
                value = _quote(value)
            elif field.type == _FDP.TYPE_BYTES:
                value = f'"{value}"'  # protoc keeps a bytes default C-escaped
            options.append(f"default = {value}")
        if field.HasField("json_name") and field.json_name != _default_json_name(field.name):
            options.append(f"json_name = {_quote(field.json_name)}")
        return self._bracketed(options)

    # declarations

    def file_text(self) -> str:
        f = self.file
        out = []
        if self.editions:
            edition = descriptor_pb2.Edition.Name(f.edition).removeprefix("EDITION_")
            out.append(f'edition = "{edition}";\n')
        elif f.syntax and (not self.normalize or self.proto3):
            out.append(f'syntax = "{f.syntax}";\n')
        elif self.as_written and (12,) in self.spans:
            out.append('syntax = "proto2";\n')
        if f.package:
            out.append(f"package {f.package};\n")
        if f.dependency:
            public, weak = set(f.public_dependency), set(f.weak_dependency)
            kinds = {"": [], "public ": [], "weak ": []}
            for i, name in enumerate(f.dependency):
                kinds["public " if i in public else "weak " if i in weak else ""].append(name)
            out.append("\n")
            for kind, names in kinds.items():
                for name in sorted(set(names)) if self.normalize else names:
                    out.append(f'import {kind}"{name}";\n')
        options = self._options(f.options)
        if options:
            out.append("\n")
            out.extend(f"option {o};\n" for o in options)
        types = self._types(f.package, f.message_type, f.enum_type)
        if types:
            out.append("\n" + types)
        extends = self._extends(f.package, (7,), f.extension)
        if extends:
            out.append("\n" + extends)
        if f.service:
            out.append("\n")
            out.extend(self._service(f.package, (6, i), s) for i, s in enumerate(f.service))
        return "".join(out)

    def _types(self, package: str, messages, enums) -> str:
        out = [self._message(_join(package, m.name), (4, i), m) for i, m in enumerate(messages)]
        out.extend(self._enum((5, i), e) for i, e in enumerate(enums))
        return "".join(out)

    def _message(
        self, full: str, path: tuple[int, ...], m: descriptor_pb2.DescriptorProto, keyword: str = "message "
    ) -> str:
        out = [f"{keyword}{m.name} {{"] if keyword else ["{"]
        reserved = self._reserved(m.reserved_range, m.reserved_name, end_exclusive=True)
        if reserved:
            out.append("\n" + _indent("".join(reserved)))
        options = self._options(m.options)
        if options:
            out.append("\n" + _indent("".join(f"option {o};\n" for o in options)))
        plain, oneofs = [], {}
        for i, field in enumerate(m.field):
            if field.HasField("oneof_index") and not field.proto3_optional:
                oneofs.setdefault(field.oneof_index, []).append(i)
            else:
                plain.append(i)
        oneof_order = sorted(oneofs)
        if self.normalize:
            plain.sort(key=lambda i: m.field[i].number)
            for members in oneofs.values():
                members.sort(key=lambda i: m.field[i].number)
            oneof_order.sort(key=lambda o: m.field[oneofs[o][0]].number)
        made_by = self._made_by_fields(full, m)
        declared = [j for j, n in enumerate(m.nested_type) if j not in made_by and not n.options.map_entry]
        # protoc numbers a message's nested types in the order it meets them, the map
        # entries and group bodies its fields make included; message indexes count on it
        makers = {i: j for j, i in made_by.items()}
        in_layout = [makers[i] for i in plain + [i for o in oneof_order for i in oneofs[o]] if i in makers] + declared

        def field(i: int) -> str:
            return self._field(full, path + (2, i), m.field[i], m)

        def oneof(o: int) -> str:
            return self._oneof(full, path, m, o, oneofs[o])

        def message(j: int) -> str:
            return self._message(_join(full, m.nested_type[j].name), path + (3, j), m.nested_type[j])

        if in_layout == sorted(in_layout):  # Confluent's layout keeps that order
            if plain:
                out.append("\n" + _indent("".join(field(i) for i in plain)))
            if oneofs:
                out.append("\n" + "".join(_indent(oneof(o)) for o in oneof_order))
            body = [message(j) for j in declared]
        else:  # each field that makes a type, and each nested message, in protoc's order
            body = [field(i) for i in plain if i not in makers]
            placed: set[int] = set()
            for j in sorted(in_layout):
                if j not in made_by:
                    body.append(message(j))
                    continue
                o = next((o for o in oneof_order if made_by[j] in oneofs[o]), None)
                if o is None:
                    body.append(field(made_by[j]))
                elif o not in placed:
                    placed.add(o)
                    body.append(oneof(o))
            body += [oneof(o) for o in oneof_order if o not in placed]
            out.append("\n" + "".join(_indent(b) for b in body))
            body = []
        if m.extension_range:
            ranges = list(m.extension_range)
            if self.normalize:
                ranges.sort(key=lambda r: r.start)
            out.append(
                "\n"
                + _indent(
                    "".join(
                        f"extensions {_range(r.start, r.end - 1)}{self._bracketed(self._options(r.options))};\n"
                        for r in ranges
                    )
                )
            )
        extends = self._extends(full, path + (6,), m.extension)
        if extends:
            out.append("\n" + _indent(extends))
        body += [self._enum(path + (4, i), e) for i, e in enumerate(m.enum_type)]
        if body:
            out.append("\n" + _indent("".join(body)))
        out.append("}\n")
        return "".join(out)

    def _made_by_fields(self, full: str, m: descriptor_pb2.DescriptorProto) -> dict[int, int]:
        """Nested type index -> the index of the field that makes it (a map's entry, a
        group's body)."""
        index = {n.name: j for j, n in enumerate(m.nested_type)}
        made_by = {}
        for i, f in enumerate(m.field):
            if f.type not in (_FDP.TYPE_MESSAGE, _FDP.TYPE_GROUP):
                continue
            parent, _, name = self.schema.field_type(full, f).rpartition(".")
            j = index.get(name)
            if (
                parent == full
                and j is not None
                and (
                    f.type == _FDP.TYPE_GROUP or (f.label == _FDP.LABEL_REPEATED and m.nested_type[j].options.map_entry)
                )
            ):
                made_by[j] = i
        return made_by

    def _field(
        self,
        scope: str,
        path: tuple[int, ...],
        field: descriptor_pb2.FieldDescriptorProto,
        container: descriptor_pb2.DescriptorProto | None,
        in_oneof: bool = False,
    ) -> str:
        label = ""
        type_name = self._type(scope, field, path)
        if not in_oneof and not type_name.startswith("map<"):
            if field.proto3_optional:
                label = "optional "
            elif field.label == _FDP.LABEL_REPEATED:
                label = "repeated "
            elif not (self.proto3 or self.editions):
                label = "required " if field.label == _FDP.LABEL_REQUIRED else "optional "
        if field.type == _FDP.TYPE_GROUP and container is not None:
            body_name = self.schema.field_type(scope, field).rpartition(".")[2]
            for i, body in enumerate(container.nested_type):
                if body.name == body_name:
                    text = self._message(_join(scope, body.name), path[:-2] + (3, i), body, "")
                    return f"{label}group {body.name} = {field.number}{self._field_options(field)} {text}"
        return f"{label}{type_name} {field.name} = {field.number}{self._field_options(field)};\n"

    def _oneof(
        self, scope: str, path: tuple[int, ...], m: descriptor_pb2.DescriptorProto, index: int, members: list[int]
    ) -> str:
        out = [f"oneof {m.oneof_decl[index].name} {{"]
        options = self._options(m.oneof_decl[index].options)
        if options:
            out.append("\n" + _indent("".join(f"option {o};\n" for o in options)))
        out.append(
            "\n" + _indent("".join(self._field(scope, path + (2, i), m.field[i], m, in_oneof=True) for i in members))
        )
        out.append("}\n")
        return "".join(out)

    def _extends(self, scope: str, path: tuple[int, ...], fields) -> str:
        blocks: dict[str, list[int]] = {}
        for i, field in enumerate(fields):
            extendee = self._source(path + (i, 2)) if self.as_written else None
            if extendee:
                extendee = "".join(extendee.split())
            else:
                extendee = field.extendee if field.extendee.startswith(".") else f".{field.extendee}"
            blocks.setdefault(extendee, []).append(i)
        out = []
        for extendee, members in blocks.items():
            if self.normalize:
                members.sort(key=lambda i: fields[i].number)
            out.append(
                f"extend {extendee} {{\n"
                + _indent("".join(self._field(scope, path + (i,), fields[i], None) for i in members))
                + "}\n"
            )
        return "".join(out)

    def _enum(self, path: tuple[int, ...], e: descriptor_pb2.EnumDescriptorProto) -> str:
        out = [f"enum {e.name} {{"]
        reserved = self._reserved(e.reserved_range, e.reserved_name, end_exclusive=False)
        if reserved:
            out.append("\n" + _indent("".join(reserved)))
        options = self._options(e.options)
        if not reserved and (options or e.value):
            out.append("\n")
        out.append(_indent("".join(f"option {o};\n" for o in options)) if options else "")
        values = list(e.value)
        if self.normalize:
            # by number, then name; proto3 wants its zero value first
            values.sort(key=lambda v: (not (self.proto3 and v.number == 0), v.number, v.name))
        if values:
            out.append(
                _indent("".join(f"{v.name} = {v.number}{self._bracketed(self._options(v.options))};\n" for v in values))
            )
        out.append("}\n")
        return "".join(out)

    def _reserved(self, ranges, names, end_exclusive: bool) -> list[str]:
        entries = [(r.start, _range(r.start, r.end - 1 if end_exclusive else r.end)) for r in ranges]
        quote = (lambda n: n) if self.editions else _quote
        entries += [(None, quote(n)) for n in names]
        if self.normalize:
            entries.sort(key=lambda e: (e[0] is None, e[0] or 0, e[1]))
        return [f"reserved {text};\n" for _, text in entries]

    def _rpc_type(self, path: tuple[int, ...], name: str) -> str:
        written = self._source(path) if self.as_written else None
        return "".join(written.split()) if written else (name if name.startswith(".") else f".{name}")

    def _service(self, scope: str, path: tuple[int, ...], s: descriptor_pb2.ServiceDescriptorProto) -> str:
        out = [f"service {s.name} {{"]
        options = self._options(s.options)
        if options:
            out.append("\n" + _indent("".join(f"option {o};\n" for o in options)))
        if s.method:
            out.append("\n")
        for i, rpc in enumerate(s.method):
            request = self._rpc_type(path + (2, i, 2), rpc.input_type)
            response = self._rpc_type(path + (2, i, 3), rpc.output_type)
            text = (
                f"rpc {rpc.name} ({'stream ' if rpc.client_streaming else ''}{request}) "
                f"returns ({'stream ' if rpc.server_streaming else ''}{response})"
            )
            rpc_options = self._options(rpc.options)
            if rpc_options:
                text += " {\n" + _indent("".join(f"option {o};\n" for o in rpc_options)) + "}\n"
            else:
                text += ";\n"
            out.append(_indent(text))
        out.append("}\n")
        return "".join(out)


# --- compatibility (Confluent's protobuf SchemaDiff) --------------------------------------------

# The differences Confluent accepts; every other one makes the schemas incompatible.
_COMPATIBLE = frozenset(
    {
        "MESSAGE_ADDED",
        "MESSAGE_MOVED",
        "ENUM_ADDED",
        "ENUM_REMOVED",
        "ENUM_CONST_ADDED",
        "ENUM_CONST_CHANGED",
        "ENUM_CONST_REMOVED",
        "FIELD_ADDED",
        "FIELD_REMOVED",
        "FIELD_NAME_CHANGED",
        "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
        "ONEOF_ADDED",
        "ONEOF_REMOVED",
        "ONEOF_FIELD_ADDED",
        "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
    }
)
# Confluent's wording for the incompatible ones ({r}: the reader's schema, {w}: the writer's).
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the {r} schema does not match the package in the {w} schema",
    "MESSAGE_REMOVED": "The {r} schema is missing a MESSAGE type at path '{p}' in the {w} schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the {r} schema does not match the {w} schema",
    "FIELD_SCALAR_KIND_CHANGED": (
        "The kind of a SCALAR field at path '{p}' in the {r} schema does not match its kind in the {w} schema"
    ),
    "FIELD_NAMED_TYPE_CHANGED": (
        "The type of a MESSAGE field at path '{p}' in the {r} schema does not match its type in the {w} schema"
    ),
    "FIELD_NUMERIC_LABEL_CHANGED": (
        "The label for a NUMERIC field at path '{p}' in the {r} schema does not match its label in the {w} schema"
    ),
    "REQUIRED_FIELD_ADDED": "A required field at path '{p}' in the {r} schema is missing in the {w} schema",
    "REQUIRED_FIELD_REMOVED": "The {r} schema is missing a required field at path: '{p}' in the {w} schema",
    "ONEOF_FIELD_REMOVED": "The {r} schema is missing a oneof field at path '{p}' in the {w} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": (
        "Multiple fields in the oneof at path '{p}' in the {r} schema are outside a oneof in the {w} schema"
    ),
    "FIELD_MOVED_TO_EXISTING_ONEOF": (
        "A field in the oneof at path '{p}' in the {r} schema is outside an existing oneof in the {w} schema"
    ),
    "NESTING_TOO_DEEP": (
        "The message types at path '{p}' nest deeper than {limit} levels; compatibility is not checked that deep"
    ),
}
# Wire-compatible scalar groups (protobuf's "updating a message type" rules); an enum is a number.
_SCALAR_KINDS = {
    "int32": "GENERAL_NUMBER",
    "int64": "GENERAL_NUMBER",
    "uint32": "GENERAL_NUMBER",
    "uint64": "GENERAL_NUMBER",
    "bool": "GENERAL_NUMBER",
    "sint32": "SIGNED_NUMBER",
    "sint64": "SIGNED_NUMBER",
    "string": "STRING_OR_BYTES",
    "bytes": "STRING_OR_BYTES",
    "fixed32": "FIXED32",
    "sfixed32": "FIXED32",
    "fixed64": "FIXED64",
    "sfixed64": "FIXED64",
    "float": "FLOAT",
    "double": "DOUBLE",
}
# Message types compared through fields nest at most this deep (protobuf's own parse limit).
_MAX_DEPTH = 100


class _Diff:
    """The differences from `original` (the writer's schema) to `update` (the reader's)."""

    def __init__(self, original: ProtobufSchema, update: ProtobufSchema):
        self.sides = (original, update)
        self.path: list[str] = []
        self.diffs: list[tuple[str, str]] = []
        self.active: set[tuple[str, str]] = set()
        self.done: dict[tuple[str, str], bool] = {}

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append((kind, "#/" + "/".join(self.path + list(extra))))

    def messages(self) -> list[str]:
        original, update = (s.file for s in self.sides)
        if original.package != update.package:
            self.add("PACKAGE_CHANGED")
        self.types(
            (original.package, original.message_type, original.enum_type),
            (update.package, update.message_type, update.enum_type),
        )
        out: list[str] = []
        for kind, path in dict.fromkeys(self.diffs):
            if kind not in _COMPATIBLE:
                description = _DESCRIPTIONS[kind].format(p=path, r="reader", w="writer", limit=_MAX_DEPTH)
                out.append(f'{{errorType:"{kind}", description:"{description}"}}')
        return out

    def types(self, original, update) -> None:
        """Messages paired by name (map entries aside), then enums (every enum change is
        compatible in Confluent's rules, so enums need no walk)."""
        (o_scope, o_messages, _), (u_scope, u_messages, _) = original, update
        # a map's entry type is compared through the map field (a .proto file has none)
        o_by_name = {m.name: (i, m) for i, m in enumerate(o_messages) if not m.options.map_entry}
        u_by_name = {m.name: (i, m) for i, m in enumerate(u_messages) if not m.options.map_entry}
        for name in sorted(o_by_name.keys() | u_by_name.keys()):
            self.path.append(name)
            if name not in u_by_name:
                self.add("MESSAGE_REMOVED")
            elif name in o_by_name:
                (o_index, o_message), (u_index, u_message) = o_by_name[name], u_by_name[name]
                self.message((_join(o_scope, name), o_message), (_join(u_scope, name), u_message))
                if o_index != u_index:
                    self.add("MESSAGE_MOVED")
            self.path.pop()

    def message(self, original, update) -> bool:
        """Compare two message types once; whether every difference found is compatible."""
        key = (original[0], update[0])
        if key in self.done:
            return self.done[key]
        if key in self.active:  # a recursive type: its comparison is already under way
            return True
        if len(self.active) >= _MAX_DEPTH:
            self.add("NESTING_TOO_DEEP")
            return False
        self.active.add(key)
        start = len(self.diffs)
        self.fields(original, update)
        (o_full, o_message), (u_full, u_message) = original, update
        self.types((o_full, o_message.nested_type, ()), (u_full, u_message.nested_type, ()))
        self.active.discard(key)
        compatible = all(kind in _COMPATIBLE for kind, _ in self.diffs[start:])
        self.done[key] = compatible
        return compatible

    @staticmethod
    def _members(message: descriptor_pb2.DescriptorProto):
        by_tag, oneof_of, oneofs = {}, {}, {}
        for field in message.field:
            by_tag[field.number] = field
            if field.HasField("oneof_index") and not field.proto3_optional:
                name = message.oneof_decl[field.oneof_index].name
                oneof_of[field.number] = name
                oneofs.setdefault(name, []).append(field)
        return by_tag, oneof_of, oneofs

    def fields(self, original, update) -> None:
        (o_full, o_message), (u_full, u_message) = original, update
        o_by_tag, o_oneof_of, o_oneofs = self._members(o_message)
        u_by_tag, u_oneof_of, u_oneofs = self._members(u_message)
        # a oneof gone with none of its fields kept anywhere is a compatible deletion
        deleted = {
            name
            for name, fields in o_oneofs.items()
            if name not in u_oneofs and not any(f.number in u_by_tag for f in fields)
        }
        # fields that were independent (or in different oneofs) now exclusive: incompatible
        for name, fields in u_oneofs.items():
            origins, moved_in = set(), 0
            for field in fields:
                if field.number in o_oneof_of:
                    origins.add(("oneof", o_oneof_of[field.number]))
                elif field.number in o_by_tag:
                    origins.add(("field", field.number))
                    moved_in += 1
            if len(origins) > 1:
                self.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1 else "FIELD_MOVED_TO_EXISTING_ONEOF", name)
        for name in sorted(o_oneofs.keys() | u_oneofs.keys()):
            if name not in u_oneofs:
                self.add("ONEOF_REMOVED", name)
            elif name not in o_oneofs:
                self.add("ONEOF_ADDED", name)
        o_file, u_file = (s.file for s in self.sides)
        for tag in sorted(o_by_tag.keys() | u_by_tag.keys()):
            o_field, u_field = o_by_tag.get(tag), u_by_tag.get(tag)
            o_oneof, u_oneof = o_oneof_of.get(tag), u_oneof_of.get(tag)
            if u_field is None:
                if o_oneof is not None:
                    if o_oneof not in deleted:
                        self.add("ONEOF_FIELD_REMOVED", o_oneof, str(tag))
                else:
                    self.add(
                        "REQUIRED_FIELD_REMOVED" if _label(o_file, o_field, False) == "required" else "FIELD_REMOVED",
                        str(tag),
                    )
            elif o_field is None:
                if u_oneof is not None:
                    self.add("ONEOF_FIELD_ADDED", u_oneof, str(tag))
                else:
                    self.add(
                        "REQUIRED_FIELD_ADDED" if _label(u_file, u_field, False) == "required" else "FIELD_ADDED",
                        str(tag),
                    )
            else:
                if o_oneof is not None and u_oneof is None:
                    self.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(tag))
                where = [u_oneof, str(tag)] if u_oneof is not None else [str(tag)]
                self.path.extend(where)
                if o_field.name != u_field.name:
                    self.add("FIELD_NAME_CHANGED")
                self.compare(
                    _label(o_file, o_field, o_oneof is not None),
                    self._type(0, o_full, o_field),
                    _label(u_file, u_field, u_oneof is not None),
                    self._type(1, u_full, u_field),
                )
                del self.path[-len(where) :]

    def _type(self, side: int, scope: str, field: descriptor_pb2.FieldDescriptorProto):
        """A field's type: ("scalar", name), ("enum", full), ("message", full) or
        ("map", key type, value type)."""
        if field.type in _SCALARS:
            return ("scalar", _SCALARS[field.type])
        schema = self.sides[side]
        full = schema.field_type(scope, field)
        info = schema.types[full]
        if info.is_enum:
            return ("enum", full)
        if info.is_map and field.label == _FDP.LABEL_REPEATED:
            key, value = info.proto.field[:2]
            return ("map", self._type(side, full, key), self._type(side, full, value))
        return ("message", full)

    def compare(self, o_label, o_type, u_label, u_type) -> None:
        o_kind = "scalar" if o_type[0] == "enum" else o_type[0]
        u_kind = "scalar" if u_type[0] == "enum" else u_type[0]
        if o_kind != u_kind:
            self.add("FIELD_KIND_CHANGED")
        elif o_kind == "scalar":
            o_scalar = "GENERAL_NUMBER" if o_type[0] == "enum" else _SCALAR_KINDS[o_type[1]]
            u_scalar = "GENERAL_NUMBER" if u_type[0] == "enum" else _SCALAR_KINDS[u_type[1]]
            if o_scalar != u_scalar:
                self.add("FIELD_SCALAR_KIND_CHANGED")
            elif o_label is not None and u_label is not None and o_label != u_label:
                self.add(
                    "FIELD_STRING_OR_BYTES_LABEL_CHANGED"
                    if o_scalar == "STRING_OR_BYTES"
                    else "FIELD_NUMERIC_LABEL_CHANGED"
                )
        elif o_kind == "map":
            self.compare(None, o_type[1], None, u_type[1])
            self.compare(None, o_type[2], None, u_type[2])
        else:
            self.message_field(o_type[1], u_type[1])

    def message_field(self, o_full: str, u_full: str) -> None:
        o_info, u_info = self.sides[0].types[o_full], self.sides[1].types[u_full]
        o_local = o_full.removeprefix(o_info.package + ".") if o_info.package else o_full
        u_local = u_full.removeprefix(u_info.package + ".") if u_info.package else u_full
        if o_local != u_local:
            self.add("FIELD_NAMED_TYPE_CHANGED")
            return
        # Confluent reports what it finds inside the field's type at the type's own path
        saved, self.path = self.path, o_local.split(".")
        compatible = self.message((o_full, o_info.proto), (u_full, u_info.proto))
        self.path = saved
        if not compatible:
            self.add("FIELD_NAMED_TYPE_CHANGED")


def _label(
    file: descriptor_pb2.FileDescriptorProto, field: descriptor_pb2.FieldDescriptorProto, in_oneof: bool
) -> str | None:
    """A field's label as a .proto file states it (None: none written)."""
    if in_oneof:
        return None
    if field.proto3_optional:
        return "optional"
    if field.label == _FDP.LABEL_REPEATED:
        return "repeated"
    if file.syntax in ("proto3", "editions"):
        return None
    return "required" if field.label == _FDP.LABEL_REQUIRED else "optional"


FORMAT = ProtobufFormat()
