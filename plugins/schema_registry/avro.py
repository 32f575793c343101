"""The AVRO format of the schema registry (issue 36), as Confluent's AvroSchema behaves.

- ``parse``: the schema's JSON, checked as Avro Java's parser checks it (names, fields,
  symbols, unions, sizes; fastavro checks the default values). The referenced
  schemas are parsed first, so their named types are known to the schema by name.
- ``canonical()``: what Confluent stores and returns, Avro Java's ``Schema.toString(refs,
  false)``: compact JSON with Avro's attribute order; docs, defaults, aliases and custom
  properties kept; a named type is written in full once, then by name, and the referenced
  schemas' types by name only.
- ``normalized()``: Confluent's ``normalize``: the same with custom properties and aliases
  sorted and empty docs dropped, so schemas that differ only there get one id.
- ``compatibility_errors(reader, writer)``: Avro's schema resolution as Avro Java's
  ``SchemaCompatibility`` checks it (what Confluent's registry runs), each incompatibility
  in Confluent's message form, "reader"/"writer" naming the two schemas; at most
  ``MAX_PAIRS`` pairs of types are compared.
- ``validate(payload)``: one datum in Avro's binary encoding, decoded by fastavro against a
  plain copy of the schema (no logical-type conversion: Confluent's readers do not convert
  either), which must use the payload exactly. A recursive schema, or one with arrays whose
  items take no bytes, is first walked here with bounds: records, arrays and maps nest at
  most ``jsontext.MAX_VALUE_NESTING`` deep, and all arrays and maps together announce no
  more items than the payload has bytes plus 65,536, so a small payload can neither
  overflow fastavro's stack nor spin it through billions of empty items.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from typing import Any

import fastavro

from . import jsontext
from .formats import InvalidPayload, InvalidSchema

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
# Avro Java's Schema.Type names: a short name equal to one is always written in full.
_TYPE_NAMES = PRIMITIVES | {"record", "enum", "array", "map", "union", "fixed"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SCHEMA_RESERVED = frozenset(
    {"doc", "fields", "items", "name", "namespace", "size", "symbols", "values", "type", "aliases"}
)
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
_ORDERS = ("ascending", "descending", "ignore")
# Work one compatibility check may do: pairs of (reader, writer) types compared.
MAX_PAIRS = 100_000
_NO_DEFAULT = object()


class _Undefined(InvalidSchema):
    """A name that no schema defined (yet): a reference may define it later."""


class _Type:
    """One node of a parsed schema. Named types (record, enum, fixed) are shared by every
    place that names them, so a recursive schema is a cyclic graph."""

    __slots__ = (
        "kind", "props", "name", "space", "doc", "aliases", "is_error",
        "fields", "symbols", "enum_default", "size", "items", "branches",
    )  # fmt: skip

    def __init__(self, kind: str, props: dict[str, Any] | None = None) -> None:
        self.kind = kind
        self.props = props or {}
        self.name: str | None = None
        self.space: str | None = None
        self.doc: str | None = None
        self.aliases: list[tuple[str | None, str]] = []  # (namespace, name)
        self.is_error = False
        self.fields: list[_Field] = []
        self.symbols: list[str] = []
        self.enum_default: str | None = None
        self.size = 0
        self.items: _Type | None = None  # an array's items, a map's values
        self.branches: list[_Type] = []

    @property
    def full(self) -> str:
        return f"{self.space}.{self.name}" if self.space else self.name or self.kind

    def alias_names(self) -> set[str]:
        """Avro Java's getAliases(): full names (".name" for a null namespace alias of a
        namespaced type, which then matches nothing)."""
        return {
            f".{name}" if space is None and self.space else (f"{space}.{name}" if space else name)
            for space, name in self.aliases
        }


class _Field:
    __slots__ = ("name", "type", "doc", "default", "order", "aliases", "props", "pos")

    def __init__(self, name: str, type_: _Type, pos: int) -> None:
        self.name = name
        self.type = type_
        self.pos = pos
        self.doc: str | None = None
        self.default: Any = _NO_DEFAULT
        self.order = "ascending"
        self.aliases: list[str] = []
        self.props: dict[str, Any] = {}


def _text(js: dict, key: str) -> str | None:
    """Jackson's textValue(): the string, or None for anything else."""
    value = js.get(key)
    return value if isinstance(value, str) else None


def _props(js: dict, reserved: frozenset[str]) -> dict[str, Any]:
    return {key: value for key, value in js.items() if key not in reserved}


def _split_name(name: str, space: str | None) -> tuple[str | None, str]:
    if "." in name:
        space, name = name.rsplit(".", 1)
    return (space or None), name


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise InvalidSchema(f"Illegal {what}: {name!r}")


def _aliases(js: dict) -> list[str]:
    aliases = js.get("aliases")
    if aliases is None:
        return []
    if not isinstance(aliases, list):
        raise InvalidSchema(f"aliases not an array: {jsontext.dumps(js)}")
    if not all(isinstance(alias, str) for alias in aliases):
        raise InvalidSchema(f"alias not a string: {jsontext.dumps(aliases)}")
    return list(dict.fromkeys(aliases))


class _Builder:
    """Builds _Type graphs from schema JSON, keeping the named types of every schema it
    built (the references', then the schema's own)."""

    def __init__(self) -> None:
        self.names: dict[str, _Type] = {}

    def build(self, js: Any, space: str | None) -> _Type:
        if isinstance(js, str):
            return self._named_ref(js, space)
        if isinstance(js, list):
            return self._union(js, space)
        if not isinstance(js, dict):
            raise InvalidSchema(f"Schema not yet supported: {jsontext.dumps(js)}")
        kind = _text(js, "type")
        if kind is None:
            raise InvalidSchema(f"No type: {jsontext.dumps(js)}")
        if kind in PRIMITIVES:
            return _Type(kind, _props(js, _SCHEMA_RESERVED))
        if kind in ("record", "error"):
            return self._record(js, space, kind == "error")
        if kind == "enum":
            return self._enum(js, space)
        if kind == "fixed":
            return self._fixed(js, space)
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            if key not in js:
                raise InvalidSchema(f"{kind.capitalize()} has no {key} type: {jsontext.dumps(js)}")
            node = _Type(kind, _props(js, _SCHEMA_RESERVED))
            node.items = self.build(js[key], space)
            return node
        raise InvalidSchema(
            'A schema "type" MUST be a primitive type or one of "enum", "fixed", "record", "error", "array" or "map".'
        )

    def _named_ref(self, name: str, space: str | None) -> _Type:
        if name in PRIMITIVES:
            return _Type(name)
        qualified = f"{space}.{name}" if space and "." not in name else name
        found = self.names.get(qualified) or self.names.get(name)
        if found is None:
            raise _Undefined(f'Undefined name: "{qualified}"')
        return found

    def _union(self, js: list, space: str | None) -> _Type:
        node = _Type("union")
        seen = set()
        for branch_js in js:
            branch = self.build(branch_js, space)
            if branch.kind == "union":
                raise InvalidSchema(f"Nested union: {jsontext.dumps(js)}")
            key = branch.full if branch.name else branch.kind
            if key in seen:
                raise InvalidSchema(f"Duplicate in union:{key}")
            seen.add(key)
            node.branches.append(branch)
        return node

    def _declare(self, js: dict, space: str | None, kind: str) -> _Type:
        name = _text(js, "name")
        if name is None:
            raise InvalidSchema(f"No name in schema: {jsontext.dumps(js)}")
        namespace = _text(js, "namespace")
        space, name = _split_name(name, space if namespace is None else namespace)
        _check_name(name, "name")
        for part in (space or "").split(".") if space else ():
            _check_name(part, "namespace part")
        node = _Type(kind)
        node.name, node.space = name, space
        if node.full in PRIMITIVES:
            raise InvalidSchema(f"Schemas may not be named after primitives: {node.full}")
        if node.full in self.names:
            raise InvalidSchema(f"Can't redefine: {node.full}")
        node.doc = _text(js, "doc")
        node.aliases = [_split_name(alias, space) for alias in _aliases(js)]
        node.props = _props(js, _ENUM_RESERVED if kind == "enum" else _SCHEMA_RESERVED)
        self.names[node.full] = node
        return node

    def _record(self, js: dict, space: str | None, is_error: bool) -> _Type:
        fields_js = js.get("fields")
        if not isinstance(fields_js, list):
            raise InvalidSchema(f"Record has no fields: {jsontext.dumps(js)}")
        node = self._declare(js, space, "record")
        node.is_error = is_error
        names = set()
        for pos, field_js in enumerate(fields_js):
            if not isinstance(field_js, dict) or _text(field_js, "name") is None:
                raise InvalidSchema(f"No field name: {jsontext.dumps(field_js)}")
            name = field_js["name"]
            _check_name(name, "field name")
            if name in names:
                raise InvalidSchema(f"Duplicate field {name} in record {node.full}")
            names.add(name)
            if "type" not in field_js:
                raise InvalidSchema(f"No field type: {jsontext.dumps(field_js)}")
            field = _Field(name, self.build(field_js["type"], node.space), pos)
            field.doc = _text(field_js, "doc")
            if "default" in field_js:
                field.default = field_js["default"]
            order = field_js.get("order", "ascending")
            if not isinstance(order, str) or order.lower() not in _ORDERS:
                raise InvalidSchema(f"Invalid field order: {jsontext.dumps(order)}")
            field.order = order.lower()
            field.aliases = _aliases(field_js)
            field.props = _props(field_js, _FIELD_RESERVED)
            node.fields.append(field)
        return node

    def _enum(self, js: dict, space: str | None) -> _Type:
        symbols = js.get("symbols")
        if not isinstance(symbols, list):
            raise InvalidSchema(f"Enum has no symbols: {jsontext.dumps(js)}")
        node = self._declare(js, space, "enum")
        for symbol in symbols:
            if not isinstance(symbol, str):
                raise InvalidSchema(f"Enum symbol not a string: {jsontext.dumps(symbol)}")
            _check_name(symbol, "enum symbol")
            if symbol in node.symbols:
                raise InvalidSchema(f"Duplicate enum symbol: {symbol}")
            node.symbols.append(symbol)
        if "default" in js:
            default = js["default"]
            if default not in node.symbols:
                raise InvalidSchema(f"The Enum Default: {default} is not in the enum symbol set: {node.symbols}")
            node.enum_default = default
        return node

    def _fixed(self, js: dict, space: str | None) -> _Type:
        size = js.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < 2**31:
            raise InvalidSchema(f"Invalid or no size: {jsontext.dumps(js)}")
        node = self._declare(js, space, "fixed")
        node.size = size
        return node


# -- writing a parsed schema back out --------------------------------------------------


def _qualified(space: str | None, name: str, current: str | None) -> str:
    """Avro Java's Name.getQualified: the short name inside its own namespace, unless it
    reads as a type name."""
    if space is not None and space == current and name not in _TYPE_NAMES:
        return name
    return f"{space}.{name}" if space else name


def _sorted_props(props: dict[str, Any]) -> dict[str, Any]:
    """Confluent's normalised property order: the logical type (and a decimal's precision
    and scale) first, then the rest by name."""
    first = ["logicalType"] if "logicalType" in props else []
    if props.get("logicalType") == "decimal":
        first += [key for key in ("precision", "scale") if key in props]
    rest = sorted(key for key in props if key not in first)
    return {key: props[key] for key in first + rest}


class _Writer:
    """Avro Java's Schema.toJson. ``normalize``: Confluent's normalised variant. ``plain``:
    for fastavro, which cannot name a type of no namespace from inside a namespace: every
    named type renamed ``t<n>`` in no namespace, no docs, aliases or properties (so no
    logical types: nothing is converted, and an invalid one is ignored as Avro Java does),
    the defaults kept only for fastavro to check them (``"check"``, else ``"decode"``)."""

    def __init__(self, known: set[str], normalize: bool = False, plain: str = "") -> None:
        self.known = set(known)
        self.normalize = normalize
        self.plain = plain
        self.renamed: dict[str, str] = {}

    def props(self, props: dict[str, Any]) -> dict[str, Any]:
        if self.plain:
            return {}
        return _sorted_props(props) if self.normalize else props

    def write(self, node: _Type, space: str | None) -> Any:
        kind = node.kind
        if kind in PRIMITIVES:
            props = self.props(node.props)
            return {"type": kind, **props} if props else kind
        if kind == "union":
            return [self.write(branch, space) for branch in node.branches]
        if kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            return {"type": kind, key: self.write(node.items, space), **self.props(node.props)}
        if self.plain:
            return self._plain_named(node)
        if node.full in self.known:
            return _qualified(node.space, node.name, space)
        self.known.add(node.full)
        out: dict[str, Any] = {"type": "error" if node.is_error else kind, "name": node.name}
        if node.space != space:
            out["namespace"] = node.space or ""
        if node.doc is not None and not (self.normalize and node.doc == ""):
            out["doc"] = node.doc
        if kind == "record":
            out["fields"] = [self._field(field, node.space) for field in node.fields]
        elif kind == "enum":
            out["symbols"] = list(node.symbols)
            if node.enum_default is not None:
                out["default"] = node.enum_default
        else:
            out["size"] = node.size
        out.update(self.props(node.props))
        if node.aliases:
            aliases = node.aliases
            if self.normalize:
                aliases = sorted(aliases, key=lambda alias: f"{alias[0]}.{alias[1]}" if alias[0] else alias[1])
            out["aliases"] = [_qualified(alias_space, alias, node.space) for alias_space, alias in aliases]
        return out

    def _field(self, field: _Field, space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": field.name, "type": self.write(field.type, space)}
        if field.doc is not None:
            out["doc"] = field.doc
        if field.default is not _NO_DEFAULT:
            out["default"] = field.default
        if field.order != "ascending":
            out["order"] = field.order
        if field.aliases:
            out["aliases"] = sorted(field.aliases) if self.normalize else list(field.aliases)
        out.update(self.props(field.props))
        return out

    def _plain_named(self, node: _Type) -> Any:
        if node.full in self.renamed:
            return self.renamed[node.full]
        name = self.renamed[node.full] = f"t{len(self.renamed)}"
        out: dict[str, Any] = {"type": node.kind, "name": name}
        if node.kind == "record":
            out["fields"] = fields = []
            for field in node.fields:
                fields.append({"name": field.name, "type": self.write(field.type, None)})
                if self.plain == "check" and field.default is not _NO_DEFAULT:
                    fields[-1]["default"] = field.default
        elif node.kind == "enum":
            out["symbols"] = list(node.symbols)
            if self.plain == "check" and node.enum_default is not None:
                out["default"] = node.enum_default
        else:
            out["size"] = node.size
        out.update(self.props(node.props))
        return out


# -- compatibility: Avro Java's SchemaCompatibility ------------------------------------


def _describe(kind: str, location: str, info: str) -> str:
    """Confluent's Difference message for one incompatibility."""
    if kind == "FIXED_SIZE_MISMATCH":
        text = (
            f"The size of FIXED type field at path '{location}' in the reader schema does not"
            " match with the writer schema"
        )
    elif kind == "TYPE_MISMATCH":
        text = f"The type (path '{location}') of a field in the reader schema does not match with the writer schema"
    elif kind == "NAME_MISMATCH":
        text = f"The name of the schema has changed (path '{location}')"
    elif kind == "MISSING_ENUM_SYMBOLS":
        text = f"The reader schema is missing enum symbols '{info}' at path '{location}' in the writer schema"
    elif kind == "MISSING_UNION_BRANCH":
        text = f"The reader schema is missing a type inside a union field at path '{location}' in the writer schema"
    else:  # READER_FIELD_MISSING_DEFAULT_VALUE
        text = (
            f"The field '{info}' at path '{location}' in the reader schema has no default"
            " value and is missing in the writer schema"
        )
    return f"{{errorType:'{kind}', description:'{text}', additionalInfo:'{info}'}}"


def _pointer(location: list[str]) -> str:
    """The JSON pointer of a location (its root token left out)."""
    return "/" + "/".join(token.replace("~", "~0").replace("/", "~1") for token in location[1:])


_IN_PROGRESS: list = []


class _Checker:
    """Can data written with ``writer`` be read with ``reader``? Memoised per pair of
    nodes, a pair met again while it is being checked counting as compatible (recursive
    schemas); at most MAX_PAIRS pairs are compared."""

    def __init__(self) -> None:
        self.memo: dict[tuple[int, int], list[tuple[str, str, str]]] = {}
        self.pairs = 0

    def check(self, reader: _Type, writer: _Type) -> list[tuple[str, str, str]]:
        return self._pair("", reader, writer, [])

    def _pair(self, token: str, reader: _Type, writer: _Type, location: list[str]):
        location.append(token)
        key = (id(reader), id(writer))
        result = self.memo.get(key)
        if result is None:
            self.pairs += 1
            if self.pairs > MAX_PAIRS:
                raise InvalidSchema(f"more than {MAX_PAIRS} pairs of types to compare")
            self.memo[key] = _IN_PROGRESS
            result = self._calculate(reader, writer, location)
            self.memo[key] = result
        location.pop()
        return result

    @staticmethod
    def _incompatible(kind: str, location: list[str], info: str):
        return [(kind, _pointer(location), info)]

    def _calculate(self, reader: _Type, writer: _Type, location: list[str]):
        rk, wk = reader.kind, writer.kind
        if rk == wk:
            if rk in PRIMITIVES:
                return []
            if rk in ("array", "map"):
                token = "items" if rk == "array" else "values"
                return self._pair(token, reader.items, writer.items, location)
            if rk == "union":
                result = []
                for index, branch in enumerate(writer.branches):
                    location.append(str(index))
                    if self.check(reader, branch):
                        result += self._incompatible(
                            "MISSING_UNION_BRANCH", location,
                            f"reader union lacking writer type: {branch.kind.upper()}",
                        )  # fmt: skip
                    location.pop()
                return result
            result = self._names(reader, writer, location)
            if rk == "fixed":
                return result + self._size(reader, writer, location)
            if rk == "enum":
                return result + self._symbols(reader, writer, location)
            return result + self._fields(reader, writer, location)
        if wk == "union":
            result = []
            for index, branch in enumerate(writer.branches):
                result += self._pair(str(index), reader, branch, location)
            return result
        if rk == "union":
            if any(not self.check(branch, writer) for branch in reader.branches):
                return []
            return self._incompatible(
                "MISSING_UNION_BRANCH", location, f"reader union lacking writer type: {wk.upper()}"
            )
        if (rk, wk) in _PROMOTIONS:
            return []
        return self._incompatible(
            "TYPE_MISMATCH", location,
            f"reader type: {rk.upper()} not compatible with writer type: {wk.upper()}",
        )  # fmt: skip

    def _names(self, reader: _Type, writer: _Type, location: list[str]):
        if reader.name == writer.name or writer.full in reader.alias_names():
            return []
        return self._incompatible("NAME_MISMATCH", location + ["name"], f"expected: {writer.full}")

    def _size(self, reader: _Type, writer: _Type, location: list[str]):
        if reader.size == writer.size:
            return []
        info = f"expected: {writer.size}, found: {reader.size}"
        return self._incompatible("FIXED_SIZE_MISMATCH", location + ["size"], info)

    def _symbols(self, reader: _Type, writer: _Type, location: list[str]):
        missing = sorted(set(writer.symbols) - set(reader.symbols))
        if not missing or reader.enum_default in reader.symbols:
            return []
        info = "[" + ", ".join(missing) + "]"
        return self._incompatible("MISSING_ENUM_SYMBOLS", location + ["symbols"], info)

    def _fields(self, reader: _Type, writer: _Type, location: list[str]):
        result = []
        location.append("fields")
        by_name = {field.name: field for field in writer.fields}
        for field in reader.fields:
            location.append(str(field.pos))
            matches = [by_name[name] for name in [field.name, *field.aliases] if name in by_name]
            if len(matches) > 1:
                raise InvalidSchema(
                    f"Reader record field {field.name} matches multiple fields in writer record schema {writer.full}"
                )
            if matches:
                result += self._pair("type", field.type, matches[0].type, location)
            elif field.default is not _NO_DEFAULT:
                pass
            elif field.type.kind == "enum" and field.type.enum_default is not None:
                # Avro Java checks the enum against the writer *record* here.
                result += self._pair("type", field.type, writer, location)
            else:
                result += self._incompatible("READER_FIELD_MISSING_DEFAULT_VALUE", location, field.name)
            location.pop()
        location.pop()
        return result


# reader kind, writer kind: Avro's promotions.
_PROMOTIONS = frozenset({
    ("long", "int"), ("float", "int"), ("float", "long"),
    ("double", "int"), ("double", "long"), ("double", "float"),
    ("bytes", "string"), ("string", "bytes"),
})  # fmt: skip


# -- decoding a payload ----------------------------------------------------------------


def _needs_bounds(root: _Type) -> bool:
    """Whether fastavro alone could be driven unboundedly by a small payload: the schema is
    recursive (nesting limited only by the payload's size), or has an array whose items
    take no bytes (as many as the block count says)."""
    empty: dict[int, bool] = {}

    def takes_no_bytes(node: _Type) -> bool:
        if node.kind == "null" or (node.kind == "fixed" and node.size == 0):
            return True
        if node.kind != "record":
            return False
        if id(node) not in empty:
            empty[id(node)] = False  # a record that contains itself takes bytes
            empty[id(node)] = all(takes_no_bytes(field.type) for field in node.fields)
        return empty[id(node)]

    on_path: set[int] = set()
    done: set[int] = set()

    def walk(node: _Type) -> bool:
        if node.kind == "record":
            if id(node) in on_path:
                return True
            if id(node) in done:
                return False
            on_path.add(id(node))
            found = any(walk(field.type) for field in node.fields)
            on_path.discard(id(node))
            done.add(id(node))
            return found
        if node.kind == "array" and takes_no_bytes(node.items):
            return True
        if node.kind in ("array", "map"):
            return walk(node.items)
        return node.kind == "union" and any(walk(branch) for branch in node.branches)

    return walk(root)


class _BoundedWalk:
    """Skips one datum with the limits of the module docstring, raising InvalidPayload."""

    def __init__(self, payload: memoryview) -> None:
        self.data = payload
        self.pos = 0
        self.items_left = len(payload) + _FREE_ITEMS

    def long(self) -> int:
        value = shift = 0
        for _ in range(10):
            if self.pos >= len(self.data):
                raise InvalidPayload("the payload ends inside a number")
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise InvalidPayload("a number is longer than 10 bytes")

    def take(self, size: int, what: str) -> None:
        if size < 0 or size > len(self.data) - self.pos:
            raise InvalidPayload(f"{what} of {size} bytes does not fit in the payload")
        self.pos += size

    def skip(self, node: _Type, depth: int) -> None:
        kind = node.kind
        if kind in ("record", "array", "map"):
            depth += 1
            if depth > jsontext.MAX_VALUE_NESTING:
                raise InvalidPayload(f"the value nests deeper than {jsontext.MAX_VALUE_NESTING} levels")
        if kind == "record":
            for field in node.fields:
                self.skip(field.type, depth)
        elif kind == "union":
            index = self.long()
            if not 0 <= index < len(node.branches):
                raise InvalidPayload(f"union index {index} out of range")
            self.skip(node.branches[index], depth)
        elif kind in ("array", "map"):
            while count := self.long():
                if count < 0:
                    count = -count
                    self.long()  # the block's size in bytes
                self.items_left -= count
                if self.items_left < 0:
                    raise InvalidPayload(
                        f"the arrays and maps announce more items than a payload of {len(self.data)} bytes can hold"
                    )
                for _ in range(count):
                    if kind == "map":
                        self.take(self.long(), "a map key")
                    self.skip(node.items, depth)
        elif kind in ("string", "bytes"):
            self.take(self.long(), f"a {kind}")
        elif kind in ("int", "long"):
            self.long()
        elif kind == "enum":
            index = self.long()
            if not 0 <= index < len(node.symbols):
                raise InvalidPayload(f"enum index {index} out of range")
        else:
            self.take(_FIXED_WIDTH.get(kind, node.size), f"a {kind}")


_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
# Items that take no bytes (nulls, empty records) beyond one per byte of the payload.
_FREE_ITEMS = 1 << 16


_DECODE_ERRORS = {
    EOFError: "the payload ends early",
    IndexError: "a union branch or enum symbol out of range",
    UnicodeDecodeError: "a string that is not UTF-8",
}


# -- the format ------------------------------------------------------------------------


def _load(text: str) -> Any:
    try:
        return jsontext.loads(text, jsontext.MAX_SCHEMA_NESTING)
    except ValueError as exc:
        raise InvalidSchema(f"Invalid AVRO schema: {exc}") from None


class AvroSchema:
    """A parsed AVRO schema (``ParsedSchema``)."""

    schema_type = "AVRO"

    def __init__(self, root: _Type, known: list[str]) -> None:
        self.root = root
        self._known = set(known)
        self._canonical: str | None = None
        self._normalized: str | None = None
        self._decoder: tuple[Any, bool] | None = None

    @property
    def name(self) -> str | None:
        """The record's full name (Confluent's ``name()``, which RecordNameStrategy uses)."""
        return self.root.full if self.root.kind == "record" else None

    def canonical(self) -> str:
        if self._canonical is None:
            self._canonical = jsontext.dumps(_Writer(self._known).write(self.root, None))
        return self._canonical

    def normalized(self) -> str:
        if self._normalized is None:
            writer = _Writer(self._known, normalize=True)
            self._normalized = jsontext.dumps(writer.write(self.root, None))
        return self._normalized

    def validate(self, payload: memoryview) -> None:
        if self._decoder is None:
            plain = _Writer(set(), plain="decode").write(self.root, None)
            self._decoder = fastavro.parse_schema(plain), _needs_bounds(self.root)
        decoder, needs_bounds = self._decoder
        if needs_bounds:
            _BoundedWalk(payload).skip(self.root, 0)
        stream = io.BytesIO(payload)
        try:
            fastavro.schemaless_reader(stream, decoder, None)
        except Exception as exc:  # what fastavro raises tells why
            reason = _DECODE_ERRORS.get(type(exc)) or f"{type(exc).__name__}: {exc}"
            raise InvalidPayload(f"not a datum of the AVRO schema: {reason}") from None
        left = len(payload) - stream.tell()
        if left:
            raise InvalidPayload(f"not a datum of the AVRO schema: {left} bytes left over after it")

    def __repr__(self) -> str:
        return f"AvroSchema({self.canonical()})"


class AvroFormat:
    """The AVRO ``SchemaFormat``."""

    schema_type = "AVRO"

    def parse(self, schema: str, references: Mapping[str, str]) -> AvroSchema:
        builder = _Builder()
        known: list[str] = []
        # A reference may use names another one defines: parse them in whichever order
        # resolves every name (Confluent hands them over dependencies first).
        pending = [_load(text) for text in references.values()]
        while pending:
            failed = []
            for raw in pending:
                names = dict(builder.names)
                try:
                    node = builder.build(raw, None)
                except _Undefined:
                    builder.names = names
                    failed.append(raw)
                    continue
                if node.name is not None:
                    known.append(node.full)
            if len(failed) == len(pending):
                builder.build(failed[0], None)  # raises its undefined name
            pending = failed
        root = builder.build(_load(schema), None)
        # fastavro checks what the builder leaves out: defaults against their types.
        try:
            fastavro.parse_schema(_Writer(set(), plain="check").write(root, None))
        except Exception as exc:  # fastavro raises SchemaParseException, ValueError, ...
            raise InvalidSchema(f"Invalid AVRO schema: {exc}") from None
        return AvroSchema(root, known)

    def compatibility_errors(self, reader: AvroSchema, writer: AvroSchema) -> list[str]:
        try:
            found = _Checker().check(reader.root, writer.root)
        except InvalidSchema as exc:
            return [f"Unexpected exception during compatibility check: {exc}"]
        return [_describe(kind, location, info) for kind, location, info in found]


FORMAT = AvroFormat()
